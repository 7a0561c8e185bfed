from datetime import datetime

import pytest

from memory.bank import MemoryBank
from memory.forgetting import PAPER
from memory.stores.sqlite import SqliteStores

ENGINES = ("sqlite", "postgres")  # SQLite files + FAISS, PostgreSQL + pgvector


@pytest.fixture
def paper_bank(tmp_path, e5_embedder):
    """Like ``bank`` (tests/conftest.py), with the forgetting law on the paper's scale."""
    bank = MemoryBank(
        SqliteStores(tmp_path / "home"), e5_embedder, policy=PAPER
    )  # the law on the paper's scale (days, S = 1)
    yield bank
    bank.close()


@pytest.fixture(params=ENGINES)
def open_bank(request, tmp_path, e5_embedder):
    """Opens banks (the paper's forgetting law unless told otherwise) over one store of each
    engine in turn: a home folder, or a fresh PostgreSQL database. Opening a second bank over the
    same store is a restart, or another worker."""
    if request.param == "postgres":
        from memory.stores.postgres import PostgresStores

        url = request.getfixturevalue("pg_url")

        def stores(**kw):
            return PostgresStores(url, **kw)
    else:
        from memory.stores.sqlite import SqliteStores

        def stores(**kw):
            return SqliteStores(tmp_path / "home", **kw)

    opened: list[MemoryBank] = []

    def open_bank(embedder=None, *, tokenizer=None, **kw) -> MemoryBank:
        kw.setdefault("policy", PAPER)
        bank = MemoryBank(stores(tokenizer=tokenizer), embedder or e5_embedder, **kw)
        opened.append(bank)
        return bank

    open_bank.engine = request.param
    yield open_bank
    for bank in opened:
        bank.close()


@pytest.fixture
def any_bank(open_bank):
    """A bank of each engine in turn (the contract suite, tests/memory/test_store_contract.py)."""
    return open_bank()


@pytest.fixture
def day1():
    return datetime(2024, 5, 1, 10, 0)
