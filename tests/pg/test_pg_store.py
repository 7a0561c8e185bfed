"""What only the PostgreSQL store has: workers sharing one database without stale caches, vectors
kept in their rows (migration 3), partial HNSW indexes, clear errors. The behaviours both stores
share, and the two engines side by side, are in tests/memory/test_store_contract.py."""

from __future__ import annotations

import threading
import time
from datetime import date, datetime, timedelta

import numpy as np
import psycopg
import pytest

from memory.bank import MemoryBank
from memory.forgetting import EbbinghausPolicy
from memory.records import Kind, MemoryRecord
from memory.stores.base import Side
from memory.stores.pg_db import SchemaTooNew, StoreUnavailable
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


def test_a_days_turns_come_with_their_vectors_for_the_conversations_cue(pg_url, e5_embedder, monkeypatch):
    """A day's turns (read as a chat turn reads today's) bring their vectors along: the talk's
    ``vectors`` that follows on the same thread takes them without a read, the same
    records and vectors as read apart; after a write it reads them again."""
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        fill(bank, "amy")
        bank.settle()
        store = bank.user_store("amy")
        day = T0.date()
        both = store.records(kind=Kind.TURN, days=[day, day + timedelta(days=9)])  # read without vectors
        today = store.records(kind=Kind.TURN, day=day)
        assert today == both and len(today) == 2
        ids = [t.stored_id for t in today]
        own, reply = store.vectors(ids)
        store.records(kind=Kind.TURN, day=day)
        with monkeypatch.context() as m:
            m.setattr(store.db, "fetchall", None)  # nothing read: what came with the turns
            kept = store.vectors(ids)
        assert np.array_equal(kept[0], own) and np.array_equal(kept[1], reply) and reply.any()
        store.records(kind=Kind.TURN, day=day)
        bank.add_turn("amy", "one more", "yes", T0 + timedelta(hours=1))
        again = store.vectors(ids)  # a write since: read again
        assert np.array_equal(again[0], own) and np.array_equal(again[1], reply)
    finally:
        bank.close()


# a memory's row as schemas 2 to 5 held it (the recall fields in ``memories``)
_OLD_ROW = (
    "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at, strength,"
    " last_recall, recall_count, importance, pinned, state, embedding, lex_len, extra, reply_embedding)"
    " VALUES (%s, %s, 'turn', %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, false, %s, %s::real[]::vector, 0, '{}',"
    " %s::real[]::vector)"
)


def older_database(url: str, version: int, rows: list[tuple]) -> None:
    """A database as the SiliconFriend of memory schema ``version`` (2 to 5) left it, holding
    ``rows`` of user "amy" (``_OLD_ROW``'s parameters after the owner)."""
    from memory.stores.pg_db import Database
    from memory.stores.pg_migrations import MIGRATIONS

    db = Database(url)
    try:
        db.migrate("memory", MIGRATIONS[:version])
        with db.transaction() as cur:
            cur.execute("INSERT INTO mem_users (name, last_id) VALUES ('amy', %s)", (len(rows),))
            cur.executemany(_OLD_ROW, [("amy", *r) for r in rows])
    finally:
        db.close()


def old_turns(e5_embedder) -> list[tuple]:
    """``TURNS`` as rows of ``_OLD_ROW``: the first twice recalled, the others never."""
    vectors = e5_embedder.embed([q for q, _ in TURNS], kind="document")
    replies = e5_embedder.embed([a for _, a in TURNS], kind="document")
    rows = []
    for i, ((q, a), v, r) in enumerate(zip(TURNS, vectors, replies)):
        when = T0 + timedelta(minutes=i)
        recalled = (3.0, (T0 + timedelta(days=2)).isoformat(), 2) if i == 0 else (1.0, None, 0)
        rows.append((i + 1, f"{q}\n{a}", q, a, when.date(), i, when.isoformat(), *recalled, "active", list(v), list(r)))
    return rows


def test_vectors_are_kept_in_their_rows_and_migration_3_moves_older_ones_in(pg_url, e5_embedder):
    def toasted(con) -> int:  # live chunks in the memories table's TOAST table
        toast = con.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'memories'").fetchone()
        return con.execute(f"SELECT count(*) FROM {toast[0]}").fetchone()[0]

    storage = "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname LIKE '%embedding'"
    rows = old_turns(e5_embedder)
    older_database(pg_url, 2, rows)  # schema 2: vectors out of line (PostgreSQL's default for them)
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert {r[0] for r in con.execute(storage)} == {"e"}
        assert toasted(con) > 0
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)  # migrates to the newest
    try:
        ids = [r[0] for r in rows]
        after = bank.user_store("amy").vectors(ids)[1]
        assert np.allclose(after, np.array([r[-1] for r in rows], dtype=np.float32))
        bank.add_turn("amy", "One more thing about Miso", "Tell me!", T0 + timedelta(days=1))
        bank.settle()
    finally:
        bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert {r[0] for r in con.execute(storage)} == {"m"}  # MAIN: in the row
        assert toasted(con) == 0


def test_migration_6_moves_the_recall_fields_out_and_keeps_them(pg_url, e5_embedder):
    """A database of schema 5 (the recall fields in the memory's row) is upgraded: every memory
    keeps its strength, last recall and recall count, and recalls go on from them."""
    older_database(pg_url, 5, old_turns(e5_embedder))
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder, policy=EbbinghausPolicy(decay=()))  # one pace: the law
    try:
        first, second = bank.records("amy", kind=Kind.TURN)[:2]
        assert (first.strength, first.last_recall, first.recall_count) == (3.0, T0 + timedelta(days=2), 2)
        assert (second.strength, second.last_recall, second.recall_count) == (1.0, None, 0)
        now = T0 + timedelta(days=9)
        assert bank.retention(first, now) == pytest.approx(np.exp(-1 / 3.0))  # 7 days since the recall, S = 3
        again = bank.reinforce("amy", [first.id], now)[0]
        assert (again.strength, again.last_recall, again.recall_count) == (4.0, now, 3)
        assert bank.get("amy", first.id) == again
        assert [h.record.id for h in bank.retrieve("amy", "what is my cat called?", now, k=1)] == [first.id]
        bank.delete("amy", [first.id])
    finally:
        bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM sf_schema WHERE component = 'memory'").fetchone()[0] >= 6
        columns = {r[0] for r in con.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'memories'::regclass")}
        assert not columns & {"strength", "last_recall", "recall_count"}
        assert con.execute("SELECT count(*) FROM mem_recall").fetchone()[0] == len(TURNS) - 1  # the deleted one's went


def test_a_recall_leaves_the_memorys_row_and_its_vectors_alone(pg_url, e5_embedder):
    """Reinforcement writes the narrow recall table only: the memory's row (both vectors, their
    HNSW entries, the btrees) is not rewritten, so a turn's recalls cost a few bytes each."""
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        fill(bank, "amy")
        bank.settle()
        ids = [r.id for r in bank.records("amy", kind=Kind.TURN)]
        where = "SELECT id, ctid FROM {} WHERE owner = 'amy' ORDER BY id"
        with psycopg.connect(pg_url, autocommit=True) as con:
            rows, recall = (
                con.execute(where.format("memories")).fetchall(),
                con.execute(where.format("mem_recall")).fetchall(),
            )
        bank.reinforce("amy", ids, T0 + timedelta(days=3))
        with psycopg.connect(pg_url, autocommit=True) as con:
            assert con.execute(where.format("memories")).fetchall() == rows  # not one row rewritten
            moved = con.execute(where.format("mem_recall")).fetchall()
        assert moved != recall and {c[1].split(",")[0] for c in moved} == {
            c[1].split(",")[0] for c in recall
        }  # same page
        assert all(bank.get("amy", i).recall_count == 1 for i in ids)
    finally:
        bank.close()


def big_user(bank: MemoryBank, dim: int):
    """User "big": 400 turns of random unit vectors (past the tests' HNSW threshold of 300)."""
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    recs = [
        MemoryRecord(user="big", kind=Kind.TURN, text=f"memory {i}", created_at=T0, day=date(2024, 1, 1))
        for i in range(400)
    ]
    store = bank.user_store("big")
    store.insert(recs, vecs)
    return store, vecs


def test_big_user_gets_a_partial_hnsw_index_with_the_same_top_hits(pg_url, e5_embedder):
    stores = PostgresStores(pg_url, hnsw_min=300, build_hnsw_in_background=False)
    bank = MemoryBank(stores, e5_embedder)
    try:
        store, vecs = big_user(bank, e5_embedder.dim)
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


def _vectors_held(pg_url: str, owner: str) -> int:
    """The vectors a user's rows hold (own, waiting for the graph, and replies)."""
    with psycopg.connect(pg_url, autocommit=True) as con:
        row = con.execute(
            "SELECT count(COALESCE(embedding, pending_embedding)) + count(reply_embedding) FROM memories"
            " WHERE owner = %s",
            (owner,),
        ).fetchone()
    return int(row[0])


def _first_memories(hits, n: int) -> list[tuple[int, str, float]]:
    """The first ``n`` distinct memories of own and reply hits, as retrieval reads them."""
    found: list[tuple[int, str, float]] = []
    for h in hits:
        if h.id not in {f[0] for f in found} and len(found) < n:
            found.append((h.id, h.side.value, h.score))
    return found


def test_a_graph_search_read_to_the_distinct_memories_wanted_finds_the_same_ones(pg_url, e5_embedder):
    """``dense(k, distinct=n)`` reads each graph's hits only n deep: the first n distinct
    memories, their sides and scores are those of the full ``k`` hits, through the graphs."""
    stores = PostgresStores(pg_url, hnsw_min=300, build_hnsw_in_background=False)
    bank = MemoryBank(stores, e5_embedder)
    try:
        store, vecs = big_user(bank, e5_embedder.dim)
        # reply vectors near some own vectors: memories found by both sides, as turns are
        rng = np.random.default_rng(1)
        replies = vecs[:300] + 0.5 * rng.standard_normal((300, e5_embedder.dim)).astype(np.float32)
        replies /= np.linalg.norm(replies, axis=1, keepdims=True)
        ids = [r.stored_id for r in store.records()][:300]
        store.set_vectors(ids, replies, column="reply_vector")
        assert stores.maybe_build_hnsw("big", e5_embedder.dim, wait=True) and stores.uses_hnsw("big")
        for q in [*vecs[:10], *replies[:10]]:
            full = store.dense(q, 60)
            read = store.dense(q, 60, distinct=20)
            assert len(full) == 60 and len(read) <= 40  # each graph read 20 deep
            assert _first_memories(read, 20) == _first_memories(full, 20)
            assert len(_first_memories(full, 20)) == 20
        bank.delete_user("big")
    finally:
        bank.close()


def test_a_big_users_new_turn_is_found_while_its_vector_waits_for_the_graph(pg_url, e5_embedder):
    """A chat turn of a user searched through HNSW is stored without waiting for the graph: its
    own vector waits in the row until the reply worker's update (a turn with a reply) or the
    store's indexing thread (any other) puts it in the graph's column. Meanwhile every read and
    the dense search see it; after ``settle`` it is in the graph; one left waiting by a stopped
    worker is moved when the user is next opened."""
    stores = PostgresStores(pg_url, hnsw_min=300, build_hnsw_in_background=False)
    bank = MemoryBank(stores, e5_embedder)
    gate = threading.Event()
    where = "SELECT embedding IS NULL, pending_embedding IS NULL FROM memories WHERE owner = 'big' AND id = %s"
    try:
        store, vecs = big_user(bank, e5_embedder.dim)
        assert stores.maybe_build_hnsw("big", e5_embedder.dim, wait=True) and stores.uses_hnsw("big")
        stores.indexing.submit(gate.wait)  # the indexing thread held: the vector has to wait
        turn = bank.add_turn("big", "I adopted a cat named Miso", "", T0 + timedelta(days=1))
        assert turn is not None
        with psycopg.connect(pg_url, autocommit=True) as con:
            assert con.execute(where, (turn.id,)).fetchone() == (True, False)  # waiting
        own = store.vectors([turn.id])[0][0]
        assert np.linalg.norm(own) == pytest.approx(1.0, abs=1e-4)
        assert turn.id in store.pool([turn.id, 1], lambda: own[None, :]).found
        assert np.allclose(store.vectors([turn.id, 1])[0], [own, vecs[0]], atol=1e-5)
        hit = store.dense(own, 5)[0]
        assert (hit.id, hit.side) == (turn.id, Side.OWN) and hit.score == pytest.approx(1.0, abs=1e-4)
        assert _vectors_held(pg_url, "big") == 401
        assert [h.record.id for h in bank.retrieve("big", "what is my cat called?", T0 + timedelta(days=2), k=1)] == [
            turn.id
        ]
        answered = bank.add_turn("big", "My sister Lily visits next week", "How nice!", T0 + timedelta(days=1))
        assert answered is not None
        deadline = time.monotonic() + 60
        while store.replies_pending() and time.monotonic() < deadline:  # the reply worker at work
            time.sleep(0.05)
        with psycopg.connect(pg_url, autocommit=True) as con:
            assert con.execute(where, (answered.id,)).fetchone() == (False, True)
            assert con.execute(where, (turn.id,)).fetchone() == (True, False)  # the indexing thread's, held
        gate.set()
        bank.settle()
        with psycopg.connect(pg_url, autocommit=True) as con:
            assert con.execute(where, (turn.id,)).fetchone() == (False, True)  # in the graph's column
        assert np.allclose(store.vectors([turn.id])[0][0], own, atol=1e-6)
        with psycopg.connect(pg_url, autocommit=True) as con:
            # as a worker stopped before the move would leave it
            con.execute(
                "UPDATE memories SET pending_embedding = embedding, embedding = NULL WHERE owner = 'big' AND id = %s",
                (turn.id,),
            )
        assert store.dense(own, 1)[0].id == turn.id
    finally:
        gate.set()
        bank.close()
    again = MemoryBank(PostgresStores(pg_url, hnsw_min=300), e5_embedder)
    try:
        again.user_store("big")
        again.settle()
        with psycopg.connect(pg_url, autocommit=True) as con:
            assert con.execute(where, (turn.id,)).fetchone() == (False, True)
        assert np.allclose(again.user_store("big").vectors([turn.id])[0][0], own, atol=1e-5)
    finally:
        again.close()


def test_migration_7_upgrades_a_database_of_schema_6(pg_url, e5_embedder):
    """A database the SiliconFriend of memory schema 6 left gets the column where a turn's own
    vector waits for the graph; what it held is found and kept."""
    from memory.stores.pg_db import Database
    from memory.stores.pg_migrations import MIGRATIONS

    vector = e5_embedder.embed(["I adopted a cat named Miso"], kind="document")[0]
    db = Database(pg_url)
    try:
        db.migrate("memory", MIGRATIONS[:6])
        with db.transaction() as cur:
            cur.execute("INSERT INTO mem_users (name, last_id) VALUES ('amy', 1)")
            cur.execute(
                "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at, embedding)"
                " VALUES ('amy', 1, 'turn', %s, %s, 'lovely', %s, 0, %s, %s::real[]::vector)",
                (
                    "I adopted a cat named Miso\nlovely",
                    "I adopted a cat named Miso",
                    T0.date(),
                    T0.isoformat(),
                    list(vector),
                ),
            )
            cur.execute("INSERT INTO mem_recall (owner, id) VALUES ('amy', 1)")
    finally:
        db.close()
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        assert [h.record.id for h in bank.retrieve("amy", "what is my cat called?", T0, k=1)] == [1]
        assert bank.add_turn("amy", "My sister Lily visits next week", "nice", T0).id == 2
        bank.settle()
        assert _vectors_held(pg_url, "amy") == 4  # both turns' messages and replies
    finally:
        bank.close()
    with psycopg.connect(pg_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM sf_schema WHERE component = 'memory'").fetchone()[0] == len(MIGRATIONS)
        assert con.execute("SELECT count(*) FROM memories WHERE pending_embedding IS NOT NULL").fetchone()[0] == 0


def test_migration_12_keeps_who_names_whom_for_the_records_held_before(pg_url, e5_embedder):
    """A database of memory schema 11 (no table of who names whom) gets the pairs of the
    records it holds: a deletion then rewrites the record that held the deleted memory."""
    import json

    from memory.stores.pg_db import Database
    from memory.stores.pg_migrations import MIGRATIONS

    extras = [
        {},
        {"used": [{"id": 1, "text": "parrot Zazu"}, {"id": 7, "text": "gone"}], "today": [{"id": "1"}]},
        {"used": "not a list", "today": [{"id": 2}, {"id": "x"}, 3]},
    ]
    db = Database(pg_url)
    try:
        db.migrate("memory", MIGRATIONS[:11])
        with db.transaction() as cur:
            cur.execute("INSERT INTO mem_users (name, last_id) VALUES ('amy', 3)")
            for i, extra in enumerate(extras, start=1):
                cur.execute(
                    "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at, extra)"
                    " VALUES ('amy', %s, 'turn', %s, %s, 'ok', %s, %s, %s, %s)",
                    (i, f"m{i}\nok", f"m{i}", T0.date(), i, T0.isoformat(), json.dumps(extra)),
                )
                cur.execute("INSERT INTO mem_recall (owner, id) VALUES ('amy', %s)", (i,))
    finally:
        db.close()
    bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        store = bank.user_store("amy")
        assert store.naming([1]) == [2] and store.naming([2]) == [3] and store.naming([7]) == [2]
        bank.delete("amy", [1])
        assert bank.get("amy", 2).extra == {"used": [{"id": 7, "text": "gone"}], "today": []}
        assert store.naming([1]) == []
    finally:
        bank.close()


def test_memories_are_committed_without_waiting_for_the_disk_and_accounts_with(pg_url):
    """The memory store's commits are as durable as the SQLite store's (synchronous=NORMAL):
    they do not wait for the flush; other components' (the accounts) keep the server's default."""
    from memory.stores import postgres
    from memory.stores.pg_db import Database

    stores = PostgresStores(pg_url)
    other = Database(pg_url, vectors=False)
    durable = PostgresStores(pg_url, wait_for_flush=True)  # the operator's choice (docs/deploy.md)
    try:
        assert stores.db.fetchone("SHOW synchronous_commit") == ("off",)
        # the graph searches' settings stay on their own connections
        assert stores.graphs.fetchone("SHOW enable_sort") == ("off",)
        assert stores.graphs.fetchone("SHOW hnsw.ef_search") == (str(postgres.HNSW_EF_SEARCH),)
        assert stores.db.fetchone("SHOW enable_sort") == ("on",)
        assert other.fetchone("SHOW synchronous_commit") == ("on",)
        assert durable.db.fetchone("SHOW synchronous_commit") == ("on",)
    finally:
        stores.close()
        other.close()
        durable.close()


def test_a_big_users_postings_are_read_ahead_and_searches_stay_exact(pg_url, e5_embedder, monkeypatch):
    """A worker opening a big user reads their postings whole in the background; searches over
    them score as reading the postings each time does, before and after other workers' writes."""
    from memory.stores import postgres

    writer = MemoryBank(PostgresStores(pg_url), e5_embedder)
    fill(writer, "amy")
    monkeypatch.setattr(postgres, "WARM_POSTINGS_FROM", 3)  # "big" from three memories on
    ahead = PostgresStores(pg_url)
    try:
        store = ahead.open("amy", dim=e5_embedder.dim, vectors_id="e5")
        deadline = time.monotonic() + 30
        while "amy" not in ahead.postings._users and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(ahead.postings._users["amy"].terms) > 10  # every term read
        terms = ahead.tokenizer.query_terms("my cat Miso and my sister Lily")
        fresh = writer.user_store("amy")
        assert store.lexical(terms, 10) == fresh.lexical(terms, 10) != []
        added = writer.add_turn("amy", "Miso chased my sister's cat", "Oh no!", T0 + timedelta(days=3))
        assert added is not None
        assert store.lexical(terms, 10) == fresh.lexical(terms, 10)
        assert added.id in {h.id for h in store.lexical(terms, 10)}
        writer.delete("amy", [added.id])
        assert store.lexical(terms, 10) == fresh.lexical(terms, 10)
        assert added.id not in {h.id for h in store.lexical(terms, 10)}
    finally:
        ahead.close()
        writer.close()


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
