"""A memory as a person sees it, for every front end (the web app's memory page, the API, the
CLI): ``shown`` is the one serializer (``ShownMemory``, with ``as_json`` for the API), ``status``
says its forgetting state in words, and ``memory_id`` is the one parser of an id a client sent.

(The "what I remembered" entries a reply keeps with its stored turn are ``companion.used_entry``:
a stored format of their own, cut to what a prompt held.)"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.bank import UnknownMemory
from memory.forgetting import ForgettingPolicy
from memory.records import Kind, MemoryRecord, State
from memory.retrieval import Hit

MAX_MEMORY_ID = 2**63 - 1  # ids are 64-bit signed integers in every store


def memory_id(value: Any) -> int:
    """A memory id from a client (a number, or its digits as text): a positive integer a store
    can hold, else UnknownMemory."""
    if isinstance(value, bool):
        raise UnknownMemory(f"no memory {str(value)[:40]}")
    if isinstance(value, str):
        text = value.strip()
        number = int(text) if text.isdigit() and len(text) <= 19 else 0
    elif isinstance(value, numbers.Integral):  # also numpy's, as a table's cell gives
        number = int(value)
    elif isinstance(value, numbers.Real):
        real = float(value)
        number = int(real) if math.isfinite(real) and real == int(real) and abs(real) < 2**64 else 0
    else:
        number = 0
    if not 1 <= number <= MAX_MEMORY_ID:
        raise UnknownMemory(f"no memory {str(value)[:40]}")
    return number


def status(rec: MemoryRecord, policy: ForgettingPolicy, now: datetime) -> str:
    """The memory's forgetting state, in words."""
    if rec.pinned:
        return "pinned: never fades"
    if rec.kind.is_global:
        return "global summary: never fades"
    if rec.state == State.ARCHIVED:
        since = f" since {rec.archived_at.date().isoformat()}" if rec.archived_at else ""
        return f"faded{since}: back only on a strong cue, or restore it"
    if rec.state == State.SUPERSEDED:
        why = rec.extra.get("superseded") or {}
        by = f" by #{why['by']}" if why.get("by") else ""
        return f"superseded ({why.get('reason') or 'replaced'}){by}: kept, never used again"
    fades = policy.fades_at(rec)
    if fades is None:
        return "active"
    days = (fades - now).total_seconds() / 86400
    return f"active: fades in {days:.0f} days unless recalled" if days > 0 else "active: fades at the next rollover"


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
    strength: float
    retention: float  # at the time it is shown
    recall_count: int
    importance: float  # 0 small talk .. 1 a personal fact, rated when written
    status: str  # the forgetting state in words (``status``)
    created_at: datetime
    last_recall: datetime | None
    stopped: bool | None = None  # a turn whose reply was stopped before its end (None: not a turn)
    superseded: dict | None = None  # an edited message's old turn: by what, and why
    why: str = ""  # why a search (or a reply) found it
    score: float | None = None  # the search's score

    def as_json(self) -> dict:
        """The API's ``memory`` object."""
        out: dict[str, Any] = {
            "id": self.id,
            "object": "memory",
            "kind": self.kind,
            "day": self.day,
            "text": self.text,
            "query": self.query,
            "response": self.response,
            "created_at": self.created_at.isoformat(),
            "state": self.state,
            "pinned": self.pinned,
            "strength": self.strength,
            "retention": self.retention,
            "recall_count": self.recall_count,
            "last_recall": self.last_recall.isoformat() if self.last_recall else None,
            "importance": self.importance,
            "status": self.status,
        }
        if self.kind == Kind.TURN.value:
            out["stopped"] = self.stopped
            out["superseded"] = self.superseded
        if self.score is not None:
            out["score"] = self.score
            out["why"] = self.why
        return out


def shown(
    rec: MemoryRecord, policy: ForgettingPolicy, now: datetime, *, hit: Hit | None = None, why: str | None = None
) -> ShownMemory:
    """``rec`` as a person sees it at ``now``; ``hit``: the search hit that found it (its score,
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
        strength=round(rec.strength, 3),
        retention=round(policy.retention(rec, now), 4),
        recall_count=rec.recall_count,
        importance=round(rec.importance, 2),
        status=status(rec, policy, now),
        created_at=rec.created_at,
        last_recall=rec.last_recall,
        stopped=bool(rec.extra.get("stopped")) if turn else None,
        superseded=rec.extra.get("superseded") if turn and rec.state == State.SUPERSEDED else None,
        why=why if why is not None else "; ".join(hit.reasons) if hit is not None else "",
        score=round(hit.score, 4) if hit is not None else None,
    )
