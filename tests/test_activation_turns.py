"""Activation in the turn: a memory the reply used gains more than one that only sat in the
prompt, and the person's confirmation validates what the previous reply recalled."""

from __future__ import annotations

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
    from siliconfriend.web.chat import remembered_markdown

    entries = result.turn.extra["used"]
    assert {e["tier"] for e in entries} <= {"core", "active", "long_term", "archive"} and entries
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
