"""BM25, as SQLite FTS5's ``bm25()`` computes it, for every lexical search that scores itself
(the SQLite store's table in memory, ``lexical_index.py``; the PostgreSQL store's postings,
``stores/pg_postings.py``): the two engines then rank alike.

k1 1.2, b 0.75; a term's IDF ``log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6 (N rows, n of
them holding the term); a row's score the sum of its terms' parts."""

from __future__ import annotations

import math

import numpy as np

K1, B = 1.2, 0.75


def idf(rows: float, holding: float) -> float:
    """A term's inverse document frequency (C's log, as SQLite's)."""
    value = math.log((rows - holding + 0.5) / (holding + 0.5))
    return value if value > 0.0 else 1e-6


def parts(idf: float, tf: np.ndarray, length: np.ndarray, mean_length: float) -> np.ndarray:
    """Each posting's part of its row's score: a term of ``idf`` held ``tf`` times in a row of
    ``length`` tokens."""
    return idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * length / mean_length)))


def best(found: np.ndarray, scores: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``limit`` of rows ``found`` by ``scores``, best first, ties by the lower id."""
    if len(found) > limit:
        cut = -np.partition(-scores, limit - 1)[limit - 1]
        keep = scores >= cut
        found, scores = found[keep], scores[keep]
    order = np.lexsort((found, -scores))[:limit]
    return found[order], scores[order]
