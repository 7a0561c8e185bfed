"""A PostgreSQL bank on a fresh database (``pg_server`` and ``pg_url`` are in tests/conftest.py,
for the store contract suite of tests/memory too)."""

from __future__ import annotations

import pytest


@pytest.fixture
def pg_bank(pg_url, e5_embedder):
    from memory.bank import MemoryBank
    from memory.stores.postgres import PostgresStores

    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    yield bank
    bank.close()
