"""Day rollover: the daily summaries of each finished day, the global ones, then forgetting.

For each day that has turns and lacks a daily event summary or a daily personality (or whose
summary is older than its last turn), the LLM writes them from the day's dialogue; the new event
summary then reinforces the turns it draws on (consolidation as rehearsal, ``MemoryBank.rehearse``). New daily
summaries are then folded into the global event summary and the global personality (the previous
global text plus the new days, in chunks that fit the model). Every step is idempotent: a day is
done once both its summaries exist; a failed LLM call leaves that day (or the global fold) pending
and it is retried on the next run. A summary is a memory with its day, so it can be retrieved.
Finally the forgetting pass archives what has faded.

Nothing is kept that was not said (``grounding.py``): each sentence of a daily summary is checked
against the day's turns, of a daily personality against the user's own words (its sentences about
the companion against the turns), of a global one against the daily ones it rolls up. When a
sentence fails, the text is written again with the failure named; a second failure keeps the
grounded sentences when they are the most, and otherwise falls back: the day's own statements by
the user, said as such ("You told me: ..."), for events; an honest "too little was said" for a
personality (no profile beats a false one); the dated daily lines for the global
events. What was left out is counted with the record (``extra["grounding"]``) and the memory page
says so.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Callable, Sequence

from memory import compression
from memory.bank import MemoryBank
from memory.importance import about_self, rate_importance
from memory.lexical import Tokenizer
from memory.records import Kind, MemoryRecord

from ..backends.base import BackendError, ChatBackend, Message, Sampling, takes_sampling
from .grounding import Check, GroundingChecker, Sources, join_sentences, split_sentences
from .prompting import PromptError, PromptSet, fit_block, load_prompts

log = logging.getLogger("siliconfriend.core.consolidate")

DAILY = {Kind.DAILY_EVENTS: "daily_events", Kind.DAILY_PERSONALITY: "daily_personality"}
GLOBAL = {
    Kind.GLOBAL_EVENTS: ("global_events", Kind.DAILY_EVENTS),
    Kind.GLOBAL_PERSONALITY: ("global_personality", Kind.DAILY_PERSONALITY),
}
_SENTENCE_END = re.compile(r"[.!?](?=[\s\"'”’)）]|$)|[。！？]")
GROUNDING = "grounding"  # the key of what the check found, in a summary's ``extra``
# how a summary came to be: the model's text as written, written again after a failed check, the
# model's grounded sentences only, the user's own words, no profile at all
PATHS = ("model", "regenerated", "kept", "extractive", "none", "daily")
EXTRACTIVE_STATEMENTS = 4  # at most this many of the user's statements in an extractive summary
EXTRACTIVE_CHARS = 160  # each cut to about this many characters
GLOBAL_FALLBACK_CHARS = 1500
# the longest summary the companion asks for: "two or three short sentences" take 40-80 tokens, and
# what a small model writes past them is where it starts to invent
SUMMARY_TOKENS = 96
# how a summary is generated, where the backend takes it: greedy (a summary wants the likeliest
# words, not varied ones), and the penalties that keep a small model from looping counted on its
# own words only, so that they never keep it from copying the names and words it summarises
SUMMARY_SAMPLING = Sampling(temperature=0.0, repetition_penalty=1.3, no_repeat_ngram_size=4, penalise_prompt=False)


@dataclass
class Written:
    """One summary the rollover wrote, and what the grounding check made of it."""

    kind: Kind
    day: date | None
    path: str  # one of PATHS
    attempts: list[Check]  # the check of each model text, in order
    dropped: int  # sentences of the model's text that were left out
    text: str

    def extra(self) -> dict:
        first = self.attempts[0] if self.attempts else None
        return {
            GROUNDING: {
                "path": self.path,
                "dropped": self.dropped,
                "sentences": len(first.verdicts) if first else 0,
                "grounded": len(first.kept) if first else 0,
                "invented": first.invented[:10] if first else [],
            }
        }


@dataclass
class ConsolidationReport:
    user: str
    summarised: list[date] = field(default_factory=list)  # days whose summaries were (re)written
    failed: dict[date, str] = field(default_factory=dict)  # day -> why it is still pending
    global_updated: list[Kind] = field(default_factory=list)  # GLOBAL_EVENTS / GLOBAL_PERSONALITY
    global_failed: dict[Kind, str] = field(default_factory=dict)
    written: list[Written] = field(default_factory=list)  # each summary written, with its check
    rehearsed: int = 0  # turns the new daily summaries reinforced
    archived: int = 0  # memories the forgetting pass archived
    forgot: bool = False  # whether the forgetting pass ran

    @property
    def ok(self) -> bool:
        return not self.failed and not self.global_failed

    @property
    def dropped(self) -> int:
        """Unsupported sentences left out of what was written."""
        return sum(w.dropped for w in self.written)


def tidy(text: str) -> str:
    """A generated summary without surrounding blanks and without a sentence cut off at the end."""
    text = text.strip().strip('"').strip()
    if not text or text[-1] in ".!?。！？\"'”)）":
        return text
    ends = list(_SENTENCE_END.finditer(text))
    if ends and ends[-1].end() > len(text) // 3:
        return text[: ends[-1].end()].strip()
    return text


class Consolidator:
    """Writes the summaries of finished days with ``backend``. ``summary_tokens`` caps each
    summary; ``prompt_budget`` caps a summary prompt (default: what the model's context allows);
    ``sampling``: the summaries' generation settings (None: the backend's own, as for a reply)."""

    def __init__(
        self,
        bank: MemoryBank,
        backend: ChatBackend,
        *,
        companion_name: str = "SiliconFriend",
        summary_tokens: int = 200,
        prompt_budget: int | None = None,
        prompts: Callable[[str], PromptSet] = load_prompts,
        checker: GroundingChecker | None = None,
        sampling: Sampling | None = SUMMARY_SAMPLING,
    ):
        self.bank = bank
        self.checker = checker or GroundingChecker(bank.embedder, bank.tokenizer)
        self.backend = backend
        self.companion_name = companion_name
        self.summary_tokens = summary_tokens
        self.prompt_budget = prompt_budget
        self.prompts = prompts
        self.sampling = sampling

    # -- what is pending ----------------------------------------------------------------------
    def pending_days(self, user: str, until: date) -> list[date]:
        """Days up to ``until`` (inclusive) with turns whose summaries are missing or stale."""
        days = [d for d in self.bank.days(user) if d <= until]
        if not days:
            return []
        have = {kind: {r.day: r for r in self.bank.summaries(user, kind)} for kind in DAILY}
        pending = []
        for day in days:
            found = [have[kind].get(day) for kind in DAILY]
            recs = [r for r in found if r is not None]
            if len(recs) < len(found):
                pending.append(day)
            elif any(r.created_at.date() <= day for r in recs):  # summarised while the day went on
                last = max(t.created_at for t in self.bank.turns_on(user, day))
                if any(r.created_at < last for r in recs):
                    pending.append(day)
        return pending

    def unfolded(self, user: str, kind: Kind) -> list[MemoryRecord]:
        """Daily summaries written after the global summary of ``kind`` (all when there is none)."""
        name, daily_kind = GLOBAL[kind]
        current = self.bank.get_summary(user, kind)
        dailies = sorted(self.bank.summaries(user, daily_kind), key=lambda r: r.day)
        dailies = [r for r in dailies if path_of(r) != "none"]  # no profile: nothing to fold
        if current is None:
            return dailies
        return [r for r in dailies if r.created_at > current.created_at]

    def summaries_of(self, user: str, day: date) -> set[int]:
        """The ids of ``day``'s summaries (events, personality) that were written."""
        return {r.stored_id for kind in DAILY if (r := self.bank.get_summary(user, kind, day)) is not None}

    def global_summaries(self, user: str) -> set[int]:
        """The ids of the global summaries that were written."""
        return {r.stored_id for kind in GLOBAL if (r := self.bank.get_summary(user, kind)) is not None}

    def invalidate_day(self, user: str, day: date) -> None:
        """Forget what was summarised of ``day`` and the global summaries (after one of its turns was
        replaced): the next run writes them again without it."""
        ids = self.summaries_of(user, day)
        if ids:
            self.bank.delete(user, sorted(ids | self.global_summaries(user)))

    # -- the run ------------------------------------------------------------------------------
    def run(
        self,
        user: str,
        now: datetime,
        *,
        until: date | None = None,
        lang: str = "en",
        backend: ChatBackend | None = None,
        forget: bool | None = None,
        rng: random.Random | None = None,
    ) -> ConsolidationReport:
        """Summarise the pending days up to ``until`` (default: the day before ``now``), fold them into
        the global summaries, then run the forgetting pass (``forget``: always / never; by default
        when something was summarised)."""
        until = until or (now.date() - timedelta(days=1))
        backend = backend or self.backend
        prompts = self.prompts(lang)
        report = ConsolidationReport(user)
        for day in self.pending_days(user, until):
            try:
                report.written += self._summarise_day(user, day, now, prompts, backend)
                report.summarised.append(day)
                report.rehearsed += len(self.bank.rehearse(user, day, now))
            except BackendError as exc:
                log.warning("summary of %s for %s failed, left pending: %s", day, user, exc)
                report.failed[day] = str(exc)
        for kind in GLOBAL:
            new = self.unfolded(user, kind)
            if not new:
                continue
            try:
                report.written.append(self._fold(user, kind, new, now, prompts, backend))
                report.global_updated.append(kind)
            except BackendError as exc:
                log.warning("%s of %s failed, left pending: %s", kind.value, user, exc)
                report.global_failed[kind] = str(exc)
        if forget or (forget is None and (report.summarised or report.global_updated)):
            rng = rng or random.Random(f"{user}|{now.isoformat()}")
            decisions = self.bank.forget_pass(
                user, now, rng=rng, compressor=lambda rec: self.compress(rec, prompts, backend)
            )
            report.archived = sum(d.archived for d in decisions)
            report.forgot = True
        return report

    def _budget(self, backend: ChatBackend) -> int:
        room = backend.context_tokens - self.summary_tokens - 64
        return min(room, self.prompt_budget) if self.prompt_budget else room

    def _summarise_day(
        self, user: str, day: date, now: datetime, prompts: PromptSet, backend: ChatBackend
    ) -> list[Written]:
        turns = self.bank.turns_on(user, day)
        lines = []
        for t in turns:
            lines.append(prompts.fragment("dialogue_user", user_name=user, text=t.query.strip()))
            if t.response.strip():
                lines.append(
                    prompts.fragment("dialogue_companion", companion_name=self.companion_name, text=t.response.strip())
                )
        values = dict(user_name=user, companion_name=self.companion_name, date=prompts.format_date(day))
        allowed = [user, self.companion_name, values["date"]]
        task = "\n".join(
            [
                prompts.fragment("summary_system"),
                *(prompts.render(name, **values, dialogue="") for name in DAILY.values()),
            ]
        )
        # the day's events may tell what the companion said too ("SiliconFriend recommended…");
        # who the person is rests on their own words only: a profile sentence that repeats the
        # companion's reply (a small model's invented one most of all) says nothing of them. Only
        # a profile's sentences about the companion (how it should reply) may draw on the whole talk.
        whole = self.checker.sources(
            [text for t in turns for text in (t.query, t.response)], allowed=allowed, task=task
        )
        own = self.checker.sources([t.query for t in turns], allowed=allowed, task=task)
        written = []
        for kind, name in DAILY.items():
            existing = self.bank.get_summary(user, kind, day)
            if existing is not None and existing.created_at >= max(t.created_at for t in turns):
                continue  # this half was done on an earlier run

            def render(block: str, name: str = name) -> str:
                return prompts.render(name, **values, dialogue=block)

            def prompt(note: str, render: Callable[[str], str] = render) -> str:
                return fit_block(
                    lambda block: render(block) + note,
                    lines,
                    budget=self._budget(backend),
                    count=backend.count_tokens,
                    marker=prompts.fragment("cut"),
                )

            profile = kind == Kind.DAILY_PERSONALITY

            def fallback(kind: Kind = kind) -> tuple[str, str]:
                if kind == Kind.DAILY_PERSONALITY:
                    # who they are in their own words, when the model's profile was not grounded:
                    # what they said of themselves (their people, pets, places, work, plans)
                    own_words = [t.query for t in turns if about_self(statements(t.query))]
                    if not own_words:
                        return "none", prompts.fragment("no_profile", user_name=user, date=values["date"])
                    return "extractive", extractive_summary(
                        own_words, prompts, self.bank.tokenizer, intro="in_their_words", user_name=user
                    )
                return "extractive", extractive_summary([t.query for t in turns], prompts, self.bank.tokenizer)

            w = self._grounded(
                prompts,
                prompt,
                backend,
                own if profile else whole,
                kind,
                day,
                profile=profile,
                fallback=fallback,
                whole=whole if profile else None,
            )
            self.bank.set_summary(user, kind, w.text, now, day=day, extra=w.extra())
            written.append(w)
        return written

    def _grounded(
        self,
        prompts: PromptSet,
        prompt: Callable[[str], str],
        backend: ChatBackend,
        sources: Sources,
        kind: Kind,
        day: date | None,
        *,
        profile: bool,
        fallback: Callable[[], tuple[str, str]],
        whole: Sources | None = None,
    ) -> Written:
        """The model's text when every sentence is grounded; else written once more with the
        failure named (``prompt(note)``: the prompt, fitted with that note at its end); else its
        grounded sentences when they are two thirds of it; else ``fallback``. ``whole``: what the
        sentences that speak of the companion are checked on, where ``sources`` is less."""
        attempts: list[Check] = []
        texts: list[str] = []
        for attempt in range(2):
            try:
                asked = prompt("" if attempt == 0 else "\n\n" + self._retry_note(prompts, attempts[-1]))
            except PromptError:  # no room for the note in a small context: no second attempt
                break
            text = self._generate(prompts, asked, backend)
            check = self._check(text, sources, profile, whole)
            attempts.append(check)
            texts.append(text)
            if check.passed:
                return Written(kind, day, "model" if attempt == 0 else "regenerated", attempts, 0, text)
            log.info(
                "%s of %s: %d of %d sentences unsupported (%s)",
                kind.value,
                day,
                len(check.dropped),
                len(check.verdicts),
                "; ".join(v.why() for v in check.dropped)[:300],
            )
        best = max(attempts, key=lambda c: (len(c.kept), -len(c.dropped)))
        if best.kept and len(best.kept) >= 2 * len(best.dropped):  # two thirds grounded: keep those
            return Written(kind, day, "kept", attempts, len(best.dropped), best.kept_text())
        path, text = fallback()
        return Written(kind, day, path, attempts, len(attempts[-1].verdicts), text)

    def _check(self, text: str, sources: Sources, profile: bool, whole: Sources | None) -> Check:
        check = self.checker.check(text, sources, profile=profile)
        if whole is None or check.passed:
            return check
        wide = self.checker.check(text, whole, profile=profile)
        about_companion = re.compile(rf"{re.escape(self.companion_name)}|\bAI\b|AI(?=[\u4e00-\u9fff])")
        return Check([w if about_companion.search(v.sentence) else v for v, w in zip(check.verdicts, wide.verdicts)])

    @staticmethod
    def _retry_note(prompts: PromptSet, check: Check) -> str:
        names = check.invented
        if names:
            return prompts.fragment("retry_names", names=", ".join(names[:8]))
        sentences = [v.sentence if len(v.sentence) <= 120 else v.sentence[:120] + "…" for v in check.dropped][:2]
        return prompts.fragment("retry_sentences", sentences=" ".join(f'"{s}"' for s in sentences))

    def _fold(
        self,
        user: str,
        kind: Kind,
        new: Sequence[MemoryRecord],
        now: datetime,
        prompts: PromptSet,
        backend: ChatBackend,
    ) -> Written:
        name, _ = GLOBAL[kind]
        current = self.bank.get_summary(user, kind)
        lines = [prompts.fragment("day_line", date=prompts.format_date(r.day), text=r.text.strip()) for r in new]
        if current is None and len(lines) == 1:  # one day: its summary is the whole story so far
            w = Written(kind, None, "daily", [], 0, lines[0])
            self.bank.set_summary(user, kind, lines[0], now, extra=w.extra())
            return w
        previous = current.text if current is not None else prompts.fragment("nothing_yet")
        values = dict(user_name=user, companion_name=self.companion_name)
        budget = self._budget(backend)
        profile = kind == Kind.GLOBAL_PERSONALITY
        attempts: list[Check] = []
        dropped = 0
        paths = []
        for chunk in self._chunks(lines, previous, prompts, name, values, budget, backend):

            def render(block: str, previous: str = previous) -> str:
                return prompts.render(name, **values, previous=previous, days=block)

            def prompt(note: str, render: Callable[[str], str] = render, chunk: list[str] = chunk) -> str:
                return fit_block(
                    lambda block: render(block) + note,
                    chunk,
                    budget=budget,
                    count=backend.count_tokens,
                    marker=prompts.fragment("cut"),
                )

            known = [] if current is None and previous == prompts.fragment("nothing_yet") else [previous]
            sources = self.checker.sources([*known, *chunk], allowed=[user, self.companion_name, *_dates(chunk)])

            def fallback(chunk: list[str] = chunk, known: list[str] = known) -> tuple[str, str]:
                return "extractive", _recent_lines([*known, *chunk], GLOBAL_FALLBACK_CHARS)

            w = self._grounded(prompts, prompt, backend, sources, kind, None, profile=profile, fallback=fallback)
            attempts += w.attempts
            dropped += w.dropped
            paths.append(w.path)
            previous = w.text
        path = next((p for p in ("extractive", "kept", "regenerated") if p in paths), "model")
        w = Written(kind, None, path, attempts, dropped, previous)
        self.bank.set_summary(user, kind, previous, now, extra=w.extra())
        return w

    def _chunks(
        self,
        lines: list[str],
        previous: str,
        prompts: PromptSet,
        name: str,
        values: dict,
        budget: int,
        backend: ChatBackend,
    ) -> list[list[str]]:
        """Days grouped so that each fold fits (room is left for the summary that comes before)."""
        base = backend.count_tokens(prompts.render(name, **values, previous=previous, days=""))
        room = max(budget - max(base, self.summary_tokens + 64), 64)
        chunks: list[list[str]] = [[]]
        used = 0
        for line in lines:
            cost = backend.count_tokens(line) + 1
            if chunks[-1] and used + cost > room:
                chunks.append([])
                used = 0
            chunks[-1].append(line)
            used += cost
        return chunks

    def compress(self, turn: MemoryRecord, prompts: PromptSet, backend: ChatBackend) -> tuple[str, str] | None:
        """A long turn about to be archived, shortened by the model (``memory/compression.py``):
        the person's words in one or two sentences, and the reply's first whole sentences; None
        when the model's text is not good enough (not shorter, or not grounded in what was said:
        ``GroundingChecker``), for the bank to compress extractively."""
        extract = compression.extractive(turn)
        if extract is None:
            return None
        prompt = prompts.fragment("compress", user_name=turn.user, text=" ".join(turn.query.split()))
        try:
            text = self._generate(prompts, prompt, backend)
        except BackendError as exc:
            log.info("compression of #%s by the model failed (%s): extractive", turn.id, exc)
            return None
        sources = self.checker.sources([turn.query], allowed=[turn.user])
        if len(text) >= len(turn.query.strip()) or not self.checker.check(text, sources, about=False).passed:
            return None
        return text, extract[1]

    def _generate(self, prompts: PromptSet, prompt: str, backend: ChatBackend) -> str:
        messages = [Message("system", prompts.fragment("summary_system")), Message("user", prompt)]
        if self.sampling is not None and takes_sampling(backend):
            chunks = backend.stream(messages, max_tokens=self.summary_tokens, sampling=self.sampling)  # type: ignore[call-arg]
        else:
            chunks = backend.stream(messages, max_tokens=self.summary_tokens)
        text = tidy("".join(chunks))
        if not text:
            raise BackendError("the model returned an empty summary")
        return text


def path_of(rec: MemoryRecord | None) -> str | None:
    """How a stored summary came to be (``PATHS``), None for one written before the check or by hand."""
    if rec is None:
        return None
    info = rec.extra.get(GROUNDING) if isinstance(rec.extra, dict) else None
    return info.get("path") if isinstance(info, dict) else None


def dropped_of(rec: MemoryRecord | None) -> int:
    """How many unsupported sentences were left out of a stored summary."""
    info = rec.extra.get(GROUNDING) if rec is not None and isinstance(rec.extra, dict) else None
    return int(info.get("dropped") or 0) if isinstance(info, dict) else 0


_QUESTION = re.compile(r"[?？]\s*$")


def extractive_summary(
    messages: Sequence[str],
    prompts: PromptSet,
    tokenizer: Tokenizer | None = None,
    *,
    intro: str = "you_told_me",
    **values: str,
) -> str:
    """The day's own statements by the user, said as such: "You told me: “…” “…”" (``intro``: the
    fragment that introduces them, with ``values``). Questions and
    small talk are left out, each statement is cut to its first sentences (about
    EXTRACTIVE_CHARS), near repeats are dropped (by their words: ``tokenizer``, the bank's), and
    the most telling ones are kept, in order."""
    tokenizer = tokenizer or Tokenizer()
    candidates: list[tuple[float, int, str]] = []
    seen: list[set[str]] = []
    for i, message in enumerate(messages):
        parts = [p for p in split_sentences(message) if not _QUESTION.search(p)]
        text = ""
        for part in parts:
            if text and len(text) + len(part) > EXTRACTIVE_CHARS:
                break
            text = join_sentences([text, part]) if text else part
        if len(text) > EXTRACTIVE_CHARS * 1.5:
            text = text[:EXTRACTIVE_CHARS].rstrip() + "…"
        score = rate_importance(text) if text else 0.0
        words = set(tokenizer.tokenize(text))
        if not text or score <= 0 or not words:
            continue
        if any(len(words & w) / len(words | w) > 0.6 for w in seen):
            continue
        seen.append(words)
        candidates.append((score, i, text))
    if not candidates:  # only questions and greetings: the first message, as it was said
        first = next((m.strip() for m in messages if m.strip()), "")
        candidates = [(0.0, 0, first[:EXTRACTIVE_CHARS])]
    kept = sorted(sorted(candidates, reverse=True)[:EXTRACTIVE_STATEMENTS], key=lambda c: c[1])
    quoted = " ".join(prompts.fragment("quote", text=t) for _, _, t in kept)
    return prompts.fragment(intro, statements=quoted, **values)


def statements(message: str) -> str:
    """``message`` without its questions."""
    return join_sentences([p for p in split_sentences(message) if not _QUESTION.search(p)])


_DAY_LINE_DATE = re.compile(r"^([^:：]{4,40})[:：]")


def _dates(lines: Sequence[str]) -> list[str]:
    """The dates the day lines of a fold start with (the prompt gives them: allowed names)."""
    return [m.group(1) for line in lines if (m := _DAY_LINE_DATE.match(line))]


def _recent_lines(lines: Sequence[str], chars: int) -> str:
    """The newest lines that fit in ``chars`` characters, in order (a global fallback)."""
    out: list[str] = []
    used = 0
    for line in reversed([ln for text in lines for ln in text.splitlines() if ln.strip()]):
        if out and used + len(line) > chars:
            break
        out.insert(0, line)
        used += len(line) + 1
    return "\n".join(out)
