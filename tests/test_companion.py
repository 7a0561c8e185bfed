"""The turn with the real packaged SmolLM2 (a few tokens a reply): storing, the meta-prompt,
reinforcement, regenerate, delete, stop, concurrent tabs and very long messages."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest
from fakes import Clock

from memory.bank import UnknownMemory
from memory.records import Kind
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion, ReplyStream, TurnResult

DAY1 = datetime(2024, 5, 1, 19, 30)
DAY2 = datetime(2024, 5, 2, 20, 0)


@pytest.fixture
def clock():
    return Clock(DAY1)


@pytest.fixture
def companion(bank, smollm2_backend, clock, tmp_path):
    settings = Settings(home=tmp_path / "home", max_new_tokens=6)
    return Companion(bank, smollm2_backend, settings=settings, clock=clock)


def seed_day1(bank):
    """Day 1 already talked about and summarised (no LLM needed to get there)."""
    bank.add_turn("Maya", "I adopted a grey kitten today and named her Pixel.", "What a lovely name!", DAY1)
    bank.add_turn(
        "Maya", "I also booked a pottery class for Thursdays.", "That sounds fun.", DAY1 + timedelta(minutes=3)
    )
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary(
            "Maya", kind, f"Maya adopted a kitten, Pixel ({kind.value}).", DAY2 - timedelta(hours=12), day=DAY1.date()
        )
    bank.set_summary("Maya", Kind.GLOBAL_EVENTS, "Maya has a kitten called Pixel.", DAY2 - timedelta(hours=12))
    bank.set_summary("Maya", Kind.GLOBAL_PERSONALITY, "Maya is warm; reply gently.", DAY2 - timedelta(hours=12))


def test_a_new_user_gets_the_meta_prompt_and_the_turn_is_stored(companion, bank):
    stream = companion.respond("Maya", "  Hi! I just adopted a kitten called Pixel.  ")
    assert isinstance(stream, ReplyStream) and stream.result is None
    chunks = list(stream)
    result = stream.result
    assert isinstance(result, TurnResult) and result.error is None
    assert result.reply == "".join(chunks).strip() and result.reply
    system = result.messages[0]
    assert system.role == "system"
    assert "Today is Wednesday, May 1, 2024." in system.content
    assert "Nothing yet" in system.content and "Never invent a memory." in system.content
    assert result.messages[-1].content.endswith("\n\nHi! I just adopted a kitten called Pixel.")
    assert result.turn is not None and result.turn.query == "Hi! I just adopted a kitten called Pixel."
    assert result.turn.response == result.reply and result.turn.created_at == DAY1
    assert [t.id for t in companion.today("Maya")] == [result.turn.id]


def test_the_replys_vector_is_made_once_the_used_memories_are_reinforced(bank, clock, tmp_path, monkeypatch):
    """The reply's vector (the reply worker's embedding) waits until the turn's own work, the
    reinforcement of the memories it used, is done: it would take the cores from it."""
    from siliconfriend.bench.turns import InstantBackend

    seed_day1(bank)
    clock.now = DAY2
    backend = InstantBackend()
    backend.reply = "Pixel sounds like a wonderful kitten."
    companion = Companion(bank, backend, settings=Settings(home=tmp_path / "home"), clock=clock)
    events: list[str] = []
    reinforce, embed = bank.reinforce, bank._embed_pending_replies

    def slow_reinforce(*args, **kwargs):
        time.sleep(0.3)  # long enough for a worker started before it to begin
        events.append("reinforced")
        return reinforce(*args, **kwargs)

    def noted_embed(user):
        events.append("reply vector")
        return embed(user)

    monkeypatch.setattr(bank, "reinforce", slow_reinforce)
    monkeypatch.setattr(bank, "_embed_pending_replies", noted_embed)
    stream = companion.respond("Maya", "How is my kitten Pixel doing?")
    assert "".join(stream) and stream.result.used and stream.result.turn is not None
    bank.settle()
    assert events == ["reinforced", "reply vector"]
    assert bank.user_store("Maya").vectors([stream.result.turn.stored_id])[1].any()


def test_the_global_summaries_reach_the_prompt_and_used_memories_are_reinforced(companion, bank, clock):
    seed_day1(bank)
    clock.now = DAY2
    stream = companion.respond("Maya", "What is my kitten called?")
    result = stream.collect()
    assert result.error is None and stream.consolidation is not None and not stream.consolidation.summarised
    system = result.messages[0].content
    assert "Maya has a kitten called Pixel." in system and "Maya is warm; reply gently." in system
    pixel = [h for h in result.used if h.record.kind == Kind.TURN and "Pixel" in h.record.query]
    assert pixel, [h.as_dict() for h in result.used]
    line = '- On Wednesday, May 1, 2024, Maya said: "I adopted a grey kitten today and named her Pixel."'
    assert line in result.messages[-1].content and line not in system  # the memories come with the message
    assert [u["id"] for u in result.turn.extra["used"]] == [h.record.id for h in result.used]
    after = bank.get("Maya", pixel[0].record.id)
    # a recall gains relevance x confidence of a step (tests/test_activation_turns.py)
    assert pixel[0].record.strength < after.strength <= pixel[0].record.strength + 1 and after.recall_count == 1
    assert after.last_recall == DAY2
    # today's conversation is history (chat messages), not a memory
    result2 = companion.respond("Maya", "And what class did I book?").collect()
    assert [m.role for m in result2.messages] == ["system", "user", "assistant", "user"]
    assert result2.messages[1].content == "What is my kitten called?"
    assert result.turn.id not in {h.record.id for h in result2.used}


def test_blank_messages_and_bad_user_names_are_refused(companion, bank):
    for text in ("", "   \n\t "):
        with pytest.raises(ValueError, match="message is empty"):
            companion.respond("Maya", text)
    with pytest.raises(ValueError, match="user name"):
        companion.respond(" ", "hello")
    assert not bank.has_user("Maya") or bank.count("Maya") == 0


def test_a_100kb_message_is_accepted_and_shortened_in_the_prompt(bank, smollm2_backend, clock, tmp_path):
    companion = Companion(
        bank, smollm2_backend, settings=Settings(home=tmp_path, max_new_tokens=4), clock=clock, prompt_budget=700
    )
    text = "Dear diary. " + "Today I walked by the river and thought about everything. " * 1800 + "The end."
    assert len(text.encode()) > 100_000
    result = companion.respond("Maya", text).collect()
    assert result.error is None
    sent = result.messages[-1].content.split("]\n\n", 1)[1]
    assert sent.startswith("Dear diary.") and sent.endswith("The end.") and "[...]" in sent
    assert sum(smollm2_backend.count_tokens(m.content) for m in result.messages) <= 700
    assert result.turn.query == text.strip()


def test_regenerate_replaces_the_last_turn_of_today(companion, bank):
    first = TurnResult("", [], bank.add_turn("Maya", "I love rainy days.", "Me too!", DAY1 - timedelta(minutes=5)), [])
    second = companion.respond("Maya", "Do you like rain?").collect()
    stream = companion.regenerate("Maya")
    result = stream.collect()
    assert result.error is None
    assert result.turn.id == second.turn.id and result.turn.position == second.turn.position
    assert result.turn.response == result.reply
    assert [t.id for t in companion.today("Maya")] == [first.turn.id, second.turn.id]
    # the regenerated reply was written without the replaced turn in the conversation
    said = [m.content.split("\n\n")[-1] for m in result.messages if m.role == "user"]
    assert said == ["I love rainy days.", "Do you like rain?"]


def test_regenerate_records_the_memories_the_new_reply_used(companion, bank, clock):
    seed_day1(bank)
    clock.now = DAY2
    first = companion.respond("Maya", "How is my kitten Pixel doing?").collect()
    used_before = [u["id"] for u in first.turn.extra["used"]]
    assert used_before
    bank.delete("Maya", [used_before[0]])  # forgotten before the reply is regenerated
    result = companion.regenerate("Maya").collect()
    assert result.error is None
    stored = bank.get("Maya", result.turn.id)
    ids = [u["id"] for u in stored.extra["used"]]
    assert ids == [h.record.id for h in result.used] and used_before[0] not in ids
    assert stored.response == result.reply


def test_regenerate_with_nothing_today_is_an_error(companion, clock):
    with pytest.raises(ValueError, match="nothing|no reply"):
        companion.regenerate("Maya")


def test_delete_turn_removes_its_memory_and_the_day_is_summarised_again(companion, bank, clock):
    seed_day1(bank)
    first = bank.turns_on("Maya", DAY1.date())[0]
    clock.now = DAY2
    companion.delete_turn("Maya", first.id)
    with pytest.raises(UnknownMemory):
        bank.get("Maya", first.id)
    assert all("Pixel" not in h.record.query for h in bank.retrieve("Maya", "kitten Pixel", DAY2))
    # the summaries written with it are gone; the day is pending again
    assert bank.get_summary("Maya", Kind.DAILY_EVENTS, DAY1.date()) is None
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS) is None
    assert companion.consolidator.pending_days("Maya", DAY2.date()) == [DAY1.date()]
    other = bank.set_summary("Maya", Kind.GLOBAL_EVENTS, "Maya likes pottery.", DAY2)
    with pytest.raises(ValueError, match="not a dialogue turn"):
        companion.delete_turn("Maya", other.id)


def test_stop_keeps_what_was_generated(bank, smollm2_backend, clock, tmp_path):
    companion = Companion(bank, smollm2_backend, settings=Settings(home=tmp_path, max_new_tokens=24), clock=clock)
    stream = companion.respond("Maya", "Tell me a long story about a cat.")
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        stream.stop()
    result = stream.result
    assert result.stopped and result.error is None and len(chunks) == 1
    assert result.turn is not None and result.turn.response == chunks[0].strip()
    # a consumer that goes away mid-reply (a closed tab) counts as a stop
    stream = companion.respond("Maya", "And another one, about a dog.")
    it = iter(stream)
    next(it)
    it.close()
    assert stream.result.stopped and stream.result.turn is not None
    assert len(companion.today("Maya")) == 2


def test_probing_without_storing(companion, bank, clock):
    seed_day1(bank)
    clock.now = DAY2
    before = {r.id: r.strength for r in bank.records("Maya")}
    result = companion.respond("Maya", "What is my kitten called?", store=False).collect()
    assert result.turn is None and result.error is None and result.used
    assert {r.id: r.strength for r in bank.records("Maya")} == before


def run_tabs(companion, tabs: list[list[str]]) -> list[TurnResult]:
    """Each list of messages sent by its own thread (a browser tab), all starting together."""
    results: list[TurnResult] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(tabs))

    def tab(texts):
        try:
            start.wait()
            for text in texts:
                results.append(companion.respond("Maya", text).collect())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=tab, args=(texts,)) for texts in tabs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return results


def test_two_tabs_of_one_user_both_store_their_turns(companion, bank):
    results = run_tabs(companion, [["Good morning!"], ["Hello from my phone."]])
    assert len(results) == 2 and all(r.error is None and r.turn is not None for r in results)
    stored = companion.today("Maya")
    assert sorted(t.query for t in stored) == ["Good morning!", "Hello from my phone."]
    assert sorted(t.position for t in stored) == [0, 1]


class Parrot:
    """A model server that answers many requests at once (no queue, unlike the local model)."""

    name = model = "parrot"
    context_tokens = 4096

    def count_tokens(self, text):
        return len(text) // 4 + 1

    def stream(self, messages, *, max_tokens=None):
        for word in ("You", " said: ", messages[-1].content.split("\n\n")[-1][:20]):
            time.sleep(0.001)
            yield word


def test_many_tabs_at_once_lose_no_turn(bank, clock, tmp_path):
    companion = Companion(bank, Parrot(), settings=Settings(home=tmp_path), clock=clock)
    tabs = [[f"tab {i} message {j}" for j in range(3)] for i in range(6)]
    results = run_tabs(companion, tabs)
    assert len(results) == 18 and all(r.turn is not None for r in results)
    stored = companion.today("Maya")
    assert sorted(t.query for t in stored) == sorted(m for tab in tabs for m in tab)
    assert sorted(t.position for t in stored) == list(range(18))


def test_profile_lists_the_summaries(companion, bank):
    seed_day1(bank)
    profile = companion.profile("Maya")
    assert profile["global_events"] == "Maya has a kitten called Pixel."
    assert profile["global_personality"] == "Maya is warm; reply gently."
    assert profile["daily"] == [
        {
            "day": "2024-05-01",
            "events": "Maya adopted a kitten, Pixel (daily_events).",
            "personality": "Maya adopted a kitten, Pixel (daily_personality).",
        }
    ]
    assert companion.profile("Nobody") == {"global_events": "", "global_personality": "", "daily": []}


def test_the_talk_of_today_is_retrievals_second_cue(companion, bank, clock):
    """Today's turns go to retrieval as the conversation, with their stored vectors; in
    the API the client's history does, a line the store has taking its vector, the others
    embedded by retrieval."""
    from siliconfriend.core.companion import _Turn

    seed_day1(bank)
    clock.now = DAY2
    first = companion.respond("Maya", "Pixel has been sneezing since this morning.").collect()
    talk = companion._talk(_Turn("Maya", "Should I worry?", DAY2, "en", companion.backend, history=[first.turn]))
    assert [(x.role, x.text) for x in talk] == [("user", first.turn.query), ("assistant", first.turn.response)]
    assert talk[0].vector is not None and talk[0].vector.any()
    api = _Turn(
        "Maya",
        "Should I worry?",
        DAY2,
        "en",
        companion.backend,
        history=[first.turn],
        given_history=[(first.turn.query, "an edited reply"), ("A line only the client has", "ok")],
    )
    lines = companion._talk(api)
    assert [x.vector is not None for x in lines] == [True, False, False, False]
    assert lines[1].text == "an edited reply"
    found = bank.retrieve("Maya", "Should I worry?", DAY2, k=3, talk=talk)
    assert any("Pixel" in h.record.query for h in found if h.record.day == DAY1.date())
