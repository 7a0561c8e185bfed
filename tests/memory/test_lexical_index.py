"""The lexical table in memory (``memory/lexical_index.py``): a large memory's lexical searches give
FTS5's own scores and order, to the last bit, before and after the store changes."""

import random
from datetime import date, datetime, timedelta

import pytest

from memory.lexical import Tokenizer
from memory.lexical_index import LexicalIndex, searchable
from memory.records import Kind, MemoryRecord, turn_text
from memory.stores import sqlite as sqlite_store
from memory.stores.documents import lexical_document
from memory.stores.sqlite import SqliteStores, _match
from siliconfriend.bench.data import DialogueGenerator


def _fts5(store, terms, limit):
    """What FTS5 itself answers (the store's search for small memories)."""
    rows = store._db.execute(
        "SELECT rowid, -bm25(memories_fts) FROM memories_fts"
        " WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT ?",
        (_match(terms), limit),
    ).fetchall()
    return [(r[0], float(r[1])) for r in rows]


def _turns(gen, n, start):
    out = []
    for i in range(n):
        q, a = gen.turn()
        day = start + timedelta(days=i // 6)
        when = datetime.combine(day, datetime.min.time()) + timedelta(hours=9, minutes=i % 6)
        out.append(
            MemoryRecord(
                user="amy", kind=Kind.TURN, text=turn_text(q, a), created_at=when, day=day, query=q, response=a
            )
        )
    return out


def _vocabulary(store):
    store._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, memories_fts, row)")
    return [r[0] for r in store._db.execute("SELECT term FROM temp.vocab ORDER BY term")]


def _queries(vocab, rng, n=60):
    """Term lists like the turn's: a few words, two dozen (the conversation's), repeats, unknown words."""
    out = []
    for i in range(n):
        terms = rng.sample(vocab, min(len(vocab), rng.choice((1, 2, 3, 5, 8, 24))))
        if i % 7 == 0:
            terms.append("zzzunknown")
        if i % 11 == 0:
            terms.append(terms[0])  # FTS5 counts a repeated term twice
        out.append(terms)
    return out


@pytest.fixture
def big_store(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "LEXICAL_INDEX_MIN", 50)  # "large" from 50 memories on
    store = SqliteStores(tmp_path / "home").open("amy", dim=384, vectors_id="test")
    gen = DialogueGenerator(7)  # English and Chinese turns, named days, many shared words
    store.insert(_turns(gen, 400, date(2024, 1, 1)), None)
    yield store, gen
    store.close()


def _in_memory(store) -> bool:
    store.lexical(["x"], 1)  # the first search starts the build
    store.settle()
    return store._lexical is not None and store._lexical.ready() is not None


def test_a_large_memorys_lexical_search_gives_fts5s_scores_and_order(big_store):
    store, _ = big_store
    assert _in_memory(store)
    rng = random.Random(3)
    queries = _queries(_vocabulary(store), rng)
    for terms in queries:
        for limit in (5, 40, 400):
            mine = [(h.id, h.score) for h in store.lexical(terms, limit)]
            assert mine == _fts5(store, terms, limit), terms


def test_the_lexical_index_follows_inserts_edits_and_deletions(big_store):
    store, gen = big_store
    assert _in_memory(store)
    rng = random.Random(5)
    added = store.insert(_turns(gen, 8, date(2024, 9, 1)), None)  # fewer than a rebuild's share
    store.replace_text(added[0].stored_id, "I adopted a kitten called Biscuit yesterday", None)
    store.delete([added[1].stored_id, 3])
    assert store._lexical.ready() is not None and store._lexical.ready().extra  # caught up, not rebuilt
    queries = _queries(_vocabulary(store), rng, 40) + [["kitten", "biscuit"], ["adopt"]]
    for terms in queries:
        for limit in (5, 400):
            assert [(h.id, h.score) for h in store.lexical(terms, limit)] == _fts5(store, terms, limit), terms
    # many changes: rebuilt in the background, the same answers meanwhile and after
    store.insert(_turns(gen, 60, date(2024, 10, 1)), None)
    for terms in queries[:10]:
        assert [(h.id, h.score) for h in store.lexical(terms, 40)] == _fts5(store, terms, 40)
    store.settle()
    assert not store._lexical.ready().extra  # the rebuilt lists hold every change
    for terms in queries:
        assert [(h.id, h.score) for h in store.lexical(terms, 40)] == _fts5(store, terms, 40), terms


def _fts5_documents(store, terms):
    """FTS5's own count of the rows holding each term, and of its rows."""
    store._db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, memories_fts, row)")
    held = dict(store._db.execute("SELECT term, doc FROM temp.vocab"))
    rows = store._db.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0]
    return rows, [held.get(t, 0) for t in terms]


def test_a_large_memorys_document_frequencies_are_fts5s(big_store):
    """``documents_with`` (a finer unit's BM25 weights its words by them) from the lists in
    memory: FTS5's counts, before and after the store changes."""
    store, gen = big_store
    assert _in_memory(store)
    terms = _vocabulary(store)[::7] + ["zzzunknown"]
    assert store.documents_with(terms) == _fts5_documents(store, terms)
    added = store.insert(_turns(gen, 8, date(2024, 9, 1)), None)
    store.replace_text(added[0].stored_id, "I adopted a kitten called Biscuit yesterday", None)
    store.delete([added[1].stored_id, 3])
    terms += ["kitten", "biscuit"]
    assert store._lexical.ready().extra  # the changes caught up, not rebuilt
    assert store.documents_with(terms) == _fts5_documents(store, terms)


def test_tokens_fts5_may_cut_otherwise_leave_the_search_to_fts5(big_store):
    store, _ = big_store
    # U+9FCF is a Han character FTS5's tokenizer tables (Unicode 6.1) do not know
    day = date(2024, 8, 1)
    text = "鿏元素和氧气"
    store.insert([MemoryRecord(user="amy", kind=Kind.TURN, text=text, created_at=datetime(2024, 8, 1), day=day)], None)
    assert not searchable(lexical_document(Tokenizer(), Kind.TURN, text, day).split())
    store.lexical(["x"], 1)
    store.settle()
    assert store._lexical.unsupported and store._lexical.ready() is None
    for terms in (["氧气"], ["cat", "dog", "氧气"]):
        assert [(h.id, h.score) for h in store.lexical(terms, 40)] == _fts5(store, terms, 40)


def test_small_memories_stay_with_fts5(tmp_path):
    store = SqliteStores(tmp_path / "home").open("bo", dim=384, vectors_id="test")
    try:
        store.insert(_turns(DialogueGenerator(1), 30, date(2024, 1, 1)), None)
        assert store.lexical(["cat"], 5) is not None and store._lexical is None
    finally:
        store.close()


def test_ties_go_to_the_lower_id_as_in_sqlite():
    index = LexicalIndex([(5, "cat dog"), (2, "cat dog"), (9, "cat dog"), (4, "bird")])
    assert [rid for rid, _ in index.search(["cat"], 2)] == [2, 5]
