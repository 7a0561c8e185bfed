"""A memory as a row: the columns every store reads, in their order, and the one mapping from
such a row to a ``MemoryRecord`` (dates and the extra fields as either engine gives them)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Iterable, Sequence

import numpy as np

from ..records import Kind, MemoryRecord, State

# the columns of a memory, in the order ``record_from_row`` reads them
MEMORY_COLUMNS = (
    "id",
    "kind",
    "text",
    "query",
    "response",
    "day",
    "position",
    "created_at",
    "strength",
    "last_recall",
    "recall_count",
    "importance",
    "pinned",
    "state",
    "extra",
    "archived_at",
)


def _when(value: str | datetime | None) -> datetime | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


# a row's kind and state by their stored text (a dict look-up: an enum call costs as much as the
# rest of a row's fields, and a turn makes a few hundred records)
_KINDS = {k.value: k for k in Kind}
_STATES = {s.value: s for s in State}


def record_from_row(user: str, row: Sequence[Any]) -> MemoryRecord:
    """A memory from a row of ``MEMORY_COLUMNS`` (dates as ISO text or as dates, ``extra`` as
    JSON text or as a dict: whichever the database gives; the text is parsed when first used)."""
    (rid, kind, text, query, response, day, position, created_at) = row[:8]
    (strength, last_recall, recall_count, importance, pinned, state, extra, archived_at) = row[8:16]
    created = _when(created_at)
    assert created is not None  # a NOT NULL column
    # JSON text is parsed when the record's ``extra`` is first used (``records.ExtraFields``)
    extras = extra if isinstance(extra, dict) else (extra or {})
    return MemoryRecord(
        id=int(rid),
        user=user,
        kind=_KINDS.get(kind) or Kind(kind),
        text=text,
        query=query,
        response=response,
        day=day if isinstance(day, date) else date.fromisoformat(day),
        position=position,
        created_at=created,
        strength=strength,
        last_recall=_when(last_recall),
        recall_count=recall_count,
        importance=importance,
        pinned=bool(pinned),
        state=_STATES.get(state) or State(state),
        extra=extras,
        archived_at=_when(archived_at),
    )


def blob_vectors(ids: Sequence[int], rows: Iterable[Sequence[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Two vectors a row of ``rows`` (id, blob, blob) holds as float32 bytes, as matrices in the
    order of ``ids``: rows of NaN where a memory has none (or is not among ``rows``)."""
    read = {int(r[0]): (r[1], r[2]) for r in rows}
    dim = next((len(b) // 4 for pair in read.values() for b in pair if b is not None), 1)
    out = []
    for side in (0, 1):
        matrix: np.ndarray = np.full((len(ids), dim), np.nan, dtype=np.float32)
        blobs = [(i, read[rid][side]) for i, rid in enumerate(ids) if rid in read]
        held = [(i, b) for i, b in blobs if b is not None and len(b) == dim * 4]
        if held:  # one buffer for all: a few hundred rows parse in a fraction of a millisecond
            matrix[[i for i, _ in held]] = np.frombuffer(b"".join(bytes(b) for _, b in held), np.float32).reshape(
                -1, dim
            )
        out.append(matrix)
    return out[0], out[1]
