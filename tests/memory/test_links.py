"""Memory as a network (memory/links.py), on both engines: the links written when memories are
stored, how deleting and superseding show in them, and the activation that spreads along them."""

from dataclasses import replace
from datetime import timedelta

from memory import links
from memory.records import Kind, State
from memory.retrieval import RetrievalConfig

# a life told around "Amy" (in every memory: links nothing) where Mei is named twice, months apart
LIFE = [
    ("This is Amy. Mei flew her red kite on the beach today", "A red kite! Did Mei love it?"),
    ("This is Amy. Work was long, the printer broke twice", "Printers! Did it get fixed?"),
    ("This is Amy. I baked bread with rosemary", "Rosemary bread sounds lovely."),
    ("This is Amy. The garden needs rain", "Let's hope it rains soon."),
    ("This is Amy. I read a novel about sailors", "Sailors! Was it exciting?"),
    ("This is Amy. Mei starts school in September", "Big step! How does Mei feel?"),
]


def live(bank, day1, user="amy"):
    """One turn a day (no two in one conversation), in order; returns them as stored."""
    return [bank.add_turn(user, q, a, day1 + timedelta(days=i)) for i, (q, a) in enumerate(LIFE)]


def test_memories_naming_a_rare_thing_are_linked_through_it(any_bank, day1):
    turns = live(any_bank, day1)
    store = any_bank.user_store("amy")
    edges = store.links([turns[0].id], max_share=0.5, limit=10)
    assert [(e.dst, e.kind, e.label, e.state) for e in edges] == [(turns[5].id, "entity", "Mei", State.ACTIVE)]
    assert edges[0].weight == 1.0  # named by two memories: the rarest that links
    # the user's own name is in every memory: it links nothing, however small the share allowed
    assert all(e.label != "Amy" for e in store.links([turns[1].id], max_share=1.0, limit=10))
    named = {m.key: n for m, n in store.entity_counts()}
    assert named["mei"] == 2 and named["amy"] == 6


def test_a_conversation_and_a_summary_link_their_turns(any_bank, day1):
    turns = [any_bank.add_turn("amy", q, a, day1 + timedelta(minutes=i)) for i, (q, a) in enumerate(LIFE[:5])]
    store = any_bank.user_store("amy")
    linked = {
        (e.dst, e.weight) for e in store.links([turns[4].id], max_share=0.5, limit=10) if e.kind == "conversation"
    }
    assert linked == {(turns[3].id, 1.0), (turns[2].id, 0.5), (turns[1].id, 1 / 3)}  # up to three places back
    summary = any_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy baked rosemary bread.", day1, day=day1.date())
    drawn = {e.dst for e in store.links([summary.id], max_share=0.5, limit=10) if e.kind == "summary"}
    assert drawn == {turns[2].id}
    # read from the turn's side too, and replaced with the summary's text
    assert summary.id in {e.dst for e in store.links([turns[2].id], max_share=0.5, limit=10)}
    any_bank.set_summary("amy", Kind.DAILY_EVENTS, "Amy read a novel about sailors.", day1, day=day1.date())
    drawn = {e.dst for e in store.links([summary.id], max_share=0.5, limit=10) if e.kind == "summary"}
    assert drawn == {turns[4].id}


def test_deleting_and_superseding_show_in_the_links(any_bank, day1):
    turns = live(any_bank, day1)
    store = any_bank.user_store("amy")
    any_bank.supersede("amy", turns[5].id, "edited")
    (edge,) = store.links([turns[0].id], max_share=0.5, limit=10)
    assert edge.state == State.SUPERSEDED
    any_bank.delete("amy", [turns[5].id])
    assert store.links([turns[0].id], max_share=0.5, limit=10) == []
    assert dict((m.key, n) for m, n in store.entity_counts())["mei"] == 1
    any_bank.delete("amy", [turns[0].id])
    assert "mei" not in {m.key for m, _ in store.entity_counts()}


def test_activation_spreads_along_a_link_and_says_why(any_bank, day1):
    turns = live(any_bank, day1)
    now = day1 + timedelta(days=30)
    # the first hit alone passes activation (of six memories, five would be seeds otherwise)
    on = RetrievalConfig(link_weight=0.5, spread=replace(RetrievalConfig().spread, max_share=0.5, seeds=1))
    query = "How was the kite on the beach?"
    off_hits = any_bank.retrieve("amy", query, now, k=6, config=replace(on, link_weight=0.0))
    on_hits = any_bank.retrieve("amy", query, now, k=6, config=on)
    assert on_hits[0].record.id == turns[0].id
    school = next(h for h in on_hits if h.record.id == turns[5].id)
    assert school.reasons[0] == f"linked to #{turns[0].id} through 'Mei'"
    assert school.link is not None and school.as_dict()["link"] == {
        "from": turns[0].id,
        "kind": "entity",
        "through": "Mei",
    }
    before = next(h for h in off_hits if h.record.id == turns[5].id)
    assert school.score > before.score and before.link is None
    # a superseded memory passes nothing: the kite's turn, edited away, lifts no one
    any_bank.supersede("amy", turns[0].id, "edited")
    after = any_bank.retrieve("amy", query, now, k=6, config=on)
    assert all(h.link is None for h in after)


def test_a_store_made_before_links_gets_them_when_opened(open_bank, day1):
    bank = open_bank()
    turns = live(bank, day1)
    store = bank.user_store("amy")
    store.write_links([(t.id, []) for t in turns])
    store.set_meta("links", "0")
    assert store.links([turns[0].id], max_share=0.5, limit=10) == []
    bank.close()
    again = open_bank()
    edges = again.user_store("amy").links([turns[0].id], max_share=0.5, limit=10)
    assert [(e.dst, e.label) for e in edges] == [(turns[5].id, "Mei")]
    assert again.user_meta("amy", "links") == links.LINKS_VERSION


def test_why_a_linked_memory_was_remembered_reads_in_both_languages():
    from siliconfriend.i18n import why_words

    why = "linked to #12 through 'Mei'; shares words with your message"
    assert why_words(why, "en") == why
    assert why_words(why, "zh") == "通过“Mei”和 #12 相连；和你的话有相同的词"
    assert why_words("linked to #3: the same conversation", "zh") == "和 #3 相连：同一段对话"


def test_a_common_entitys_links_are_the_heaviest_few_with_the_lowest_ids(any_bank, day1):
    """A read takes of an entity's holders only the lowest ids it can keep: the edges are those a
    read of every holder would keep (each memory's ``limit`` heaviest, ties by the lowest id)."""
    said = [f"Today Rex barked at the mailman again, time {i}." for i in range(4)]
    said += [f"Today Mei painted a picture, number {i}." for i in range(2)]
    said += [f"the weather was fine on walk number {i}" for i in range(94)]  # Rex is 5 of 100
    said += ["Today Mei and Rex played fetch."]
    turns = [any_bank.add_turn("amy", q, "Nice.", day1 + timedelta(days=i)) for i, q in enumerate(said)]
    store = any_bank.user_store("amy")
    # the seed names Mei (3 memories) and Rex (5): Mei's links weigh more, Rex's lowest id comes next
    edges = [e for e in store.links([turns[-1].id], max_share=1.0, limit=3) if e.kind == "entity"]
    expected = [(turns[4].id, "Mei"), (turns[5].id, "Mei"), (turns[0].id, "Rex")]
    assert [(e.dst, e.label) for e in edges] == expected
    assert edges[0].weight > edges[-1].weight > 0


def test_an_entitys_weight_follows_the_memories_that_name_it(any_bank, day1):
    """How many memories name an entity is kept as they are stored, edited and deleted: its links
    weigh what its holders make of it now."""
    turns = live(any_bank, day1)
    for i in range(54):  # 60 memories: three holders are within the 5% an entity may hold
        any_bank.add_turn("amy", f"the weather was fine on walk number {i}", "Nice.", day1 + timedelta(days=7 + i))
    store = any_bank.user_store("amy")

    def mei() -> dict[int, float]:
        edges = store.links([turns[0].id], max_share=0.5, limit=10)
        return {e.dst: round(e.weight, 6) for e in edges if e.kind == "entity"}

    assert mei() == {turns[5].id: 1.0}  # named by two: the rarest that links
    third = any_bank.add_turn("amy", "This is Amy. Mei lost a tooth", "Did Mei get a coin?", day1 + timedelta(days=70))
    assert set(mei()) == {turns[5].id, third.id} and mei()[third.id] < 1.0
    any_bank.delete("amy", [third.id])
    assert mei() == {turns[5].id: 1.0}
    any_bank.edit_text("amy", turns[5].id, "This is Amy. Lin starts school in September")
    assert mei() == {}


def test_a_summary_whose_turns_are_superseded_or_deleted_is_dampened(any_bank, day1):
    """Negative propagation: a daily summary hangs on the turns it draws on. Once they are
    superseded, or deleted, it keeps part of its score (with the links on); a new text of it
    draws on the turns there are."""
    said = [
        ("I baked rosemary bread with Mei today", "Rosemary bread sounds lovely."),
        ("The garden needs rain", "Soon."),
    ]
    now = day1 + timedelta(days=1)
    on = RetrievalConfig()
    off = replace(on, link_weight=0.0)

    def summary_score(user: str, summary_id: int, config: RetrievalConfig) -> float:
        hits = any_bank.retrieve(user, "rosemary bread", now, k=5, config=config)
        return next(h.score for h in hits if h.record.id == summary_id)

    for user, gone in (("amy", any_bank.delete), ("bob", lambda user, ids: any_bank.supersede(user, ids[0], "edited"))):
        turns = [any_bank.add_turn(user, q, a, day1 + timedelta(minutes=i)) for i, (q, a) in enumerate(said)]
        summary = any_bank.set_summary(
            user, Kind.DAILY_EVENTS, "Amy baked rosemary bread with Mei.", day1, day=day1.date()
        )
        any_bank.settle()  # the replies' vectors, made by the worker, score the turns on and off alike
        assert summary_score(user, summary.id, on) == summary_score(user, summary.id, off)
        gone(user, [turns[0].id])  # the one turn it draws on
        assert summary_score(user, summary.id, on) < summary_score(user, summary.id, off)
        again = any_bank.set_summary(user, Kind.DAILY_EVENTS, "The garden needs rain.", day1, day=day1.date())
        assert again.id == summary.id
        assert summary_score(user, summary.id, on) == summary_score(user, summary.id, off)


def test_a_chat_turns_links_are_written_by_the_reply_worker(any_bank, day1):
    """``links="later"`` (the companion's turns): the reply worker writes them, as the turn is
    then: an edit made before is in them, a turn deleted before has none."""
    first = any_bank.add_turn("amy", *LIFE[0], day1, replies="queued", links="later")
    later = [
        any_bank.add_turn("amy", *LIFE[i], day1 + timedelta(days=i), replies="queued", links="later") for i in (1, 5)
    ]
    store = any_bank.user_store("amy")
    assert store.links([first.id], max_share=0.5, limit=10) == []  # not yet: queued
    any_bank.edit_text("amy", later[0].id, "A kite for Mei? Lovely.")  # its links are written first
    any_bank.delete("amy", [later[1].id])
    any_bank.queue_replies("amy")
    any_bank.settle()
    edges = store.links([first.id], max_share=0.5, limit=10)
    assert {e.dst for e in edges if e.kind == "entity"} == {later[0].id}  # Mei, as edited (and Amy)
    assert dict((m.key, n) for m, n in store.entity_counts())["mei"] == 2  # the deleted turn names none
    assert {e.dst for e in edges if e.kind == "conversation"} == set()  # a day apart each
