"""What only the PostgreSQL store has: workers sharing one database without stale caches, vectors
kept in their rows (migration 3), partial HNSW indexes, clear errors. The behaviours both stores
share, and the two engines side by side, are in tests/memory/test_store_contract.py."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import numpy as np
import psycopg
import pytest

from memory.bank import MemoryBank
from memory.pg_db import SchemaTooNew, StoreUnavailable
from memory.records import Kind
from memory.stores.postgres import PostgresStores

T0 = datetime(2024, 5, 1, 9, 0)

TURNS = [
    ("I adopted a cat named Miso yesterday", "A cat! How is Miso settling in?"),
    ("我周末去了鼓浪屿，风景很美", "鼓浪屿很漂亮！你最喜欢哪里？"),
    ("My sister Lily visits next week", "How nice, what will you do together?"),
]


def fill(bank, user: str) -> None:
    for i, (q, a) in enumerate(TURNS):
        bank.add_turn(user, q, a, T0 + timedelta(days=i // 2, minutes=i))
    bank.set_summary(user, Kind.GLOBAL_PERSONALITY, "Warm, busy, loves animals.", T0)


def test_two_banks_share_one_database_without_stale_caches(pg_url, e5_embedder):
    a, b = MemoryBank(PostgresStores(pg_url), e5_embedder), MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        a.add_turn("amy", "I adopted a cat named Miso", "lovely", T0)
        assert [h.record.query for h in b.retrieve("amy", "cat name", T0, k=1)] == ["I adopted a cat named Miso"]
        # a summary keeps how it was written (the grounding check's count) in its extra fields
        how = {"grounding": {"path": "kept", "dropped": 2}}
        a.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted Miso.", T0, day=T0.date(), extra=how)
        assert b.get_summary("amy", Kind.DAILY_EVENTS, T0.date()).extra == how
        b.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat, Miso.", T0, day=T0.date())  # by hand
        assert a.get_summary("amy", Kind.DAILY_EVENTS, T0.date()).extra == {}
        b.delete_user("amy")  # deleted on one worker ...
        assert a.count("amy") == 0  # ... is gone on the other at once
        a.add_turn("amy", "starting over", "welcome back", T0)  # and the name can start again
        assert b.count("amy") == 1
    finally:
        a.close()
        b.close()


def test_vectors_are_kept_in_their_rows_and_migration_3_moves_older_ones_in(pg_url, e5_embedder):
    def toasted(con) -> int:  # live chunks in the memories table's TOAST table
        toast = con.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'memories'").fetchone()
        return con.execute(f"SELECT count(*) FROM {toast[0]}").fetchone()[0]

    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    fill(bank, "amy")
    bank.settle()
    ids = [r.id for r in bank.records("amy")]
    before = bank.user_store("amy").vectors(ids, column="reply_vector")
    bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        storage = (
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname LIKE '%embedding'"
        )
        assert {r[0] for r in con.execute(storage)} == {"m"}  # MAIN: in the row
        assert toasted(con) == 0
        # a database of schema 2, whose vectors went out of line (PostgreSQL's default for them)
        con.execute("ALTER TABLE memories RESET (toast_tuple_target)")
        con.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE EXTERNAL")
        con.execute("ALTER TABLE memories ALTER COLUMN reply_embedding SET STORAGE EXTERNAL")
        con.execute("UPDATE memories SET reply_embedding = reply_embedding::real[]::vector")
        con.execute("UPDATE sf_schema SET version = 2 WHERE component = 'memory'")
        assert toasted(con) > 0
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)  # migrates to 3
    try:
        after = bank.user_store("amy").vectors(ids, column="reply_vector")
        assert np.array_equal(before, after) and after.any(axis=1).sum() == len(TURNS)
    finally:
        bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert {r[0] for r in con.execute(storage)} == {"m"}
        assert toasted(con) == 0


def test_big_user_gets_a_partial_hnsw_index_with_the_same_top_hits(pg_url, e5_embedder):
    from memory.records import MemoryRecord

    stores = PostgresStores(pg_url, hnsw_min=300, build_hnsw_in_background=False)
    bank = MemoryBank(stores, e5_embedder)
    try:
        rng = np.random.default_rng(0)
        vecs = rng.standard_normal((400, e5_embedder.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        recs = [
            MemoryRecord(user="big", kind=Kind.TURN, text=f"memory {i}", created_at=T0, day=date(2024, 1, 1))
            for i in range(400)
        ]
        store = bank.user_store("big")
        store.insert(recs, vecs)
        exact = store.dense(vecs[7], 10)
        assert stores.maybe_build_hnsw("big", e5_embedder.dim, wait=True) and stores.has_hnsw("big")
        assert stores.uses_hnsw("big")
        with psycopg.connect(pg_url) as con:
            from pgvector.psycopg import register_vector

            register_vector(con)
            con.execute("SET enable_sort = off")
            plan = " ".join(
                r[0]
                for r in con.execute(
                    "EXPLAIN SELECT id FROM memories WHERE owner = 'big' AND state = 'active' AND embedding IS NOT NULL"
                    f" ORDER BY embedding::vector({e5_embedder.dim}) <#> %s LIMIT 10",
                    (vecs[7],),
                ).fetchall()
            )
        assert "mem_hnsw_" in plan
        graph = store.dense(vecs[7], 10)
        assert graph[0].id == exact[0].id and len({h.id for h in graph} & {h.id for h in exact}) >= 8
        bank.delete_user("big")
        assert not stores.has_hnsw("big")
    finally:
        bank.close()


def test_clear_errors(pg_server, pg_url, e5_embedder):
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        MemoryBank(PostgresStores("mysql://x@localhost/db"), e5_embedder)
    with pytest.raises(StoreUnavailable, match=r"not available .*nothing was lost") as info:
        MemoryBank(PostgresStores("postgresql://sf:secret-pw@127.0.0.1:9/nowhere"), e5_embedder)
    assert "secret-pw" not in str(info.value)
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute("UPDATE sf_schema SET version = 99 WHERE component = 'memory'")
    with pytest.raises(SchemaTooNew, match="version 99, newer than this SiliconFriend knows"):
        MemoryBank(PostgresStores(pg_url), e5_embedder)


def test_a_database_without_pgvector_says_how_to_add_it(pg_server, e5_embedder):
    from pg_helpers import database_url
    from psycopg import sql

    name = "sf_novector"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
        con.execute("DROP DATABASE IF EXISTS sf_novector WITH (FORCE)")
        con.execute("DROP ROLE IF EXISTS sf_plain")
        con.execute("CREATE ROLE sf_plain LOGIN")  # not a superuser: may not enable pgvector
        con.execute(sql.SQL("CREATE DATABASE {} OWNER sf_plain").format(sql.Identifier(name)))
    url = database_url(pg_server, name).replace("postgres:@", "sf_plain:@", 1)
    try:
        with pytest.raises(StoreUnavailable, match="CREATE EXTENSION vector"):
            MemoryBank(PostgresStores(url), e5_embedder)
    finally:
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as con:
            con.execute("DROP DATABASE IF EXISTS sf_novector WITH (FORCE)")
            con.execute("DROP ROLE IF EXISTS sf_plain")
