"""A memory as a person sees it, for every front end (the web app, the API, the CLI): the one
parser of a memory id a client sent, and the one description of a memory's state in words."""

from __future__ import annotations

import math
import numbers
from datetime import datetime
from typing import Any

from memory.bank import UnknownMemory
from memory.forgetting import ForgettingPolicy
from memory.records import MemoryRecord, State

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
