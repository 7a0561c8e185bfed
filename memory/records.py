"""What a memory is: dialogue turns and summaries, with their forgetting state."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, cast


class Kind(str, enum.Enum):
    TURN = "turn"  # one exchange: the user's words and the companion's reply
    DAILY_EVENTS = "daily_events"  # what happened on one day
    GLOBAL_EVENTS = "global_events"  # the roll-up of all days
    DAILY_PERSONALITY = "daily_personality"  # traits / mood / reply strategy seen on one day
    GLOBAL_PERSONALITY = "global_personality"  # the user's overall profile and reply strategy

    @property
    def is_daily(self) -> bool:
        return self in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY)

    @property
    def is_global(self) -> bool:
        return self in (Kind.GLOBAL_EVENTS, Kind.GLOBAL_PERSONALITY)


# the day a global summary is stored under (it has none of its own)
GLOBAL_DAY = date(1970, 1, 1)


class State(str, enum.Enum):
    ACTIVE = "active"
    ARCHIVED = "archived"  # forgotten: the second tier, back only on a strong cue; visible, restorable
    # replaced (an edited message: extra["superseded"] says why, by what and when): kept and
    # visible, never retrieved, summarised or in today's conversation
    SUPERSEDED = "superseded"


class ExtraFields:
    """``MemoryRecord.extra``: a dict, which a store may give as the JSON text it read; the text is
    parsed when the field is first used. A chat turn reads all of today's turns, and a turn's
    extra fields (the memories and today's lines its prompt held) are kilobytes of JSON: parsed at
    every read, they made the turns of a long day slower and slower (docs/benchmarks-journal.md,
    "A long day's turns")."""

    def __init__(self, slot: str):
        self.slot = slot  # where a record keeps the dict or the text

    def __get__(self, record: Any, owner: type | None = None) -> Any:
        if record is None:
            return self  # the dataclass's default: each record then gets its own empty dict
        value = record.__dict__[self.slot]
        if not isinstance(value, dict):
            value = json.loads(value) if value and value != "{}" else {}
            record.__dict__[self.slot] = value
        return value

    def __set__(self, record: Any, value: Any) -> None:
        record.__dict__[self.slot] = {} if value is self else value


@dataclass(frozen=True)
class MemoryRecord:
    """One memory of one user. ``text`` is what is embedded and searched."""

    user: str
    kind: Kind
    text: str
    created_at: datetime  # when it was said / summarised
    day: date  # the day it belongs to (a turn's date, a summary's day)
    query: str = ""  # turns: the user's words
    response: str = ""  # turns: the companion's reply
    strength: float = 1.0  # S in R = exp(-t / S)
    last_recall: datetime | None = None  # t is measured from here (created_at if never recalled)
    recall_count: int = 0
    importance: float = 0.0  # 0 small talk .. 1 a personal fact: raises the initial strength
    pinned: bool = False  # never fades
    state: State = State.ACTIVE
    id: int | None = None
    position: int = 0  # a turn's order within its day (0-based)
    # a dict (a store may give the JSON text it read instead: parsed when first used)
    extra: dict = field(default=cast(dict, ExtraFields("_extra")), compare=False)
    archived_at: datetime | None = None  # when the forgetting pass archived it

    @property
    def stored_id(self) -> int:
        """``id`` of a stored record (every record a store or a bank returns has one); a record
        not stored yet has none, and asking for it is a bug."""
        if self.id is None:
            raise ValueError(f"this {self.kind.value} memory is not stored yet: it has no id")
        return self.id

    @property
    def anchor(self) -> datetime:
        """Where forgetting time is counted from."""
        return self.last_recall or self.created_at

    def with_(self, **changes) -> "MemoryRecord":
        return replace(self, **changes)


def turn_text(query: str, response: str) -> str:
    """The searchable text of a dialogue turn."""
    query, response = query.strip(), response.strip()
    if not response or not query:
        return query or response
    return f"{query}\n{response}"
