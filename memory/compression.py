"""Compression before archiving: a long turn about to be archived leaves a short copy behind.

When the forgetting pass archives a turn longer than ``COMPRESS_CHARS`` (its message and reply),
a compressed copy of it is stored first: the person's message and the reply shortened, by a model
where the caller has one that is good enough (``MemoryBank.forget_pass(compressor=...)``; the
companion's day rollover passes its model, checked for names that were never said), else
extractively (``extractive``: each side's first whole sentences within ``KEEP_CHARS``). The copy
carries the original's activation on (its strength, recall count and importance; t starts again
from the pass) and stays active; the original is archived as any other and stays searchable there.
The copy keeps the original's day and time (its day's summaries stay as they are) and says what it
is a copy of (``extra["compressed_of"]``); the bank keeps the pairs in the user's meta, so that
deleting the original deletes its copy too.
"""

from __future__ import annotations

from typing import Callable

from .records import Kind, MemoryRecord
from .tiers import whole_sentences

COMPRESS_CHARS = 600  # a turn longer than this (message and reply) is compressed before archiving
KEEP_CHARS = (200, 100)  # what a compressed turn keeps of its message and of its reply
COMPRESSED_OF = "compressed_of"  # the copy's extra field: the id of the turn it was made from

# a model's compressor: the turn -> its message and reply shortened, or None (not good enough)
Compressor = Callable[[MemoryRecord], "tuple[str, str] | None"]


def long_enough(rec: MemoryRecord, *, extra: bool = True) -> bool:
    """Whether ``rec`` is a turn worth compressing before it is archived (and not a copy already).
    ``extra`` False: by its length alone (a record read without its extra fields)."""
    return (
        rec.kind == Kind.TURN
        and len(rec.query.strip()) + len(rec.response.strip()) > COMPRESS_CHARS
        and (not extra or COMPRESSED_OF not in rec.extra)
    )


def extractive(rec: MemoryRecord) -> tuple[str, str] | None:
    """``rec``'s message and reply, each cut to its first whole sentences within ``KEEP_CHARS``;
    None when that is not shorter (a first sentence longer than that: nothing is cut in one)."""
    sides = []
    for text, keep in zip((rec.query, rec.response), KEEP_CHARS):
        text = " ".join(text.split())
        if len(text) <= keep:
            sides.append(text)
            continue

        def fits(s: str, keep: int = keep) -> bool:
            return len(s) <= keep

        kept = whole_sentences(text, fits)
        sides.append(kept if kept is not None else "")
    query, response = sides
    if not query.strip() and rec.query.strip():
        return None  # the message's first sentence alone is longer than a compressed turn keeps
    if len(query) + len(response) >= len(rec.query.strip()) + len(rec.response.strip()):
        return None
    return query, response
