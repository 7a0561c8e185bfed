"""What the lexical side indexes of a memory, made the same way by every store: its words and the
days it refers to."""

from __future__ import annotations

from collections import Counter
from datetime import date

from ..dates import days_in_query
from ..lexical import Tokenizer
from ..records import Kind


def days_meant(kind: Kind, text: str, day: date) -> list[date]:
    """The days a turn's words refer to, relative to the day they were said ("yesterday", "last
    Friday", "on May 4th"): indexed so that a question naming such a day finds the turn."""
    return [d for d in days_in_query(text, day) if d != day] if kind == Kind.TURN else []


def lexical_document(tokenizer: Tokenizer, kind: Kind, text: str, day: date) -> str:
    """What the lexical side indexes of a memory: its words and the days it refers to."""
    return tokenizer.fts_document(text, days_meant(kind, text, day))


def term_counts(tokenizer: Tokenizer, kind: Kind, text: str, day: date) -> tuple[Counter, int]:
    """Term frequencies and length of a memory's lexical document (for a store that computes
    BM25 itself)."""
    tokens = lexical_document(tokenizer, kind, text, day).split()
    return Counter(tokens), len(tokens)
