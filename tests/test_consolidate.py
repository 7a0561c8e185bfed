"""Day rollover: which days are pending, daily and global summaries with the real SmolLM2,
idempotence, failures that leave work pending, chunked global folds, and the forgetting pass."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest

from memory.records import Kind, State
from siliconfriend.backends.base import BackendUnavailable
from siliconfriend.core.consolidate import Consolidator, tidy

D1, D2, D3 = date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 3)


def at(day: date, hour: int = 20, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute)


class Recording:
    """The real model, with every prompt it was given recorded; ``fail_on`` makes matching prompts
    fail as if the server had gone away."""

    name = "recording"

    def __init__(self, real, fail_on: str | None = None):
        self.real = real
        self.model = real.model
        self.context_tokens = real.context_tokens
        self.fail_on = fail_on
        self.prompts: list[str] = []

    def count_tokens(self, text: str) -> int:
        return self.real.count_tokens(text)

    def stream(self, messages, *, max_tokens=None):
        prompt = messages[-1].content
        if self.fail_on and self.fail_on in prompt:
            raise BackendUnavailable("the model server went away")
        self.prompts.append(prompt)
        return self.real.stream(messages, max_tokens=max_tokens)


class Down:
    name = model = "down"
    context_tokens = 2048

    def count_tokens(self, text):
        return len(text) // 4 + 1

    def stream(self, messages, *, max_tokens=None):
        raise BackendUnavailable("connection refused")
        yield  # pragma: no cover


def talk(bank, day: date, *lines: tuple[str, str]) -> None:
    for i, (query, reply) in enumerate(lines):
        bank.add_turn("Maya", query, reply, at(day, 19, i))


def test_tidy_cuts_an_unfinished_sentence():
    assert tidy('  "Maya adopted Pixel. She was happy and then she"  ') == "Maya adopted Pixel."
    assert tidy("Maya adopted Pixel.") == "Maya adopted Pixel."
    assert tidy("A short line without end") == "A short line without end"
    assert tidy("林晓领养了年糕。她很开心，然后") == "林晓领养了年糕。"
    assert tidy("   ") == ""


def test_pending_days(bank):
    c = Consolidator(bank, Down())
    talk(bank, D1, ("I adopted a kitten.", "Lovely."))
    talk(bank, D2, ("Pottery class today.", "Fun!"))
    assert c.pending_days("Maya", D2) == [D1, D2]
    assert c.pending_days("Maya", D1) == [D1]
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary("Maya", kind, "Maya adopted a kitten.", at(D2, 8), day=D1)
    bank.set_summary("Maya", Kind.DAILY_EVENTS, "Maya went to pottery.", at(D3, 8), day=D2)
    assert c.pending_days("Maya", D3) == [D2]  # half done is still pending
    bank.set_summary("Maya", Kind.DAILY_PERSONALITY, "Maya is creative.", at(D3, 8), day=D2)
    assert c.pending_days("Maya", D3) == []
    # summarised while the day went on (consolidate --date today), then more was said
    talk(bank, D3, ("Morning!", "Hi!"))
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary("Maya", kind, "Maya said good morning.", at(D3, 19, 30), day=D3)
    assert c.pending_days("Maya", D3) == []
    bank.add_turn("Maya", "Evening now.", "Good evening.", at(D3, 21))
    assert c.pending_days("Maya", D3) == [D3]
    assert Consolidator(bank, Down()).pending_days("Nobody", D3) == []


def test_days_are_summarised_folded_and_never_twice(bank, smollm2_backend):
    model = Recording(smollm2_backend)
    c = Consolidator(bank, model, summary_tokens=6)
    talk(bank, D1, ("I adopted a grey kitten today and named her Pixel.", "What a lovely name!"))
    report = c.run("Maya", at(D2, 9))
    assert report.ok and report.summarised == [D1] and report.forgot
    # one day: its summaries are the global ones (no global profile when the day's had to be left
    # empty: the grounding check, tests/test_grounding.py); a text that failed it was asked again
    written = {w.kind: w for w in report.written}
    assert Kind.GLOBAL_EVENTS in report.global_updated and written[Kind.GLOBAL_EVENTS].path == "daily"
    assert (Kind.GLOBAL_PERSONALITY in report.global_updated) == (written[Kind.DAILY_PERSONALITY].path != "none")
    first = len(model.prompts)
    assert first == sum(len(written[k].attempts) for k in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY))
    assert "Maya: I adopted a grey kitten today and named her Pixel." in model.prompts[0]
    assert "Wednesday, May 1, 2024" in model.prompts[0]
    events = bank.get_summary("Maya", Kind.DAILY_EVENTS, D1)
    assert events.text and events.day == D1 and events.created_at == at(D2, 9)
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS).text == f"Wednesday, May 1, 2024: {events.text}"
    assert any(h.record.id == events.id for h in bank.retrieve("Maya", events.text, at(D2, 10)))
    # idempotent: nothing pending, nothing called, nothing forgotten again
    again = c.run("Maya", at(D2, 10))
    assert again.summarised == [] and again.global_updated == [] and not again.forgot and len(model.prompts) == first
    # the next day is folded into what was known
    talk(bank, D2, ("I signed up for a pottery class on Thursdays.", "That sounds fun."))
    previous = bank.get_summary("Maya", Kind.GLOBAL_EVENTS).text
    report = c.run("Maya", at(D3, 9))
    assert report.summarised == [D2] and Kind.GLOBAL_EVENTS in report.global_updated
    fold = [p for p in model.prompts if "What happened on the following days" in p]
    assert 1 <= len(fold) <= 2 and previous in fold[0] and "Thursday, May 2, 2024:" in fold[0]
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS).created_at == at(D3, 9)


def test_a_half_failed_day_only_redoes_the_missing_half(bank, smollm2_backend):
    talk(bank, D1, ("I adopted a kitten named Pixel.", "Lovely!"))
    flaky = Recording(smollm2_backend, fail_on="personality")
    report = Consolidator(bank, flaky, summary_tokens=6).run("Maya", at(D2, 9))
    assert list(report.failed) == [D1] and "went away" in report.failed[D1]
    assert bank.get_summary("Maya", Kind.DAILY_EVENTS, D1) is not None
    assert bank.get_summary("Maya", Kind.DAILY_PERSONALITY, D1) is None
    assert bank.get_summary("Maya", Kind.GLOBAL_PERSONALITY) is None
    working = Recording(smollm2_backend)
    report = Consolidator(bank, working, summary_tokens=6).run("Maya", at(D2, 10))
    assert report.ok and report.summarised == [D1]
    [profile] = [w for w in report.written if w.kind == Kind.DAILY_PERSONALITY]  # only the missing half
    assert report.global_updated == ([] if profile.path == "none" else [Kind.GLOBAL_PERSONALITY])
    assert len(working.prompts) == len(profile.attempts) and all("personality" in p for p in working.prompts)


def test_a_failed_run_leaves_everything_pending(bank):
    talk(bank, D1, ("Hello", "Hi"))
    talk(bank, D2, ("Hello again", "Hi again"))
    c = Consolidator(bank, Down())
    report = c.run("Maya", at(D3, 9))
    assert list(report.failed) == [D1, D2] and not report.summarised and not report.forgot and not report.ok
    assert bank.summaries("Maya", Kind.DAILY_EVENTS) == [] and c.pending_days("Maya", D2) == [D1, D2]


def test_many_days_are_folded_in_chunks_that_fit(bank, smollm2_backend):
    model = Recording(smollm2_backend)
    c = Consolidator(bank, model, summary_tokens=6, prompt_budget=330)
    for i in range(3):
        day = D1 + timedelta(days=i)
        text = f"Day {i}: Maya " + " ".join(f"visited place{i}x{j}" for j in range(20)) + "."
        bank.set_summary("Maya", Kind.DAILY_EVENTS, text, at(day + timedelta(days=1), 8), day=day)
    report = c.run("Maya", at(D1 + timedelta(days=5), 9))
    assert report.global_updated == [Kind.GLOBAL_EVENTS]
    # at least two chunks (each maybe asked again after a failed grounding check, and the chunks'
    # summaries folded again when they do not fit together), all within the budget
    assert len([p for p in model.prompts if "Write it again" not in p]) >= 2
    assert all(smollm2_backend.count_tokens(p) <= 330 for p in model.prompts)
    assert all(f"Day {i}:" in "".join(model.prompts) for i in range(3))
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS).text


def test_the_forgetting_pass_archives_what_faded_but_never_the_global_summaries(bank):
    talk(bank, D1, ("I adopted a kitten named Pixel.", "Lovely!"))
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary("Maya", kind, "Maya adopted Pixel.", at(D2, 8), day=D1)
    for kind in (Kind.GLOBAL_EVENTS, Kind.GLOBAL_PERSONALITY):
        bank.set_summary("Maya", kind, "Maya has a kitten.", at(D2, 8))
    c = Consolidator(bank, Down())
    assert not c.run("Maya", at(D3, 9)).forgot  # nothing new: no pass
    # past a personal fact's years (a pet: people and pets fade at a twenty-fifth of the clock)
    report = c.run("Maya", at(D1 + timedelta(days=2500), 9), forget=True)
    assert report.ok and report.forgot and report.archived == 3
    assert {r.kind for r in bank.records("Maya", state=State.ARCHIVED)} == {
        Kind.TURN,
        Kind.DAILY_EVENTS,
        Kind.DAILY_PERSONALITY,
    }
    assert all(
        r.state == State.ACTIVE
        for k in (Kind.GLOBAL_EVENTS, Kind.GLOBAL_PERSONALITY)
        for r in bank.summaries("Maya", k)
    )
    assert c.pending_days("Maya", D3) == []  # an archived summary still counts as done


def test_invalidate_day(bank):
    talk(bank, D1, ("I adopted a kitten named Pixel.", "Lovely!"))
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary("Maya", kind, "Maya adopted Pixel.", at(D2, 8), day=D1)
    bank.set_summary("Maya", Kind.GLOBAL_EVENTS, "Maya has a kitten.", at(D2, 8))
    c = Consolidator(bank, Down())
    assert c.pending_days("Maya", D2) == []
    c.invalidate_day("Maya", D1)
    assert c.pending_days("Maya", D2) == [D1] and bank.get_summary("Maya", Kind.GLOBAL_EVENTS) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_summary_prompts_are_rendered_for_each_language(bank, lang):
    seen = []

    class Capture(Down):
        def stream(self, messages, *, max_tokens=None):
            seen.append(messages)
            raise BackendUnavailable("stop here")
            yield  # pragma: no cover

    talk(bank, D1, ("Hello", "Hi"))
    Consolidator(bank, Capture(), companion_name="Friend").run("Maya", at(D2, 9), lang=lang)
    system, user = seen[0]
    assert system.role == "system" and user.role == "user"
    assert "Maya: Hello" in user.content or "Maya：Hello" in user.content
    assert ("Wednesday, May 1, 2024" if lang == "en" else "2024年5月1日") in user.content


def test_a_long_turn_is_compressed_by_the_model_when_grounded(bank):
    from siliconfriend.bench.turns import InstantBackend
    from siliconfriend.core.prompting import load_prompts

    long = (
        "My grandmother Rosa turned ninety last weekend and the whole family came to Porto for her party. "
        "We cooked her favourite bacalhau together, and my cousin Ana flew in from Toronto to surprise her. "
        "She cried when she saw Ana, and then laughed all evening telling stories about her own wedding. "
        "I keep thinking about how much she has seen, and how little time I spend with her these days. "
        "Maybe I should call her every Sunday, the way my mother does, and ask her about the old days."
    )
    turn = bank.add_turn(
        "Maya",
        long,
        "Ninety years! What a party, and what a surprise from Ana. It sounds like the whole family "
        "shares her stories. Do you want to visit her more often?",
        at(D1),
    )
    model = InstantBackend()
    c = Consolidator(bank, model)
    prompts = load_prompts("en")
    model.reply = "Rosa turned ninety and my cousin Ana flew in from Toronto to surprise her."
    assert c.compress(turn, prompts, model) == (
        model.reply,
        "Ninety years! What a party, and what a surprise from Ana.",
    )
    assert len(turn.query) + len(turn.response) > 600  # long enough to compress
    model.reply = "Rosa turned ninety in Lisbon and Pedro came from Paris."  # names never said
    assert c.compress(turn, prompts, model) is None
    model.reply = long + " And more."  # not shorter
    assert c.compress(turn, prompts, model) is None
    # the rollover's forgetting pass uses it (the bank compresses when its settings say so)
    bank.compress = True
    model.reply = "Rosa turned ninety and my cousin Ana flew in from Toronto to surprise her."
    c.run("Maya", at(D2, 9))  # the day summarised (and rehearsed) first
    c.run("Maya", at(D1 + timedelta(days=4000), 9), forget=True)
    copies = [t for t in bank.records("Maya", kind=Kind.TURN) if "compressed_of" in t.extra]
    assert [t.query for t in copies] == [model.reply] and copies[0].state == State.ACTIVE
    assert bank.get("Maya", turn.stored_id).state == State.ARCHIVED
