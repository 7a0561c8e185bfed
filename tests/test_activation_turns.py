"""Activation in the turn: a memory the reply used gains more than one that only sat in the
prompt, and the person's confirmation validates what the previous reply recalled."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from fakes import Clock
from test_companion import DAY2, seed_day1

from memory.records import Kind
from siliconfriend.bench.turns import InstantBackend
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion


@pytest.fixture
def turn(bank, tmp_path):
    seed_day1(bank)
    backend = InstantBackend()
    companion = Companion(bank, backend, settings=Settings(home=tmp_path / "home"), clock=Clock(DAY2))

    def say(message: str, reply: str):
        backend.reply = reply
        return companion.respond("Maya", message).collect()

    return say


def _turn_memories(bank):
    turns = {t.query: t for t in bank.records("Maya", kind=Kind.TURN)}
    pixel, pottery = (
        "I adopted a grey kitten today and named her Pixel.",
        "I also booked a pottery class for Thursdays.",
    )
    return turns[pixel], turns[pottery]


def test_the_memory_the_reply_used_gains_more_than_one_in_the_prompt(turn, bank):
    pixel, pottery = _turn_memories(bank)
    result = turn("What is my kitten called?", "Your grey kitten is called Pixel!")
    used = {h.record.id for h in result.used}
    assert {pixel.id, pottery.id} <= used, [h.as_dict() for h in result.used]
    gained = {r.id: bank.get("Maya", r.id).strength - r.strength for r in (pixel, pottery)}
    assert gained[pixel.id] == pytest.approx(1.0)  # the best match, used by the reply: a full step
    assert 0 < gained[pottery.id] <= 0.4  # only in the prompt
    # "what I remembered" says each memory's tier
    from memory.shown import UsedMemory
    from siliconfriend.web.chat import remembered_markdown

    entries = UsedMemory.all_of(result.turn.extra["used"])
    assert {e.tier for e in entries} <= {"core", "active", "long_term", "archive"} and entries
    assert " · active · S " in remembered_markdown(entries, "en") and " · 活跃 · S " in remembered_markdown(
        entries, "zh"
    )


def test_yes_confirms_what_the_previous_reply_recalled(turn, bank):
    pixel, pottery = _turn_memories(bank)
    turn("What is my kitten called?", "Your grey kitten is called Pixel!")
    before = {r.id: bank.get("Maya", r.id) for r in (pixel, pottery)}
    turn("Yes, still Pixel! She sleeps on my keyboard.", "She sounds like a handful.")
    after = {r.id: bank.get("Maya", r.id) for r in (pixel, pottery)}
    # validated: S x 2 + 1, far more than a recall's step
    assert after[pixel.id].strength == pytest.approx(before[pixel.id].strength * 2 + 1)
    assert after[pottery.id].strength - before[pottery.id].strength < 1  # not confirmed
    # a message that does not agree confirms nothing
    turn("What class did I book?", "You booked a pottery class on Thursdays.")
    mid = bank.get("Maya", pottery.id).strength
    turn("I might skip it this week.", "That's fine.")
    assert bank.get("Maya", pottery.id).strength - mid <= 1.0


def test_saying_a_memory_again_confirms_it(turn, bank):
    _, pottery = _turn_memories(bank)
    before = bank.get("Maya", pottery.id).strength
    result = turn("I booked a pottery class for Thursdays, remember?", "Yes, on Thursdays.")
    assert pottery.id in {h.record.id for h in result.used}
    assert bank.get("Maya", pottery.id).strength == pytest.approx(before * 2 + 1)
    assert timedelta(0) == bank.get("Maya", pottery.id).last_recall - DAY2


def test_the_core_tier_is_in_every_prompt(turn, bank):
    pixel, pottery = _turn_memories(bank)
    bank.pin("Maya", pottery.id)
    for n, said in enumerate(("It rained all day.", "The weather was awful, so wet.", "Grey skies again.")):
        bank.add_turn("Maya", said, "Stay dry!", DAY2 - timedelta(hours=20 - n))
    bank.add_turn("Maya", "Rain and wind all week.", "Stay dry!", DAY2 - timedelta(hours=16))
    bank.retrieval_config = replace(bank.retrieval_config, k=1)  # the cue finds one memory: the weather
    # a message about something else: the pinned memory is in the prompt all the same, as core
    result = turn("The weather is awful today, isn't it?", "It is grey and wet.")
    core = {h.record.id: h for h in result.used if h.tier == "core"}
    assert pottery.id in core and core[pottery.id].reasons == ["pinned: always in mind"]
    assert core[pottery.id].cue == "core" and len(result.used) == 2
    assert "pottery class" in result.messages[-1].content
    assert bank.get("Maya", pottery.id).recall_count == pottery.recall_count  # unused: not a recall
    # what the person confirms joins the core, and stays in the prompts after
    turn("What is my kitten called?", "Your grey kitten is called Pixel!")
    turn("Yes, still Pixel!", "Lovely.")
    assert {r.id for r in bank.core("Maya")} == {pottery.id, pixel.id}
    later = turn("Any plans for the weekend?", "Maybe a walk.")
    assert {pixel.id, pottery.id} <= {h.record.id for h in later.used if h.tier == "core"}
    # unpinned, deleted: out of the core
    bank.pin("Maya", pottery.id, pinned=False)
    bank.delete("Maya", [pixel.id])
    assert bank.core("Maya") == []


def test_a_small_memory_budget_keeps_whole_sentences(bank, tmp_path):
    seed_day1(bank)
    long = "I started night shifts at the hospital. " * 3 + "My sister in Taipei called me at dawn."
    bank.add_turn("Maya", long, "Night shifts are hard. Sleep well during the day.", DAY2 - timedelta(hours=30))
    backend = InstantBackend()
    settings = Settings(home=tmp_path / "home", memory_tokens=60)
    companion = Companion(bank, backend, settings=settings, clock=Clock(DAY2))
    backend.reply = "ok"
    result = companion.respond("Maya", "How are my night shifts at the hospital going?").collect()
    block = result.messages[-1].content
    assert "night shifts at the hospital." in block
    memory_lines = [ln for ln in block.splitlines() if ln.startswith("- ")]
    assert memory_lines and sum(backend.count_tokens(ln) + 1 for ln in memory_lines) <= 60
    for ln in memory_lines:  # every line ends its sentences: nothing cut in the middle of one
        assert "[...]" not in ln and ln.rstrip('"]').rstrip()[-1] in ".!?", ln


def test_retrieval_induced_forgetting_in_the_turn(bank, tmp_path):
    seed_day1(bank)
    from memory.forgetting import EbbinghausPolicy

    bank.policy = EbbinghausPolicy(competitor_loss=0.2)
    bank.retrieval_config = replace(bank.retrieval_config, k=1)  # the prompt holds one; the rest compete
    pixel, pottery = _turn_memories(bank)
    backend = InstantBackend()
    companion = Companion(bank, backend, settings=Settings(home=tmp_path / "home"), clock=Clock(DAY2))
    backend.reply = "Your grey kitten is called Pixel!"
    result = companion.respond("Maya", "What is my grey kitten called?").collect()
    assert [h.record.id for h in result.used] == [pixel.id]
    after = bank.get("Maya", pottery.id)
    assert 1.0 <= after.strength < pottery.strength and after.recall_count == 0
    assert bank.get("Maya", pixel.id).strength > pixel.strength
