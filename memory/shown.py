"""A memory as a person is shown it, and a memory as a reply used it: the two records every front
end reads, each made here once.

``ShownMemory`` (``shown``): a memory with its forgetting state, for the web app's memory page,
the API's ``/v1/memories``, the CLI and the export (``memorybank_format.export_person``); each
takes from it what it shows (``as_json``: the API's object, ``as_export``: the export's entry).
``UsedMemory``: one entry of "what I remembered" for a reply: a memory it used, a line of today's
conversation that was in its prompt, or the names it used that came from neither; kept with the
stored turn (``as_json``, read back by ``from_json``, which also reads what older versions kept),
shown in the web app's panel, the API's ``memories`` and ``remembered``, and its footnote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from .bank import TODAY, USED
from .forgetting import ForgettingPolicy
from .message import Message, Said
from .records import Kind, MemoryRecord, State
from .retrieval import Hit

# a memory's forgetting state in words (the page, the API, the CLI)
PINNED = Message("status.pinned", en="pinned: never fades", zh="已钉住：永不淡忘")
GLOBAL = Message("status.global", en="global summary: never fades", zh="总体摘要：永不淡忘")
FADED_SINCE = Message(
    "status.faded_since",
    en="faded since {day}: back only on a strong cue, or restore it",
    zh="自 {day} 起已淡忘：只有强烈的提示才会想起，也可以恢复它",
)
FADED = Message(
    "status.faded",
    en="faded: back only on a strong cue, or restore it",
    zh="已淡忘：只有强烈的提示才会想起，也可以恢复它",
)
SUPERSEDED_BY = Message(
    "status.superseded_by",
    en="superseded ({why}) by #{by}: kept, never used again",
    zh="已被取代（{why}），取代它的是 #{by}：保留，但不再使用",
)
SUPERSEDED = Message(
    "status.superseded", en="superseded ({why}): kept, never used again", zh="已被取代（{why}）：保留，但不再使用"
)
SUPERSEDED_WHY = {
    "edited": Message("superseded.edited", en="edited", zh="已编辑"),
    "deleted": Message("superseded.deleted", en="deleted", zh="已删除"),
    "regenerated": Message("superseded.regenerated", en="regenerated", zh="已重新生成"),
    "replaced": Message("superseded.replaced", en="replaced", zh="已替换"),
}
ACTIVE = Message("status.active", en="active", zh="活跃")
FADES_IN_1 = Message(
    "status.fades_in_1", en="active: fades in 1 day unless recalled", zh="活跃：如果不被想起，1 天后淡忘"
)
FADES_IN = Message(
    "status.fades_in", en="active: fades in {n} days unless recalled", zh="活跃：如果不被想起，{n} 天后淡忘"
)
FADES_NEXT = Message("status.fades_next", en="active: fades at the next rollover", zh="活跃：下一次日终整理时淡忘")


def status(rec: MemoryRecord, policy: ForgettingPolicy, now: datetime) -> Said:
    """The memory's forgetting state, in words."""
    if rec.pinned:
        return PINNED()
    if rec.kind.is_global:
        return GLOBAL()
    if rec.state == State.ARCHIVED:
        return FADED_SINCE(day=rec.archived_at.date().isoformat()) if rec.archived_at else FADED()
    if rec.state == State.SUPERSEDED:
        info = rec.extra.get("superseded") or {}
        reason = info.get("reason") or "replaced"
        why = SUPERSEDED_WHY[reason]() if reason in SUPERSEDED_WHY else str(reason)
        return SUPERSEDED_BY(why=why, by=str(info["by"])) if info.get("by") else SUPERSEDED(why=why)
    fades = policy.fades_at(rec)
    if fades is None:
        return ACTIVE()
    days = (fades - now).total_seconds() / 86400
    if days <= 0:
        return FADES_NEXT()
    n = f"{days:.0f}"
    return FADES_IN_1() if n == "1" else FADES_IN(n=n)


@dataclass(frozen=True)
class ShownMemory:
    id: int
    kind: str
    day: str | None  # None: a global summary, which has no day
    text: str
    query: str  # a turn's message (empty for a summary)
    response: str  # a turn's reply
    state: str
    pinned: bool
    strength: float  # as stored (the API rounds it; the export keeps it whole)
    retention: float  # at the time it is shown, to 4 places
    recall_count: int
    importance: float  # 0 small talk .. 1 a personal fact, rated when written (as stored)
    status: str  # the forgetting state in words (``status``: a Said, its English as a str)
    created_at: datetime
    last_recall: datetime | None
    stopped: bool | None = None  # a turn whose reply was stopped before its end (None: not a turn)
    superseded: dict | None = None  # an edited message's old turn: by what, and why
    why: str = ""  # why a search (or a reply) found it
    score: float | None = None  # the search's score
    position: int = 0  # a turn's place in its day
    extra: dict = field(default_factory=dict)  # what else the record keeps (the export has it all)

    def _words(self) -> dict[str, Any]:
        """What was said or written, and when: the API's object and the export's entry alike."""
        return {
            "kind": self.kind,
            "day": self.day,
            "text": self.text,
            "query": self.query,
            "response": self.response,
            "created_at": self.created_at.isoformat(),
        }

    def as_json(self) -> dict:
        """The API's ``memory`` object."""
        out: dict[str, Any] = {
            "id": self.id,
            "object": "memory",
            **self._words(),
            "state": self.state,
            "pinned": self.pinned,
            "strength": round(self.strength, 3),
            "retention": self.retention,
            "recall_count": self.recall_count,
            "last_recall": self.last_recall.isoformat() if self.last_recall else None,
            "importance": round(self.importance, 2),
            "status": self.status,
        }
        if self.kind == Kind.TURN.value:
            out["stopped"] = self.stopped
            out["superseded"] = self.superseded
        if self.score is not None:
            out["score"] = self.score
            out["why"] = self.why
        return out

    def as_export(self) -> dict:
        """The export's entry: every field the memory keeps, as stored."""
        return {
            "id": self.id,
            **self._words(),
            "strength": self.strength,
            "retention": self.retention,
            "last_recall": self.last_recall.isoformat() if self.last_recall else None,
            "recall_count": self.recall_count,
            "importance": self.importance,
            "pinned": self.pinned,
            "state": self.state,
            "position": self.position,
            "extra": self.extra,
        }


def shown(
    rec: MemoryRecord, policy: ForgettingPolicy, now: datetime, *, hit: Hit | None = None, why: str | None = None
) -> ShownMemory:
    """``rec`` as a person sees it at ``now`` under ``policy`` (its user's: ``bank.policy_for``,
    the paces it learned included); ``hit``: the search hit that found it (its score,
    and its reasons as ``why`` unless ``why`` is given)."""
    turn = rec.kind == Kind.TURN
    return ShownMemory(
        id=rec.stored_id,
        kind=rec.kind.value,
        day=None if rec.kind.is_global else rec.day.isoformat(),
        text=rec.text,
        query=rec.query,
        response=rec.response,
        state=rec.state.value,
        pinned=rec.pinned,
        strength=rec.strength,
        retention=round(policy.retention(rec, now), 4),
        recall_count=rec.recall_count,
        importance=rec.importance,
        status=status(rec, policy, now),
        created_at=rec.created_at,
        last_recall=rec.last_recall,
        stopped=bool(rec.extra.get("stopped")) if turn else None,
        superseded=rec.extra.get("superseded") if turn and rec.state == State.SUPERSEDED else None,
        why=why if why is not None else "; ".join(hit.reasons) if hit is not None else "",
        score=round(hit.score, 4) if hit is not None else None,
        position=rec.position,
        extra=rec.extra,
    )


WHY_TODAY = Message("why.today", en="today's conversation, in the prompt", zh="今天的对话，原样放在提示里")
WHY_NOT_FROM_MEMORY = Message(
    "why.not_from_memory",
    en="named in the reply, but in neither the memories, the prompt nor today's talk",
    zh="回复里提到了，但记忆、提示和今天的对话里都没有",
)
# the kind of the entry that lists the names a reply used that came from neither the memories,
# the prompt nor today's talk (the model made them up); a line of today's talk is of kind TODAY
NOT_FROM_MEMORY = "not_from_memory"


def _number(value: Any) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "…"


@dataclass(frozen=True)
class UsedMemory:
    """One entry of "what I remembered" for a reply (see the module's docstring)."""

    id: int | None  # None: the names not from memory
    kind: str  # a memory's kind, TODAY or NOT_FROM_MEMORY
    day: str  # ISO; "" for the names not from memory
    strength: float
    retention: float
    why: str  # a Said, or its English as stored
    text: str  # what the prompt held of it (cut)
    tier: str | None = None  # a retrieved memory's (``ForgettingPolicy.tier``: "core", "active", ...)
    cue: str | None = None  # a retrieved memory's: the cue that found it (``Hit.cue``)

    @property
    def retrieved(self) -> bool:
        """A memory retrieval found (not a line of today's talk, not the names)."""
        return self.kind not in (TODAY, NOT_FROM_MEMORY)

    @classmethod
    def of_hit(cls, hit: Hit, chars: int) -> "UsedMemory":
        """A memory the reply's prompt held, cut to ``chars`` as the prompt held it."""
        rec = hit.record
        return cls(
            id=rec.id,
            kind=rec.kind.value,
            day=rec.day.isoformat(),
            strength=round(rec.strength, 2),
            retention=round(hit.retention, 3),
            why="; ".join(hit.reasons),
            text=_cut(rec.text, chars),
            cue=hit.cue,
            tier=hit.tier,
        )

    @classmethod
    def of_today(cls, turn: MemoryRecord, chars: int) -> "UsedMemory":
        """One of today's turns, in the prompt as it is (not retrieved)."""
        return cls(
            turn.id, TODAY, turn.day.isoformat(), round(turn.strength, 2), 1.0, WHY_TODAY(), _cut(turn.query, chars)
        )

    @classmethod
    def not_from_memory(cls, names: Sequence[str]) -> "UsedMemory":
        """The names of the reply that were not from memory."""
        return cls(None, NOT_FROM_MEMORY, "", 0.0, 0.0, WHY_NOT_FROM_MEMORY(), ", ".join(names))

    def as_json(self) -> dict:
        """As a turn keeps it and the API gives it (``tier`` only where there is one)."""
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "day": self.day,
            "strength": self.strength,
            "retention": self.retention,
            "why": self.why,
            "text": self.text,
        }
        if self.tier is not None:
            out["tier"] = self.tier
        if self.cue is not None:
            out["cue"] = self.cue
        return out

    @classmethod
    def all_of(cls, entries: Any) -> list["UsedMemory"]:
        """The entries of a stored list (``from_json``); nothing of what is not one."""
        return [cls.from_json(e) for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []

    @classmethod
    def from_json(cls, entry: Mapping) -> "UsedMemory":
        """An entry as a stored turn keeps it, from this version or an older one (a field an
        older one did not keep takes its neutral value)."""
        rid = entry.get("id")
        return cls(
            id=int(rid) if isinstance(rid, (int, str)) and str(rid).isdigit() else None,
            kind=str(entry.get("kind") or Kind.TURN.value),
            day=str(entry.get("day") or ""),
            strength=_number(entry.get("strength")),
            retention=_number(entry.get("retention")),
            why=str(entry.get("why") or ""),
            text=str(entry.get("text") or ""),
            cue=entry.get("cue") if isinstance(entry.get("cue"), str) else None,
            tier=entry.get("tier") if isinstance(entry.get("tier"), str) else None,
        )


def stored_used(extra: Mapping) -> list[UsedMemory] | None:
    """A stored turn's "what I remembered" (from its extra fields): the names not from memory, the
    memories used, today's lines; None for a turn stored before they were kept."""
    if USED not in extra:
        return None
    names = extra.get(NOT_FROM_MEMORY)
    made_up = [UsedMemory.not_from_memory(names)] if names else []
    return [*made_up, *UsedMemory.all_of(extra.get(USED)), *UsedMemory.all_of(extra.get(TODAY))]
