"""The reads of records that both SQL engines share (``get``, ``get_many``, ``records``, ``count``,
``days``), written once: which rows a read asks for and in what order are the same in SQLite and
PostgreSQL. What differs is left to each engine: how a value and a list of values are matched (``?`` lists
against ``= ANY(%s)``), the order's collation, and how a statement reaches its database (``_select``,
``_column``; PostgreSQL's also name the user).

Also here, written once over the port for every engine: every memory with its vectors
(``with_vectors``), which a copy of a store and a re-embedding read."""

from __future__ import annotations

from datetime import date
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..records import Kind, MemoryRecord, State
from .base import UserStore


class RecordReads:
    """A mixin: the record reads of a store that defines ``_select``, ``_column``, ``_is`` and
    ``_one_of`` (and, where its database takes only so many parameters, ``IN_PART``)."""

    ORDER = "day, kind, position, id"
    ORDER_NEWEST = "day DESC, kind, position DESC, id DESC"
    IN_PART: int | None = None  # at most this many values in one ``_one_of`` (None: any number)

    # -- the engine's
    def _select(
        self, where: str, params: Sequence, order: str = "", limit: int | None = None, offset: int = 0, *, extra=True
    ) -> list[MemoryRecord]:
        """The user's records whose row meets ``where`` in ``order`` (ORDER when empty); ``extra``
        False: each record's extra fields left empty."""
        raise NotImplementedError

    def _column(self, select: str, where: str, params: Sequence, order: str = "") -> list:
        """The first column of ``SELECT select`` over the user's rows that meet ``where``, in ``order``."""
        raise NotImplementedError

    def _is(self, column: str, value: object) -> tuple[str, list]:
        """(condition, parameters): ``column`` equals ``value``."""
        raise NotImplementedError

    def _one_of(self, column: str, values: Sequence) -> tuple[str, list]:
        """(condition, parameters): ``column`` is one of ``values`` (not empty)."""
        raise NotImplementedError

    def _at_least(self, column: str, value: float) -> tuple[str, list]:
        """(condition, parameters): ``column`` is ``value`` or more."""
        raise NotImplementedError

    # -- shared
    def _where(
        self,
        kind: Kind | None = None,
        state: State | None = None,
        days: Sequence[date] | None = None,
        importance_at_least: float | None = None,
    ) -> tuple[str, list]:
        """(condition, parameters) of the records of ``kind``, ``state``, ``days`` and importance
        (each: any when None); "1 = 1" where there is no condition."""
        parts = []
        if importance_at_least is not None:
            parts.append(self._at_least("importance", float(importance_at_least)))
        if kind is not None:
            parts.append(self._is("kind", Kind(kind).value))
        if state is not None:
            parts.append(self._is("state", State(state).value))
        if days is not None:
            parts.append(self._one_of("day", list(days)) if days else ("1 = 0", []))
        return " AND ".join(c for c, _ in parts) or "1 = 1", [p for _, ps in parts for p in ps]

    def get(self, rid: int) -> MemoryRecord | None:
        found = self._select(*self._is("id", int(rid)))
        return found[0] if found else None

    def get_many(self, ids: Iterable[int]) -> dict[int, MemoryRecord]:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        step = self.IN_PART or len(wanted) or 1
        out: dict[int, MemoryRecord] = {}
        for start in range(0, len(wanted), step):
            out.update((r.stored_id, r) for r in self._select(*self._one_of("id", wanted[start : start + step])))
        return out

    def records(
        self,
        *,
        kind: Kind | None = None,
        state: State | None = None,
        day: date | None = None,
        days: Sequence[date] | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
        extra: bool = True,
        importance_at_least: float | None = None,
    ) -> list[MemoryRecord]:
        if day is not None:
            days = [day]
        where, params = self._where(kind, state, days, importance_at_least)
        order = self.ORDER_NEWEST if newest_first else self.ORDER
        if kind == Kind.TURN and days is not None and len(days) == 1 and limit is None:
            return self._days_turns(where, params, order, extra=extra)
        return self._select(where, params, order, limit, offset, extra=extra)

    def _days_turns(self, where: str, params: Sequence, order: str, *, extra: bool) -> list[MemoryRecord]:
        """One day's turns (a chat turn reads today's): an engine may read what follows with them."""
        return self._select(where, params, order, extra=extra)

    def count(self, *, kind: Kind | None = None, state: State | None = None) -> int:
        return int(self._column("COUNT(*)", *self._where(kind, state))[0])

    def days(self) -> list[date]:
        return [as_date(d) for d in self._column("DISTINCT day", *self._where(Kind.TURN), order="day")]


def as_date(value: date | str) -> date:
    """A day as a database gives it (a date, or SQLite's ISO text)."""
    return value if isinstance(value, date) else date.fromisoformat(value)


def with_vectors(
    store: UserStore, batch: int = 1000
) -> Iterator[list[tuple[MemoryRecord, np.ndarray | None, np.ndarray | None]]]:
    """Every memory of ``store`` with its (own, reply) vectors (None where it has none), in id
    order, ``batch`` at a time: what a copy or a re-embedding reads, through the port."""
    ids = sorted(r.stored_id for r in store.records(extra=False))
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        found = store.get_many(part)
        own, reply = store.vectors(part)
        yield [
            (found[i], o if o.any() else None, r if r.any() else None)
            for i, o, r in zip(part, own, reply)
            if i in found  # deleted meanwhile
        ]
