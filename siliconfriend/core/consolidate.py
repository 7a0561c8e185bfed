"""Day rollover: the daily summaries of each finished day, the global ones, then forgetting.

For each day that has turns and lacks a daily event summary or a daily personality (or whose
summary is older than its last turn), the LLM writes them from the day's dialogue; the new event
summary then reinforces the turns it draws on (consolidation as rehearsal, ``MemoryBank.rehearse``). New daily
summaries are then folded into the global event summary and the global personality (the previous
global text plus the new days, in chunks that fit the model). Every step is idempotent: a day is
done once both its summaries exist; a failed LLM call leaves that day (or the global fold) pending
and it is retried on the next run. A summary is a memory with its day, so it can be retrieved.
Finally the forgetting pass archives what has faded.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Callable, Sequence

from memory.bank import MemoryBank
from memory.records import Kind, MemoryRecord

from ..backends.base import BackendError, ChatBackend, Message
from .prompting import PromptSet, fit_block, load_prompts

log = logging.getLogger("siliconfriend.core.consolidate")

DAILY = {Kind.DAILY_EVENTS: "daily_events", Kind.DAILY_PERSONALITY: "daily_personality"}
GLOBAL = {
    Kind.GLOBAL_EVENTS: ("global_events", Kind.DAILY_EVENTS),
    Kind.GLOBAL_PERSONALITY: ("global_personality", Kind.DAILY_PERSONALITY),
}
_SENTENCE_END = re.compile(r"[.!?](?=[\s\"'”’)）]|$)|[。！？]")


@dataclass
class ConsolidationReport:
    user: str
    summarised: list[date] = field(default_factory=list)  # days whose summaries were (re)written
    failed: dict[date, str] = field(default_factory=dict)  # day -> why it is still pending
    global_updated: list[Kind] = field(default_factory=list)  # GLOBAL_EVENTS / GLOBAL_PERSONALITY
    global_failed: dict[Kind, str] = field(default_factory=dict)
    rehearsed: int = 0  # turns the new daily summaries reinforced
    archived: int = 0  # memories the forgetting pass archived
    forgot: bool = False  # whether the forgetting pass ran

    @property
    def ok(self) -> bool:
        return not self.failed and not self.global_failed


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
    summary; ``prompt_budget`` caps a summary prompt (default: what the model's context allows)."""

    def __init__(
        self,
        bank: MemoryBank,
        backend: ChatBackend,
        *,
        companion_name: str = "SiliconFriend",
        summary_tokens: int = 200,
        prompt_budget: int | None = None,
        prompts: Callable[[str], PromptSet] = load_prompts,
    ):
        self.bank = bank
        self.backend = backend
        self.companion_name = companion_name
        self.summary_tokens = summary_tokens
        self.prompt_budget = prompt_budget
        self.prompts = prompts

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
        if current is None:
            return dailies
        return [r for r in dailies if r.created_at > current.created_at]

    def invalidate_day(self, user: str, day: date) -> None:
        """Forget what was summarised of ``day`` and the global summaries (after one of its turns was
        deleted): the next run writes them again without it."""
        ids = [r.stored_id for kind in DAILY if (r := self.bank.get_summary(user, kind, day)) is not None]
        ids += [r.stored_id for kind in GLOBAL if (r := self.bank.get_summary(user, kind)) is not None]
        if ids:
            self.bank.delete(user, ids)

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
                self._summarise_day(user, day, now, prompts, backend)
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
                self._fold(user, kind, new, now, prompts, backend)
                report.global_updated.append(kind)
            except BackendError as exc:
                log.warning("%s of %s failed, left pending: %s", kind.value, user, exc)
                report.global_failed[kind] = str(exc)
        if forget or (forget is None and (report.summarised or report.global_updated)):
            rng = rng or random.Random(f"{user}|{now.isoformat()}")
            decisions = self.bank.forget_pass(user, now, rng=rng)
            report.archived = sum(d.archived for d in decisions)
            report.forgot = True
        return report

    def _budget(self, backend: ChatBackend) -> int:
        room = backend.context_tokens - self.summary_tokens - 64
        return min(room, self.prompt_budget) if self.prompt_budget else room

    def _summarise_day(self, user: str, day: date, now: datetime, prompts: PromptSet, backend: ChatBackend) -> None:
        turns = self.bank.turns_on(user, day)
        lines = []
        for t in turns:
            lines.append(prompts.fragment("dialogue_user", user_name=user, text=t.query.strip()))
            if t.response.strip():
                lines.append(
                    prompts.fragment("dialogue_companion", companion_name=self.companion_name, text=t.response.strip())
                )
        values = dict(user_name=user, companion_name=self.companion_name, date=prompts.format_date(day))
        for kind, name in DAILY.items():
            existing = self.bank.get_summary(user, kind, day)
            if existing is not None and existing.created_at >= max(t.created_at for t in turns):
                continue  # this half was done on an earlier run

            def render(block: str, name: str = name) -> str:
                return prompts.render(name, **values, dialogue=block)

            prompt = fit_block(
                render,
                lines,
                budget=self._budget(backend),
                count=backend.count_tokens,
                marker=prompts.fragment("cut"),
            )
            text = self._generate(prompts, prompt, backend)
            self.bank.set_summary(user, kind, text, now, day=day)

    def _fold(
        self,
        user: str,
        kind: Kind,
        new: Sequence[MemoryRecord],
        now: datetime,
        prompts: PromptSet,
        backend: ChatBackend,
    ) -> None:
        name, _ = GLOBAL[kind]
        current = self.bank.get_summary(user, kind)
        lines = [prompts.fragment("day_line", date=prompts.format_date(r.day), text=r.text.strip()) for r in new]
        if current is None and len(lines) == 1:  # one day: its summary is the whole story so far
            self.bank.set_summary(user, kind, lines[0], now)
            return
        previous = current.text if current is not None else prompts.fragment("nothing_yet")
        values = dict(user_name=user, companion_name=self.companion_name)
        budget = self._budget(backend)
        for chunk in self._chunks(lines, previous, prompts, name, values, budget, backend):

            def render(block: str, previous: str = previous) -> str:
                return prompts.render(name, **values, previous=previous, days=block)

            prompt = fit_block(
                render,
                chunk,
                budget=budget,
                count=backend.count_tokens,
                marker=prompts.fragment("cut"),
            )
            previous = self._generate(prompts, prompt, backend)
        self.bank.set_summary(user, kind, previous, now)

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

    def _generate(self, prompts: PromptSet, prompt: str, backend: ChatBackend) -> str:
        messages = [Message("system", prompts.fragment("summary_system")), Message("user", prompt)]
        text = tidy("".join(backend.stream(messages, max_tokens=self.summary_tokens)))
        if not text:
            raise BackendError("the model returned an empty summary")
        return text
