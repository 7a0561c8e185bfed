"""Shared fixtures: the real packaged SmolLM2 (loaded once per test session), a MemoryBank in a
temporary home with the default e5 embedder, and a real PostgreSQL (started once, on demand)."""

from __future__ import annotations

import secrets
import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def e5_embedder():
    """The default embedder, e5-small (offline, shared: embedders are read-only once loaded)."""
    from memory.embedders import create_embedder

    return create_embedder("e5")


@pytest.fixture(scope="session")
def use_reader():
    """The packaged second reader, USE multilingual v3 (shared, as ``e5_embedder``)."""
    from memory.embedders import create_embedder

    return create_embedder("use")


@pytest.fixture
def bank(tmp_path, e5_embedder):
    """An empty MemoryBank under ``tmp_path / "home"`` (default forgetting and retrieval settings)."""
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores

    bank = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder)
    yield bank
    bank.close()


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL 16 with pgvector (the ``pgserver`` package's binaries), started once per
    test session in a temporary folder, the first time a test asks for it."""
    from pg_helpers import start_server

    folder = tempfile.mkdtemp(prefix="sf-pgtest-")
    server = start_server(folder)
    yield server
    server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server):
    """The URL of a new, empty database on ``pg_server`` (dropped after the test)."""
    import psycopg
    from pg_helpers import database_url
    from psycopg import sql

    name = f"sf_test_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
        con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield database_url(pg_server, name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
        con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def smollm2_backend():
    """The packaged SmolLM2-135M-Instruct (``HFLocalChat`` preset "smollm2") on the CPU, loaded once
    per session. Greedy decoding, so that runs repeat; pass a small ``max_tokens`` to ``stream``
    (about 17 tokens a second on two cores) -- the default is 32."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from siliconfriend.backends.hf.chat import HFLocalChat

    return HFLocalChat("smollm2", temperature=0, max_new_tokens=32, device="cpu")


# fixtures that load the real SmolLM2 (directly or through another fixture)
SMOLLM2_FIXTURES = {"smollm2_backend", "smol"}


def pytest_collection_modifyitems(config, items):
    """Every test that loads SmolLM2 through a fixture is ``slow``, so that ``-m "not slow"``
    (``make test-fast``) runs only the tests that load no LLM; tests that load it themselves are
    marked where they are written."""
    for item in items:
        if SMOLLM2_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
