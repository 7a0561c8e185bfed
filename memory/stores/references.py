"""The memories a record names in its extra fields: what a deletion rewrites (every store keeps
which rows name which memories, and drops the entries of the deleted ones in the same
transaction)."""

from __future__ import annotations

import json
from typing import Any

# the lists in a memory's extra fields whose entries name other memories by id and copy their
# words: a turn's record of its prompt, the memories it used and today's lines in it. A store
# keeps which memories each row names there (``named_in``), so that a deletion reads and rewrites
# the rows that name the deleted memories, not every row
USED, TODAY = "used", "today"
REFERENCES = (USED, TODAY)


def named_in(extra: Any) -> list[int]:
    """The ids of the memories that ``extra``'s lists at ``REFERENCES`` name, each once."""
    if not isinstance(extra, dict):
        return []
    found = {
        i
        for key in REFERENCES
        if isinstance(entries := extra.get(key), list)
        for e in entries
        if isinstance(e, dict) and (i := _entry_id(e)) is not None and 0 <= i < 1 << 62  # a memory's id
    }
    return sorted(found)


def without_references(text: str, gone: set[int]) -> str | None:
    """The JSON text of extra fields without the entries naming a memory of ``gone``
    (``{"id": n, ...}``) in their lists at ``REFERENCES``: what a record copied of memories that
    were deleted. None where it named none of them (nothing to rewrite)."""
    extra = json.loads(text)
    if not isinstance(extra, dict):
        return None
    out = dict(extra)
    for key in REFERENCES:
        entries = out.get(key)
        if isinstance(entries, list):
            out[key] = [e for e in entries if not (isinstance(e, dict) and _entry_id(e) in gone)]
    return None if out == extra else json.dumps(out, ensure_ascii=False)


def _entry_id(entry: dict) -> int | None:
    try:
        return int(entry.get("id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
