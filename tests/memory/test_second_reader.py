"""The second reader (``RetrievalConfig.second_reader_below``): its vectors made off the turn's
clock on both engines, kept beside the embedder's, made again when the words change, gone with
the memory, carried by a copy; and asked at retrieval only where the message's words say little,
its ranking fused with the embedder's by rank."""

from dataclasses import replace
from datetime import timedelta

import numpy as np
from test_store_contract import T0, TURNS, fill

from memory.bank import MemoryBank
from memory.records import Kind
from memory.retrieval import RetrievalConfig, _Members, _with_second
from memory.store_copy import copy_user
from memory.stores.sqlite import SqliteStores


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_its_vectors_are_made_kept_remade_and_gone_with_the_memory(open_bank, use_reader):
    bank = open_bank(second=use_reader)
    fill(bank, "amy")
    bank.settle()
    store = bank.user_store("amy")
    records = bank.records("amy")
    ids = [r.id for r in records]
    assert store.second_pending() == []
    own, reply = store.second_vectors(ids)
    assert own.shape == (len(ids), use_reader.dim) and not np.isnan(own).any()
    turns = [i for i, r in enumerate(records) if r.kind == Kind.TURN]
    assert sorted(np.flatnonzero(~np.isnan(reply[:, 0]))) == turns  # a reply's, for turns only
    first = records[turns[0]]
    assert first.query == TURNS[0][0]
    assert _cos(own[turns[0]], use_reader.embed([TURNS[0][0]], kind="query")[0]) > 0.999
    assert _cos(reply[turns[0]], use_reader.embed([TURNS[0][1]], kind="document")[0]) > 0.999

    # a new reply: its vector made again, the message's kept; a superseded memory keeps its words
    # and its vectors
    bank.edit_text("amy", first.id, "Miso sounds adorable, do send a photo")
    bank.settle()
    own2, reply2 = store.second_vectors([first.id])
    assert _cos(reply2[0], use_reader.embed(["Miso sounds adorable, do send a photo"], kind="document")[0]) > 0.999
    assert _cos(own2[0], own[turns[0]]) > 0.999
    bank.supersede("amy", first.id, "edited", when=T0 + timedelta(days=1))
    assert store.second_pending() == []

    # deleted: gone with the row
    bank.delete("amy", [first.id])
    gone, gone_reply = store.second_vectors([first.id, ids[-1]])
    assert np.isnan(gone[0]).all() and np.isnan(gone_reply[0]).all() and not np.isnan(gone[1]).any()


def test_memories_stored_before_it_was_on_get_its_vectors_when_opened(open_bank, use_reader):
    before = open_bank()
    fill(before, "amy")
    before.settle()
    assert len(before.user_store("amy").second_pending()) == before.count("amy")
    before.close()
    after = open_bank(second=use_reader)
    store = after.user_store("amy")  # the reply worker is asked at the open
    after.settle()
    assert store.second_pending() == []


def test_a_copy_carries_its_vectors(tmp_path, pg_url, e5_embedder, use_reader):
    from memory.stores.postgres import PostgresStores

    lite = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder, second=use_reader)
    pg = MemoryBank(PostgresStores(pg_url), e5_embedder)  # no reader: nothing is made there
    try:
        fill(lite, "amy")
        lite.settle()
        assert copy_user(lite, pg, "amy") == "copied"
        ids = [r.id for r in lite.records("amy")]
        for want, got in zip(lite.user_store("amy").second_vectors(ids), pg.user_store("amy").second_vectors(ids)):
            assert np.array_equal(np.isnan(want), np.isnan(got))
            assert np.allclose(np.nan_to_num(want), np.nan_to_num(got))
    finally:
        lite.close()
        pg.close()


def test_the_fusion_is_of_ranks_and_a_memory_without_its_vector_keeps_its_rank():
    members = _Members([1, 2, 3], {}, set(), None)  # type: ignore[arg-type]
    dense_s = np.array([1.0, 0.5, 0.0])  # the embedder: 1, 2, 3
    cue = np.array([[1.0, 0.0]])
    own = np.array([[0.5, 0.0], [0.0, 1.0], [1.0, 0.0]])  # the second reader: 3, 1, 2
    nan = np.full((3, 2), np.nan)
    fused = _with_second((own, nan), members, dense_s, cue, RetrievalConfig())
    # 1/61 + 1/62, 1/62 + 1/63, 1/63 + 1/61: the first stays first, the third passes the second
    assert list(np.argsort(-fused)) == [0, 2, 1] and fused.max() == 1.0
    lacking = own.copy()
    lacking[2] = np.nan  # stored a moment ago: its one reading counts twice, the rest keep theirs
    fused = _with_second((lacking, nan), members, dense_s, cue, RetrievalConfig())
    assert list(np.argsort(-fused)) == [0, 1, 2]
    assert np.array_equal(_with_second((nan, nan), members, dense_s, cue, RetrievalConfig()), dense_s)


def test_it_is_asked_where_the_words_say_little_and_only_there(tmp_path, e5_embedder, use_reader):
    with_it = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder, second=use_reader)
    try:
        fill(with_it, "amy")
        for i in range(12):  # a pool with room for two readings to differ
            with_it.add_turn("amy", f"Errand number {i}: groceries, the post office, a parcel", "Busy day!", T0)
        with_it.settle()
        now = T0 + timedelta(days=5)
        off = replace(with_it.retrieval_config, second_reader_below=0.0)

        def scores(query: str, config: RetrievalConfig) -> list[tuple[int, float]]:
            return [(h.record.id, round(h.score, 9)) for h in with_it.retrieve("amy", query, now, k=8, config=config)]

        # the message's words are the memory's: the embedder reads alone (the gate keeps the
        # reader out: asked whatever the words say, it would move the scores)
        factual = "What did my manager do with the deadline at work?"
        assert scores(factual, with_it.retrieval_config) == scores(factual, off)
        assert scores(factual, replace(off, second_reader_below=1.01)) != scores(factual, off)
        # a message naming its day is anchored by it, whatever its other words say
        dated = f"Feeling overwhelmed on {T0.date().isoformat()}, so much pressure from above"
        assert scores(dated, replace(off, second_reader_below=1.01)) == scores(dated, off)
        # an associative cue, none of its words in memory: the second reading moves the scores
        associative = "Feeling overwhelmed lately, so much pressure from above"
        assert scores(associative, with_it.retrieval_config) != scores(associative, off)
    finally:
        with_it.close()
