"""A real PostgreSQL 16 with pgvector (the ``pgserver`` package's binaries), started once per test
session in a temporary folder; each test gets a fresh database of its own on it."""

from __future__ import annotations

import secrets
import shutil
import tempfile

import psycopg
import pytest
from pg_helpers import database_url, start_server
from psycopg import sql


@pytest.fixture(scope="session")
def pg_server():
    folder = tempfile.mkdtemp(prefix="sf-pgtest-")
    server = start_server(folder)
    yield server
    server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server):
    """The URL of a new, empty database (dropped after the test)."""
    name = f"sf_test_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
        con.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield database_url(pg_server, name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
        con.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def pg_bank(pg_url, e5_embedder):
    from memory.bank import MemoryBank
    from memory.stores.postgres import PostgresStores

    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    yield bank
    bank.close()
