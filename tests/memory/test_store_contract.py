"""The store contract: every store and bank behaviour, run against each engine (``open_bank`` and
``any_bank`` in tests/memory/conftest.py: SQLite files with FAISS, PostgreSQL with pgvector).
A change to storage passes here on both engines or on neither; what only one engine has (FAISS
files, migrations, the pool, advisory locks, HNSW) is tested in test_store_and_index.py and
tests/pg."""

import json
from dataclasses import FrozenInstanceError
from datetime import date, datetime, timedelta

import numpy as np
import pytest

from memory.bank import MemoryBank, UnknownMemory
from memory.embedders import create_embedder, embed_documents, embed_replies, embed_turns
from memory.lexical import Tokenizer
from memory.memorybank_format import export_user
from memory.records import Kind, MemoryRecord, State
from memory.stores.base import SearchHit, Side
from memory.stores.record_reads import with_vectors
from memory.stores.sqlite import SqliteStores

T0 = datetime(2024, 5, 1, 9, 0)

TURNS = [
    ("I adopted a cat named Miso yesterday", "A cat! How is Miso settling in?"),
    ("Work was stressful, my manager moved the deadline", "That sounds hard. What helps you unwind?"),
    ("我周末去了鼓浪屿，风景很美", "鼓浪屿很漂亮！你最喜欢哪里？"),
    ("I went hiking on the Dragon's Back trail", "Lovely views there. Was it hot?"),
    ("My sister Lily visits next week", "How nice, what will you do together?"),
    ("我最近在学做红烧肉", "听起来很好吃！"),
]


def fill(bank, user: str) -> None:
    for i, (q, a) in enumerate(TURNS):
        bank.add_turn(user, q, a, T0 + timedelta(days=i // 2, minutes=i))
    bank.set_summary(user, Kind.DAILY_EVENTS, "Amy adopted a cat and worried about work.", T0, day=T0.date())
    bank.set_summary(user, Kind.GLOBAL_PERSONALITY, "Warm, busy, loves animals.", T0)


class CountingEmbedder:
    """The real e5 embedder, counting the texts it embeds on each side."""

    def __init__(self, inner):
        self.inner, self.id, self.dim = inner, inner.id, inner.dim
        self.texts = {"query": [], "document": []}

    def embed(self, texts, *, kind):
        self.texts[kind] += list(texts)
        return self.inner.embed(texts, kind=kind)


def test_turns_are_stored_with_their_time_and_order(any_bank, day1):
    assert any_bank.add_turn("amy", "   \n ", "reply", day1) is None  # blank: not stored
    assert any_bank.add_turn("amy", "", "", day1) is None
    a = any_bank.add_turn("amy", "I adopted a cat named Miso", "What a lovely name!", day1)
    b = any_bank.add_turn("amy", "She likes tuna", "Cats love tuna.", day1 + timedelta(minutes=5))
    assert (a.position, b.position) == (0, 1) and any_bank.count("amy") == 2
    assert [t.query for t in any_bank.turns_on("amy", day1.date())] == ["I adopted a cat named Miso", "She likes tuna"]
    assert any_bank.days("amy") == [day1.date()]
    got = any_bank.get("amy", a.id)
    assert got.created_at == day1 and got.response == "What a lovely name!" and got.state == State.ACTIVE
    with pytest.raises(UnknownMemory):
        any_bank.get("amy", b.id + 1)


def test_a_100_kb_message_is_stored_whole_and_found(paper_bank, day1):
    """On one engine: embedding 100 kB is the cost here, and the same on both; the store's part (a
    100 kB text kept whole) is in test_the_store_interface."""
    any_bank = paper_bank
    filler = "I walked along the river and counted the boats. " * 2100
    text = filler[:50_000] + " My grandmother's secret recipe uses cardamom and saffron. " + filler[:50_000]
    assert len(text) > 100_000
    rec = any_bank.add_turn("amy", text, "Thank you for sharing all of that.", day1)
    assert any_bank.get("amy", rec.id).query == text
    any_bank.add_turn("amy", "I like football", "Great sport!", day1)
    hits = any_bank.retrieve("amy", "grandmother's recipe cardamom", day1 + timedelta(hours=1), k=1)
    assert hits[0].record.id == rec.id


def test_users_never_see_each_other(any_bank):
    fill(any_bank, "amy")
    any_bank.add_turn("bob", "my dog Rex chewed my shoes", "Oh no, Rex!", T0)
    amy, bob = any_bank.records("amy"), any_bank.records("bob")
    assert len(bob) == 1 and all(r.user == "amy" for r in amy) and bob[0].query.startswith("my dog")
    hits = any_bank.retrieve("bob", "what is my cat called? Miso", T0 + timedelta(days=1), k=10)
    assert [h.record.query for h in hits] == [bob[0].query]
    assert not any("Rex" in h.record.text for h in any_bank.retrieve("amy", "dog Rex shoes", T0, k=10))
    others = [r.id for r in amy if r.id != bob[0].id]  # ids are each user's own
    with pytest.raises(UnknownMemory):
        any_bank.get("bob", others[-1])
    assert any_bank.delete("bob", others) == 0  # another user's ids do nothing
    assert any_bank.count("amy") == len(amy) and sorted(any_bank.users()) == ["amy", "bob"]
    any_bank.delete_user("amy")
    assert any_bank.users() == ["bob"] and not any_bank.has_user("amy") and any_bank.count("bob") == 1


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def test_the_pool_of_many_memories(any_bank):
    """``pool`` with more neighbouring places than one look-up takes, in a number that is no
    round one: every turn next to a turn found, once, in the stores' order (day, position), as
    places with whether it has a reply; read whole or in parts joined, the same pool."""
    store = any_bank.user_store("amy")
    rng = np.random.default_rng(1)
    days = [date(2024, 1, 1) + timedelta(days=i) for i in range(37)]
    recs = [
        MemoryRecord(user="amy", kind=Kind.TURN, text=f"turn {d} {n}", created_at=T0, day=d, position=n)
        for d in days
        for n in range(12)
    ]
    stored = store.insert(recs, _unit(rng, len(recs), store.dim))
    at = {(r.day, r.position): r.stored_id for r in stored}
    picked = [r for r in stored if r.position % 3 == 1 or (r.position == 11 and r.day.day % 2)]
    places = {(r.day, r.position + d) for r in picked for d in (-1, 1)}
    assert len(places) > 300 and len(places) % 50
    some = [stored[n].stored_id for n in range(0, len(stored), 5)]
    store.set_vectors(some, _unit(rng, len(some), store.dim), column="reply_vector")
    store.replace_text(stored[1].stored_id, stored[1].text, store.vectors([stored[1].stored_id])[0][0], response="  ")
    store.replace_text(stored[2].stored_id, stored[2].text, store.vectors([stored[2].stored_id])[0][0], response="yes")
    cues = _unit(rng, 2, store.dim)
    pool = store.pool([r.stored_id for r in picked] + [10_000_000], lambda: cues)
    assert list(pool.found) == sorted(r.stored_id for r in picked)
    assert list(pool.found.values()) == list(store.get_many(r.stored_id for r in picked).values())
    beside = [at[p] for p in sorted(places) if p in at]
    assert [(n.id, n.day, n.position) for n in pool.beside] == [(i, *p) for p in sorted(places) if (i := at.get(p))]
    replied = {r.id for r in store.get_many(beside).values() if r.response.strip()}
    assert {n.id for n in pool.beside if n.replied} == replied != set()
    every = list(dict.fromkeys([*pool.found, *beside]))
    assert set(pool.row) == set(every)
    # read in two parts (as a turn reads its lexical candidates apart), joined: the same pool
    half = [r.stored_id for r in picked[::2]] + [r.stored_id for r in picked[1:40:2]]
    rest = {r.stored_id for r in picked} - set(half)
    both = store.pool(half, lambda: cues).joined(store.pool(rest, lambda: cues))
    # parts that share memories (the message's and the conversation's candidates, read apart on
    # two workers), joined, then joined with the rest: still the same pool
    third = [r.stored_id for r in picked[::3]]
    shared = (
        store.pool(half, lambda: cues).joined(store.pool(third, lambda: cues)).joined(store.pool(rest, lambda: cues))
    )
    for joined in (both, shared):
        assert list(joined.found) == list(pool.found) and joined.beside == pool.beside
        # the same cosines up to float32 rounding: a matrix product's last bit depends on the
        # shape of the read it is worked out in (BLAS blocks and threads), not on the memory
        for whole, part in zip(pool.cosines, joined.cosines):
            a = np.array([part[joined.row[i]] for i in every])
            b = np.array([whole[pool.row[i]] for i in every])
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, equal_nan=True)


def test_a_pool_read_with_cues_sends_their_cosines(any_bank):
    """``pool(ids, cues)``: each row's inner product with each cue, that of its vectors (NaN for a
    reply vector not there), read whole or in two parts joined."""
    store = any_bank.user_store("amy")
    rng = np.random.default_rng(2)
    recs = [
        MemoryRecord(user="amy", kind=Kind.TURN, text=f"turn {d} {n}", created_at=T0, day=date(2024, 2, d), position=n)
        for d in range(1, 9)
        for n in range(6)
    ]
    vecs = rng.standard_normal((len(recs), store.dim)).astype(np.float32)
    stored = store.insert(recs, vecs / np.linalg.norm(vecs, axis=1, keepdims=True))
    some = [r.stored_id for r in stored[::3]]
    replies = rng.standard_normal((len(some), store.dim)).astype(np.float32)
    store.set_vectors(some, replies / np.linalg.norm(replies, axis=1, keepdims=True), column="reply_vector")
    cues = rng.standard_normal((2, store.dim)).astype(np.float32)
    cues /= np.linalg.norm(cues, axis=1, keepdims=True)
    picked = [r.stored_id for r in stored[1::4]]
    cued = store.pool(picked, lambda: cues)
    every = list(cued.row)
    own, reply = store.vectors(every)
    rows = [cued.row[i] for i in every]
    own_cos, reply_cos = (c[rows] for c in cued.cosines)
    assert own_cos.shape == reply_cos.shape == (len(every), 2)
    assert np.allclose(own_cos, own @ cues.T, atol=1e-5)
    has_reply = reply.any(axis=1)
    assert has_reply.any() and not has_reply.all()
    assert np.isnan(reply_cos[~has_reply]).all()
    assert np.allclose(reply_cos[has_reply], reply[has_reply] @ cues.T, atol=1e-5)
    both = store.pool(picked[::2], lambda: cues).joined(store.pool(picked[1::2], lambda: cues))
    assert list(both.found) == list(cued.found) and both.beside == cued.beside
    for i in every:
        for whole, part in zip(cued.cosines, both.cosines):
            assert np.allclose(part[both.row[i]], whole[cued.row[i]], equal_nan=True)
    assert store.pool([], lambda: cues).cosines[0].shape == (0, 2)
    # one cue (a message without a conversation yet)
    one = store.pool(picked, lambda: cues[:1])
    assert np.allclose(one.cosines[0][rows], own @ cues[:1].T, atol=1e-5)
    assert np.isnan(one.cosines[1][rows][~has_reply]).all() and one.cosines[1].shape == (len(every), 1)


def test_the_store_interface(any_bank):
    """The user store's own calls, with given vectors (no embedder): rows, vectors, typed hits."""
    store = any_bank.user_store("amy")
    dim = store.dim
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((4, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    d1, d2 = date(2024, 1, 1), date(2024, 1, 2)
    recs = [
        MemoryRecord(user="amy", kind=Kind.TURN, text="the red kite flies", created_at=T0, day=d1, query="q0"),
        MemoryRecord(
            user="amy", kind=Kind.TURN, text="blue kite", created_at=T0, day=d1, response="a reply", importance=0.7
        ),
        MemoryRecord(
            user="amy", kind=Kind.TURN, text="green boat", created_at=T0, day=d2, query="x" * 100_000, importance=0.6
        ),
        MemoryRecord(user="amy", kind=Kind.DAILY_EVENTS, text="a kite day", created_at=T0, day=d1, extra={"k": "值"}),
    ]
    with pytest.raises(IndexError):  # a write that fails half-way leaves nothing
        store.insert(recs, vecs[:1])
    assert store.count() == 0
    stored = store.insert(recs, vecs)
    ids = [r.stored_id for r in stored]
    assert [r.position for r in stored[:3]] == [0, 1, 0]
    assert store.get(ids[2]).query == "x" * 100_000 and store.get(10_000) is None
    assert set(store.get_many([ids[0], ids[3], 10_000])) == {ids[0], ids[3]} and store.get(ids[3]).extra == {"k": "值"}
    assert [r.id for r in store.records(kind=Kind.TURN, day=d1)] == ids[:2]
    assert [r.id for r in store.records(days=[d2])] == [ids[2]]
    assert [r.id for r in store.records(kind=Kind.TURN, newest_first=True, limit=2)] == [ids[2], ids[1]]
    assert [r.id for r in store.records(kind=Kind.TURN, limit=2, offset=1)] == ids[1:3]
    assert store.days() == [d1, d2] and store.count(kind=Kind.TURN) == 3
    assert store.records(days=[]) == [] and store.count(kind=Kind.TURN, state=State.ARCHIVED) == 0
    assert [r.id for r in store.records(kind=Kind.TURN, day=d1, extra=False)] == ids[:2]  # one day's turns
    assert [r.id for r in store.records(kind=Kind.TURN, importance_at_least=0.6)] == ids[1:3]
    assert store.records(kind=Kind.TURN, day=d1, importance_at_least=0.65, extra=False)[0].id == ids[1]
    assert store.records(state=State.ARCHIVED, importance_at_least=0.0) == []
    many = [10_000 + i for i in range(1200)] + [ids[3], ids[0]]  # more ids than one statement takes
    assert set(store.get_many(many)) == {ids[0], ids[3]} and store.get_many([]) == {}
    pool = store.pool([ids[2], ids[0], ids[3], 10_000], lambda: vecs[:1])  # the turns next to turns, not a summary's
    assert set(pool.found) == {ids[0], ids[2], ids[3]} and pool.found[ids[3]].extra == {"k": "值"}
    assert [n.id for n in pool.beside] == [ids[1]] and [
        n.id for n in store.pool([ids[1]], lambda: vecs[:1]).beside
    ] == [ids[0]]
    assert np.allclose(store.vectors([ids[2], ids[0]])[0], vecs[[2, 0]], atol=1e-6)
    assert store.replies_pending() == [(ids[1], "a reply")]
    store.set_vectors([ids[1]], vecs[3:4], column="reply_vector")
    assert store.replies_pending() == [] and np.allclose(store.vectors([ids[1]])[1], vecs[3])
    own, reply = store.vectors([ids[1], ids[0]])
    assert np.allclose(own, vecs[[1, 0]], atol=1e-6) and np.allclose(reply[0], vecs[3]) and not reply[1].any()
    store.sync()
    assert len(store.dense(vecs[0], 10)) == 5  # four memories and one reply
    dense = store.dense(vecs[3], 2)  # the summary's own vector, then the turn's reply (the same)
    assert {(h.id, h.side) for h in dense} == {(ids[3], Side.OWN), (ids[1], Side.REPLY)}
    assert all(isinstance(h, SearchHit) and h.score == pytest.approx(1.0, abs=1e-3) for h in dense)
    words = store.lexical(Tokenizer().query_terms("kite"), 10)
    assert {h.id for h in words} == {ids[0], ids[1], ids[3]} and {h.side for h in words} == {Side.WORDS}
    assert store.lexical([], 10) == [] and store.lexical(["nothinglikeit"], 10) == []
    # BM25's document frequencies: the memories, and those holding each term (a repeat counted
    # where it stands)
    assert store.documents_with(["kite", "boat", "nothinglikeit", "kite"]) == (4, [3, 1, 0, 3])
    assert store.documents_with([]) == (4, [])
    store.set_vectors([ids[1]], None, column="reply_vector")  # cleared: made again by the reply worker
    assert store.replies_pending() == [(ids[1], "a reply")]
    store.set_state([ids[0]], State.ARCHIVED, T0)
    archived = store.get(ids[0])
    assert archived.state == State.ARCHIVED and archived.archived_at == T0
    assert ids[0] in {h.id for h in store.lexical(["kite"], 10)}  # the second tier stays searchable
    store.replace_text(ids[3], "a boat day", vecs[0])
    assert ids[3] not in {h.id for h in store.lexical(["kite"], 10)}
    assert ids[3] in {h.id for h in store.lexical(["boat"], 10)}
    assert store.documents_with(["kite", "boat"]) == (4, [2, 2])  # archived memories count too
    assert store.set_pinned(ids[2], True) and store.get(ids[2]).pinned
    rows = [row for batch in with_vectors(store, batch=2) for row in batch]
    assert [r.id for r, _, _ in rows] == ids and rows[1][2] is None and rows[0][1] is not None
    store.set_meta("colour", "red")
    assert store.meta()["colour"] == "red" and "vseq" not in store.meta()
    assert store.delete([ids[0], 10_000]) == 1 and store.count() == 3
    assert store.documents_with(["kite", "boat"]) == (3, [1, 2])


def test_a_turn_is_stored_with_the_vector_its_retrieval_already_made(open_bank, e5_embedder, day1):
    counting = CountingEmbedder(e5_embedder)
    bank = open_bank(counting)
    bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", day1)
    message = "My sister Lena is getting married in June"
    bank.retrieve("amy", message, day1)
    bank.settle()
    before = dict((k, len(v)) for k, v in counting.texts.items())
    turn = bank.add_turn("amy", message, "Congratulations to her!", day1)
    bank.settle()
    # the message is not embedded again; the reply is, once, as a passage, after the turn
    assert len(counting.texts["query"]) == before["query"]
    assert counting.texts["document"][before["document"] :] == ["Congratulations to her!"]
    stored = bank.user_store("amy").vectors([turn.id])[0][0]
    assert np.allclose(stored, embed_turns(e5_embedder, [message])[0], atol=1e-6)
    assert np.allclose(stored, bank.embed_query(message), atol=1e-6)
    reply = bank.user_store("amy").vectors([turn.id])[1][0]
    assert np.allclose(reply, embed_replies(e5_embedder, ["Congratulations to her!"])[0], atol=1e-6)
    # a regenerated reply keeps the message's vector; the new reply gets its own, after the turn
    before = {k: len(v) for k, v in counting.texts.items()}
    bank.edit_text("amy", turn.id, "How wonderful, congratulations!")
    bank.settle()
    assert len(counting.texts["query"]) == before["query"]
    assert counting.texts["document"][before["document"] :] == ["How wonderful, congratulations!"]
    assert np.allclose(bank.user_store("amy").vectors([turn.id])[0][0], stored, atol=1e-6)
    # a vector is handed over once: the same message on a later turn is embedded again, twice
    queries = len(counting.texts["query"])
    bank.retrieve("amy", message, day1)
    bank.add_turn("amy", message, "You told me!", day1)
    bank.add_turn("amy", message, "Yes, in June.", day1)
    assert counting.texts["query"][queries:] == [message, message]


def test_changing_the_embedder_reembeds(open_bank, day1):
    bank = open_bank()
    bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", day1)
    bank.add_turn("amy", "I work night shifts at the hospital", "That is tiring.", day1)
    bank.close()
    seen = []

    class Bar:
        def __init__(self, total, **kw):
            seen.append(total)

        def update(self, n):
            seen.append(n)

        def close(self):
            pass

    minilm = create_embedder("minilm")
    other = open_bank(minilm, progress=Bar)
    hits = other.retrieve("amy", "my cat", day1 + timedelta(hours=1), k=1)
    assert hits[0].record.query.startswith("I adopted a cat")
    assert seen[0] == 2 and sum(seen[1:]) == 2
    assert other.user_store("amy").meta()["embedder"] == other.vectors_id
    assert other.vectors_id.startswith(minilm.id)


def test_vectors_made_the_old_way_are_redone_once_as_turn_vectors(open_bank, e5_embedder, day1):
    bank = open_bank()
    turn = bank.add_turn("amy", "I work night shifts at the hospital", "That is tiring.", day1)
    bank.set_summary("amy", Kind.GLOBAL_EVENTS, "Amy is a nurse who works nights.", day1)
    store = bank.user_store("amy")
    store.set_vectors([turn.id], embed_documents(e5_embedder, [turn.text]))  # as earlier versions made them
    store.set_meta("embedder", e5_embedder.id)
    bank.close()
    counting = CountingEmbedder(e5_embedder)
    again = open_bank(counting)
    hits = again.retrieve("amy", "what is my job", day1 + timedelta(hours=1), k=2)
    assert turn.id in [h.record.id for h in hits]
    again.settle()
    assert counting.texts["query"][:1] == ["I work night shifts at the hospital"]
    assert sorted(counting.texts["document"]) == ["Amy is a nurse who works nights.", "That is tiring."]
    vector = again.user_store("amy").vectors([turn.id])[0][0]
    assert np.allclose(vector, embed_turns(e5_embedder, [turn.query])[0], atol=1e-6)
    again.close()
    third = CountingEmbedder(e5_embedder)
    reopened = open_bank(third)
    reopened.retrieve("amy", "night shifts", day1, k=1)
    assert third.texts["document"] == [] and third.texts["query"] == ["night shifts"]


def test_the_bank_indexes_and_searches_with_its_stores_tokenizer(open_bank, day1):
    # a word of the tokenizer's user dictionary is one term, in the stored documents and in the
    # searches, on both engines; jieba's own dictionary cuts it in two
    word = "雪球球"
    assert word not in Tokenizer().tokenize(f"我的猫叫{word}")
    tokenizer = Tokenizer(words=[word])
    bank = open_bank(tokenizer=tokenizer)
    assert bank.tokenizer is tokenizer and bank.stores.tokenizer is tokenizer
    cat = bank.add_turn("amy", f"我的猫叫{word}", "好可爱的名字！", day1)
    bank.add_turn("amy", "今天下雪了，我们堆了一个雪球", "听起来很好玩。", day1)
    assert cat is not None and word in bank.tokenizer.query_terms(word)
    assert [h.id for h in bank.user_store("amy").lexical([word], 10)] == [cat.id]


def test_delete_purge_and_pin(any_bank, day1):
    a = any_bank.add_turn("amy", "secret one", "ok", day1)
    b = any_bank.add_turn("amy", "secret two", "ok", day1)
    c = any_bank.add_turn("amy", "keep this forever", "ok", day1)
    any_bank.pin("amy", c.id)
    later = day1 + timedelta(days=30)
    decisions = {d.record.id: d for d in any_bank.forget_pass("amy", later, dry_run=True)}
    assert decisions[a.id].archived and not decisions[c.id].archived
    assert any_bank.get("amy", a.id).state == State.ACTIVE  # dry run changed nothing
    any_bank.forget_pass("amy", later)
    assert any_bank.get("amy", a.id).state == State.ARCHIVED
    assert any_bank.delete("amy", [b.id]) == 1
    assert any_bank.purge_archived("amy") == 1
    assert [r.id for r in any_bank.records("amy")] == [c.id]
    any_bank.settle()
    store = any_bank.user_store("amy")
    assert len(store.dense(store.vectors([c.id])[0][0], 10)) == 2  # its message and its reply


def test_summaries_are_upserted_and_editable(any_bank, day1):
    s1 = any_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat.", day1, day=day1.date())
    s2 = any_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat named Miso.", day1, day=day1.date())
    assert s1.id == s2.id and any_bank.get_summary("amy", Kind.DAILY_EVENTS, day1.date()).text.endswith("Miso.")
    g = any_bank.set_summary("amy", Kind.GLOBAL_PERSONALITY, "Warm and curious.", day1)
    edited = any_bank.edit_text("amy", g.id, "Warm, curious, loves cats.")
    assert any_bank.get_summary("amy", Kind.GLOBAL_PERSONALITY).text == edited.text
    with pytest.raises(ValueError):
        any_bank.set_summary("amy", Kind.DAILY_EVENTS, "no day", day1)
    with pytest.raises(ValueError):
        any_bank.edit_text("amy", g.id, "  ")


def test_a_days_summary_rehearses_the_turns_it_draws_on(any_bank):
    """Consolidation as rehearsal: the turn the summary speaks of is reinforced, the other is not."""
    pixel = any_bank.add_turn("amy", "I adopted a kitten named Pixel from the shelter", "Lovely!", T0)
    grey = any_bank.add_turn("amy", "The sky is grey", "Indeed.", T0 + timedelta(minutes=1))
    assert any_bank.rehearse("amy", T0.date(), T0 + timedelta(days=1)) == []  # no summary yet
    text = "Amy adopted a kitten, Pixel, from a shelter. She chatted."
    any_bank.set_summary("amy", Kind.DAILY_EVENTS, text, T0 + timedelta(hours=12), day=T0.date())
    back = any_bank.rehearse("amy", T0.date(), T0 + timedelta(days=1))
    assert [r.id for r in back] == [pixel.id]
    assert any_bank.get("amy", pixel.id).strength == 2 and any_bank.get("amy", pixel.id).recall_count == 1
    assert any_bank.get("amy", grey.id).strength == 1


def comparable(export: dict) -> dict:
    for turns in export["history"].values():
        for t in turns:
            t.pop("id")
    return export


def test_both_engines_rank_score_and_export_alike(tmp_path, pg_url, e5_embedder):
    """Not per engine: the two side by side, after the same history (reinforced, forgotten,
    restored, edited): the same hits with the same scores, the same BM25 scores, the same export."""
    from memory.stores.postgres import PostgresStores

    banks = [MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder), MemoryBank(PostgresStores(pg_url), e5_embedder)]
    try:
        for bank in banks:
            fill(bank, "amy")
            rec = bank.records("amy", kind=Kind.TURN)[1]
            bank.reinforce("amy", [rec.id], T0 + timedelta(days=3))
            bank.forget_pass("amy", T0 + timedelta(days=4))
            bank.restore("amy", bank.records("amy", kind=Kind.TURN)[0].id, T0 + timedelta(days=4))
            bank.edit_text("amy", bank.records("amy", kind=Kind.TURN)[2].id, "鼓浪屿的钢琴博物馆很有意思")
            bank.supersede("amy", bank.records("amy", kind=Kind.TURN)[1].id, "edited", when=T0 + timedelta(days=4))
            bank.settle()  # every reply vector made, on both, before they are compared
        lite, pg = banks
        now = T0 + timedelta(days=4)
        for question in ("what is my cat called?", "鼓浪屿", "who visits me next week", "hiking trail"):
            want = lite.retrieve("amy", question, now, k=5)
            got = pg.retrieve("amy", question, now, k=5)
            assert [h.record.text for h in got] == [h.record.text for h in want], question
            # close, not equal: the reply worker embeds what is pending when it wakes, so the two
            # banks' reply vectors can come from batches of other sizes, whose bfloat16 products
            # differ in their last bits (scores seen 1.5e-4 apart); the engines add nothing to that
            assert np.allclose([h.score for h in got], [h.score for h in want], rtol=0, atol=5e-4), question
        found = 0
        for text in ("cat Miso", "鼓浪屿 风景", "trail hiking views hot", "busy animals", "sister"):
            want_words = lite.user_store("amy").lexical(Tokenizer().query_terms(text), 50)
            got_words = pg.user_store("amy").lexical(Tokenizer().query_terms(text), 50)
            assert len(got_words) == len(want_words), text
            assert np.allclose(sorted(h.score for h in got_words), sorted(h.score for h in want_words), rtol=1e-6), text
            found += len(got_words)
        assert found >= 2
        assert comparable(export_user(pg, "amy")) == comparable(export_user(lite, "amy"))
        for state in State:
            assert pg.count("amy", state=state) == lite.count("amy", state=state)
    finally:
        for bank in banks:
            bank.close()


def test_a_recall_from_what_the_retrieval_read_loses_no_other_recall(any_bank, day1):
    """A turn reinforces its memories from the records its retrieval read (no second read); one
    recalled again in the meantime (another tab's turn) is read again, so both recalls count."""
    a = any_bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", day1)
    b = any_bank.add_turn("amy", "My sister Lily visits next week", "How nice!", day1)
    read = {r.stored_id: r for r in (any_bank.get("amy", a.id), any_bank.get("amy", b.id))}
    later = day1 + timedelta(days=2)
    any_bank.reinforce("amy", [b.id], day1 + timedelta(days=1))  # another turn recalls b first
    back = any_bank.reinforce("amy", [a.id, b.id], later, read=read)
    assert [r.id for r in back] == [a.id, b.id]
    got_a, got_b = any_bank.get("amy", a.id), any_bank.get("amy", b.id)
    assert (got_a.recall_count, got_a.strength, got_a.last_recall) == (1, read[a.id].strength + 1, later)
    assert (got_b.recall_count, got_b.strength, got_b.last_recall) == (2, read[b.id].strength + 2, later)
    assert [(r.recall_count, r.strength) for r in back] == [
        (got_a.recall_count, got_a.strength),
        (got_b.recall_count, got_b.strength),
    ]
    # the store's part: a write from a stale read is refused and named; a deleted memory too
    store = any_bank.user_store("amy")
    stale = any_bank.policy.reinforce(read[b.id], later)
    fresh = any_bank.policy.reinforce(got_a, later)
    assert store.update_forgetting([stale, fresh], read={b.id: read[b.id], a.id: got_a}) == [b.id]
    assert any_bank.get("amy", b.id).recall_count == 2 and any_bank.get("amy", a.id).recall_count == 2
    any_bank.delete("amy", [a.id])
    assert store.update_forgetting([fresh], read={a.id: got_a}) == [a.id]
    assert any_bank.reinforce("amy", [a.id], later, read={a.id: got_a}) == []


def test_the_global_summaries_in_one_read(any_bank, day1):
    assert any_bank.global_summaries("amy") == {}
    any_bank.add_turn("amy", "I adopted a cat", "Lovely!", day1)
    any_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat.", day1, day=day1.date())
    p = any_bank.set_summary("amy", Kind.GLOBAL_PERSONALITY, "Warm and curious.", day1)
    assert any_bank.global_summaries("amy") == {Kind.GLOBAL_PERSONALITY: p}
    e = any_bank.set_summary("amy", Kind.GLOBAL_EVENTS, "Amy has a cat.", day1)
    found = any_bank.global_summaries("amy")
    assert found == {Kind.GLOBAL_EVENTS: e, Kind.GLOBAL_PERSONALITY: p}
    assert all(found[k].text == any_bank.get_summary("amy", k).text for k in found)


def test_a_records_extra_fields_are_parsed_when_first_used(any_bank, monkeypatch):
    """A turn's extra fields (the memories and today's lines its prompt held: kilobytes of JSON)
    come from the store as text, parsed when the record's ``extra`` is first used. A chat turn
    reads all of today's turns; parsing every turn's fields at each read made the turns of a long
    day slower and slower. The record is otherwise as before: equal, hashable, frozen."""
    import memory.records as records

    when = datetime(2024, 5, 1, 9, 0)
    extra = {"used": [{"id": i, "text": "x" * 300} for i in range(5)], "stopped": False}
    for i in range(30):
        any_bank.add_turn("amy", f"message {i}", f"reply {i}", when + timedelta(minutes=i), extra=extra)
    real, parsed = records.json, []

    class CountingJson:
        @staticmethod
        def loads(text):
            parsed.append(text)
            return real.loads(text)

    monkeypatch.setattr(records, "json", CountingJson)
    today = any_bank.turns_on("amy", when.date())
    assert [t.query for t in today] == [f"message {i}" for i in range(30)] and parsed == []
    assert today[3].extra == extra and len(parsed) == 1
    assert today[3].extra is today[3].extra and len(parsed) == 1  # once
    again = any_bank.get("amy", today[3].stored_id)
    assert again == today[3] and hash(again) == hash(today[3]) and parsed == [parsed[0]]
    with pytest.raises(FrozenInstanceError):
        today[3].extra = {}  # type: ignore[misc]
    # a record made in code keeps the dict it is given, and each new one has its own empty dict
    given = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date(), extra=extra)
    first = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date())
    second = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date())
    assert given.extra is extra and first.extra == {} and first.extra is not second.extra


def test_a_days_turns_read_without_their_extra_fields(any_bank):
    """``turns_on(extra=False)`` (a chat turn's read of today's turns) gives the same turns in the
    same order with every field but the extra ones, which are not read: each record's ``extra``
    is empty, and a read with them still gives them whole."""
    when = datetime(2024, 5, 1, 9, 0)
    for i in range(12):
        extra = {"used": [{"id": i, "text": f"memory {i}"}], "stopped": i % 2 == 0}
        any_bank.add_turn("amy", f"message {i}", f"reply {i}", when + timedelta(minutes=i), extra=extra)
    any_bank.add_turn("amy", "another day", "yes", when + timedelta(days=1), extra={"stopped": True})
    any_bank.settle()  # the replies' vectors made: none is added between the reads below
    whole = any_bank.turns_on("amy", when.date())
    bare = any_bank.turns_on("amy", when.date(), extra=False)
    assert bare == whole and [t.query for t in bare] == [f"message {i}" for i in range(12)]
    assert all(t.extra == {} for t in bare)
    assert [t.extra["stopped"] for t in whole] == [i % 2 == 0 for i in range(12)]
    # the latest turns' vectors come with the read as they would be read on their own
    store = any_bank.user_store("amy")
    ids = [t.stored_id for t in bare[-6:]]
    ahead = store.vectors(ids)
    again = store.vectors(ids)
    assert all(np.array_equal(a, b) for a, b in zip(ahead, again)) and ahead[0].shape == (6, store.dim)


def test_one_field_of_many_memories_extra_fields(any_bank):
    """``extra_at(ids, path)``: the text at ``path`` in each memory's extra fields (the API's
    chat digests), for the memories that hold a text there, read without the rest of the fields;
    another user's memories give nothing."""
    when = datetime(2024, 5, 1, 9, 0)
    fields = [
        {"chat": {"history": "abc123"}, "used": [{"text": "x" * 500}]},
        {"chat": {"history": "def456"}},
        {"chat": {"history": 7}},  # not a text
        {"chat": {}},
        {},
        {"chat": {"history": "给你"}},
    ]
    ids = [
        any_bank.add_turn("amy", f"m{i}", "r", when + timedelta(minutes=i), extra=extra).stored_id
        for i, extra in enumerate(fields)
    ]
    other = any_bank.add_turn("bob", "m", "r", when, extra={"chat": {"history": "abc123"}}).stored_id
    found = any_bank.extra_at("amy", [*ids, other, 10**9], ("chat", "history"))
    assert found == {ids[0]: "abc123", ids[1]: "def456", ids[5]: "给你"}  # not bob's
    assert any_bank.extra_at("amy", ids, ("used",)) == {}  # a list is not a text
    assert any_bank.extra_at("amy", [], ("chat", "history")) == {}


def test_a_deletion_rewrites_the_records_that_name_the_memory_and_only_those(any_bank):
    """What names whom is kept as memories are stored and edited (``naming``, each engine's, off the port): a
    deletion rewrites the records of prompts that held the deleted memory and leaves the others,
    even one whose fields hold the id's text elsewhere; a deleted record names nobody."""
    when = datetime(2024, 5, 1, 9, 0)
    a = any_bank.add_turn("amy", "I keep a parrot named Zazu", "A parrot!", when).stored_id
    b = any_bank.add_turn("amy", "hello", "hi", when, extra={"used": [{"id": a, "text": "parrot Zazu"}]}).stored_id
    other = any_bank.add_turn("amy", "and then", "ok", when, extra={"today": [{"id": b, "text": "hello"}]}).stored_id
    text_only = any_bank.add_turn("amy", "note", "ok", when, extra={"note": f'{{"id": {a}}}'}).stored_id
    both, both2 = (  # a batch (an import) is written another way than a chat turn
        r.stored_id
        for r in any_bank.add_turns(
            "amy",
            [("more", "sure", when), ("again", "fine", when)],
            extra={"used": [{"id": a, "text": "Zazu"}, {"id": b, "text": "hello"}]},
        )
    )
    any_bank.add_turn("bob", "hi", "hi", when, extra={"used": [{"id": a, "text": "bob's own"}]})
    store = any_bank.user_store("amy")
    assert store.naming([a]) == [b, both, both2] and store.naming([b]) == [other, both, both2]
    assert store.naming([text_only]) == []
    # an edit of a record's fields changes whom it names
    store.replace_text(other, "and then\nok", None, extra=json.dumps({"used": [{"id": a, "text": "Zazu"}]}))
    assert store.naming([a]) == [b, other, both, both2] and store.naming([b]) == [both, both2]

    assert any_bank.delete("amy", [a]) == 1
    assert store.naming([a]) == []
    assert any_bank.get("amy", b).extra["used"] == [] and any_bank.get("amy", other).extra["used"] == []
    assert any_bank.get("amy", both).extra["used"] == [{"id": b, "text": "hello"}]
    assert any_bank.get("amy", text_only).extra == {"note": f'{{"id": {a}}}'}
    assert any_bank.user_store("bob").naming([a]) != []  # another user's records are theirs
    any_bank.delete("amy", [both, both2])
    assert store.naming([b]) == []  # the deleted record's pairs went with it
