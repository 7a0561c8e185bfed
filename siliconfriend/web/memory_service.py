"""The memory page: a user's memories (filtered, or searched with only the real matches kept),
their summaries, the retention curves, and pin / restore / delete."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Callable

from memory.bank import MemoryBank
from memory.message import Message as Text
from memory.records import Kind, MemoryRecord, State
from memory.shown import ShownMemory, shown

from ..config import Settings
from ..core import memory_view
from ..core.known import known
from ..core.memory_view import memory_id
from .account_service import AccountService
from .chat_sessions import ChatSessions

NOT_ARCHIVED = Text(
    "memory.not_archived",
    en="memory #{id} is not archived: only archived memories can be restored",
    zh="记忆 #{id} 没有归档：只有已归档的记忆才能恢复。",
)
PICK_DAY = Text("summary.pick_day", en="pick the day whose summary you are editing", zh="请先选择要编辑的摘要日期。")


class MemoryPageService:
    def __init__(
        self,
        settings: Settings,
        account: AccountService,
        bank: MemoryBank,
        chat: ChatSessions,
        clock: Callable[[], datetime],
    ):
        self.settings = settings
        self.account = account
        self.bank = bank
        self.chat = chat  # deleting a turn goes through the companion
        self.clock = clock

    def user(self, token: str | None) -> str:
        return self.account.user(token)

    def now(self) -> datetime:
        return self.clock()

    def _shown(self, rec: MemoryRecord, now: datetime, why: str = "") -> ShownMemory:
        return shown(rec, self.bank.policy_for(rec.user), now, why=why)

    def known(self, token: str, lang: str = "en") -> str:
        """What I know about you, as the page shows it (``core/known.py``)."""
        return known(self.bank, self.user(token)).markdown(lang)

    def memories(
        self,
        token: str,
        *,
        day: str | date | None = None,
        kind: str | None = None,
        state: str | None = None,
        query: str = "",
        include_archived: bool = True,
    ) -> list[ShownMemory]:
        user = self.user(token)
        if not self.bank.has_user(user):
            return []
        now = self.now()
        day = date.fromisoformat(day) if isinstance(day, str) and day else (day or None)
        kind_v = Kind(kind) if kind else None
        state_v = State(state) if state else None
        if query and query.strip():
            hits = memory_view.search(self.bank, user, query, now, include_archived=include_archived)
            rows = [
                self._shown(h.record, now, "; ".join(r for r in h.reasons if r != "closest of what is remembered"))
                for h in hits
            ]
            return [
                r
                for r in rows
                if (not day or r.day == day.isoformat())
                and (not kind_v or r.kind == kind_v.value)
                and (not state_v or r.state == state_v.value)
            ]
        recs = self.bank.records(user, kind=kind_v, state=state_v, day=day)
        if not include_archived:
            recs = [r for r in recs if r.state == State.ACTIVE]
        recs.sort(key=lambda r: (r.day, r.kind.value != "turn", r.position, r.id or 0), reverse=True)
        return [self._shown(r, now) for r in recs]

    def days(self, token: str) -> list[str]:
        user = self.user(token)
        if not self.bank.has_user(user):
            return []
        return [d.isoformat() for d in sorted(self.bank.days(user), reverse=True) if d.year > 1970]

    def pin(self, token: str, memory: int, pinned: bool = True) -> MemoryRecord:
        user = self.user(token)
        return self.bank.pin(user, self.bank.get(user, memory_id(memory)).stored_id, pinned)

    def restore(self, token: str, memory: int) -> MemoryRecord:
        """Bring back an archived memory (as if just recalled). An active one is refused: restoring
        it again and again would raise its strength each time."""
        user = self.user(token)
        rec = self.bank.get(user, memory_id(memory))
        if rec.state != State.ARCHIVED:
            raise ValueError(NOT_ARCHIVED(id=str(rec.id)))
        return self.bank.restore(user, rec.stored_id, self.now())

    def delete_memories(self, token: str, memory_ids: list[int]) -> int:
        """Delete for good. A dialogue turn goes through the companion, so that the summaries of
        its day are written again without it."""
        user = self.user(token)
        # UnknownMemory unless all are hers; gone with every copy of their words (Companion.forget)
        return self.chat.companion.forget(user, [memory_id(i) for i in memory_ids])

    def summaries(self, token: str, day: str | None = None) -> dict:
        """Daily events and personality of ``day`` (or the latest day), and the global ones."""
        user = self.user(token)
        grounding: dict[str, dict] = {}
        out: dict[str, Any] = {
            "day": day or "",
            "daily_events": "",
            "daily_personality": "",
            "global_events": "",
            "global_personality": "",
            "summary_days": [],
            "grounding": grounding,  # key -> {"path", "dropped"}: what the day rollover's check did
        }
        if not self.bank.has_user(user):
            return out
        summary_days = sorted(
            {r.day for k in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY) for r in self.bank.summaries(user, k)},
            reverse=True,
        )
        out["summary_days"] = [d.isoformat() for d in summary_days]
        if not day and summary_days:
            day = summary_days[0].isoformat()
        out["day"] = day or ""
        if day:
            d = date.fromisoformat(day)
            for key, kind in (("daily_events", Kind.DAILY_EVENTS), ("daily_personality", Kind.DAILY_PERSONALITY)):
                rec = self.bank.get_summary(user, kind, d)
                out[key] = rec.text if rec else ""
                grounding[key] = _grounding(rec)
        for key, kind in (("global_events", Kind.GLOBAL_EVENTS), ("global_personality", Kind.GLOBAL_PERSONALITY)):
            rec = self.bank.get_summary(user, kind)
            out[key] = rec.text if rec else ""
            grounding[key] = _grounding(rec)
        return out

    def save_summaries(self, token: str, *, day: str | None = None, **texts: str) -> list[str]:
        """Replace the given summaries (``daily_events``, ``daily_personality`` for ``day``;
        ``global_events``, ``global_personality``); blank or unchanged ones are left alone."""
        user = self.user(token)
        current = self.summaries(token, day)
        saved = []
        for key, text in texts.items():
            kind = Kind(key)
            if text is None or not text.strip() or text == current.get(key):
                continue
            if kind.is_daily and not day:
                raise ValueError(PICK_DAY())
            self.bank.set_summary(
                user, kind, text.strip(), self.now(), day=date.fromisoformat(day) if kind.is_daily and day else None
            )
            saved.append(key)
        return saved

    def summarise_now(
        self,
        token: str,
        *,
        include_today: bool = False,
        progress: Callable[[int, int, date], None] | None = None,
    ) -> list[date]:
        """Summarise every finished day not summarised yet (today too, and again, only when
        ``include_today``: it is not over), one day at a time (``progress(done, total, day)``
        before each), then the global summaries."""
        user = self.user(token)
        today = self.now().date()
        if not self.bank.has_user(user):
            return []
        summarised = {r.day for r in self.bank.summaries(user, Kind.DAILY_EVENTS)}
        pending = sorted(d for d in self.bank.days(user) if d.year > 1970 and d < today and d not in summarised)
        if include_today:
            pending.append(today)
        # written in the person's language, as the day rollover of their chat writes them
        lang = self.account.prefs(token)["lang"]
        done: list[date] = []
        for i, day in enumerate(pending):
            if progress is not None:
                progress(i, len(pending), day)
            done += [d for d in self.chat.companion.consolidate(user, until=day, lang=lang) if d not in done]
        return done

    def memory(self, token: str, memory: Any) -> MemoryRecord:
        """One of this user's memories (UnknownMemory for anyone else's, or a bad id)."""
        return self.bank.get(self.user(token), memory_id(memory))

    def retention_curves(self, token: str, *, limit: int = 12, horizon_days: int = 14) -> dict:
        """R over time for the user's most recent memories: from each one's last recall to
        ``horizon_days`` ahead (points for a plot), with the forgetting threshold."""
        user = self.user(token)
        now = self.now()
        curves = []
        if self.bank.has_user(user):
            recs = [r for r in self.bank.records(user, state=State.ACTIVE) if not r.kind.is_global]
            recs.sort(key=lambda r: r.anchor, reverse=True)
            for rec in recs[:limit]:
                start, end = rec.anchor, now + timedelta(days=horizon_days)
                steps = 40
                times = [start + (end - start) * i / steps for i in range(steps + 1)]
                curves.append(
                    {
                        "id": rec.id,
                        "label": f"#{rec.id} {rec.kind.value} {rec.day.isoformat()}",
                        "kind": rec.kind.value,
                        "day": rec.day.isoformat(),
                        "times": times,
                        "values": [self.bank.retention(rec, t) for t in times],
                        "now": self.bank.retention(rec, now),
                    }
                )
        return {
            "now": now,
            "threshold": self.settings.forgetting_threshold,
            "curves": curves,
            "active": self.bank.count(user, state=State.ACTIVE) if self.bank.has_user(user) else 0,
            "archived": self.bank.count(user, state=State.ARCHIVED) if self.bank.has_user(user) else 0,
        }


def _grounding(rec: MemoryRecord | None) -> dict:
    """What the day rollover's grounding check did to a summary: how it was written (``path``,
    None when written by hand or before the check) and how many sentences it left out."""
    info = rec.extra.get("grounding") if rec is not None and isinstance(rec.extra, dict) else None
    if not isinstance(info, dict):
        return {"path": None, "dropped": 0}
    return {"path": info.get("path"), "dropped": int(info.get("dropped") or 0)}
