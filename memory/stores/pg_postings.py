"""The lexical postings a PostgreSQL worker keeps (``PostingsCache``) and BM25 over them.

A user's postings live in ``lex_postings`` (owner, term, memory, term frequency, document length);
a worker keeps those it has read, checked against the user's row at every search, so that a
search reads only the postings written since, and scores them with numpy (``bm25_top``): the
scores SQLite FTS5's ``bm25()`` gives on the same text."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np

from .. import bm25
from .base import SearchHit, Side

# a posting as the lexical search packs it: memory id, term frequency, document length
_POSTING = np.dtype([("id", ">i8"), ("tf", ">i4"), ("dl", ">i4")])
# and as it is kept and scored: native numbers, converted once
_KEPT = np.dtype([("id", np.int64), ("tf", np.float64), ("dl", np.float64)])
NO_POSTINGS: np.ndarray = np.zeros(0, _KEPT)


def unpack(packed: bytes) -> np.ndarray:
    """Postings as a statement packs them (memory id int8, tf int4, dl int4, big-endian), as kept."""
    return np.frombuffer(packed, _POSTING).astype(_KEPT)


class _UserPostings:
    def __init__(self, version: tuple):
        self.version = version
        self.terms: dict[str, tuple[int, np.ndarray]] = {}  # term: (ids it holds up to, postings)
        self.size = 0
        self.lock = threading.Lock()


class PostingsCache:
    """The lexical postings a worker has read, per user and term, with the id up to which each
    term's are complete. Exact, whatever other workers do: a user's row says up to which id
    postings exist (``last_id``: ids only grow, and a memory's postings commit with its id), and
    its ``lex_epoch`` and ``created_at`` change whenever postings go away or a user is made again;
    a term is then read whole again, else only its postings above the id it holds. Bounded: the
    users read longest ago are dropped past ``most`` postings in all."""

    def __init__(self, most: int = 4_000_000):
        self.most = most
        self._users: OrderedDict[str, _UserPostings] = OrderedDict()
        self._lock = threading.Lock()
        self._first: dict[str, threading.Lock] = {}  # a user's first search, under way

    def read(
        self,
        user: str,
        terms: Sequence[str],
        fetch: Callable[[Sequence[tuple[str, int]]], tuple[tuple, int, tuple, list[np.ndarray]] | None],
    ) -> tuple[tuple, list[np.ndarray]] | None:
        """The postings of ``terms`` and the user's lexical counts, all of one moment of the user:
        ``fetch([(term, above id), ...])`` reads, in one statement, the user's row (its version,
        ``last_id`` and counts) and each term's postings above the id given, up to that
        ``last_id``; it returns (version, last id, counts, postings) or None without a row. The
        ids given are those up to which the postings kept are complete, so that a term is read
        whole only once; a version other than the one kept (postings went away, or the user was
        made again) has every term read whole again. Returns (counts, postings), None without a
        row."""
        with self._lock:
            entry = self._users.get(user)
            if entry is not None:
                self._users.move_to_end(user)
                first = None
            else:  # the first search of this user: others wait for it, then read what it lacks
                first = self._first.setdefault(user, threading.Lock())
        if first is not None:
            with first:
                with self._lock:
                    entry = self._users.get(user)
                if entry is None:
                    try:
                        return self._read_whole(user, terms, fetch)
                    finally:
                        with self._lock:
                            self._first.pop(user, None)
        assert entry is not None
        with entry.lock:
            lows = [entry.terms[t][0] if t in entry.terms else 0 for t in terms]
            got = fetch(list(zip(terms, lows)))
            if got is None:
                return None
            version, last, counts, new = got
            kept = version == entry.version and all(low <= last for low in lows)
            if kept:
                for t, low, fresh in zip(terms, lows, new):
                    old = entry.terms[t][1] if t in entry.terms else NO_POSTINGS
                    # most terms have none new since the last search: a common word's
                    # postings (hundreds of thousands) are then not copied again
                    entry.terms[t] = (
                        max(low, last),
                        np.concatenate([old, fresh]) if len(old) and len(fresh) else fresh if len(fresh) else old,
                    )
                    entry.size += len(fresh)
                arrays = [entry.terms[t][1] for t in terms]
        if kept:
            self._bound()
            return counts, arrays
        if not any(lows):  # read whole already, at the version that replaces the kept one
            self._take(user, version, last, dict(zip(terms, new)))
            return counts, new
        with self._lock:  # kept at another version, or ahead of the database: read again
            if self._users.get(user) is entry:
                del self._users[user]
        return self._read_whole(user, terms, fetch)

    def _read_whole(
        self,
        user: str,
        terms: Sequence[str],
        fetch: Callable[[Sequence[tuple[str, int]]], tuple[tuple, int, tuple, list[np.ndarray]] | None],
    ) -> tuple[tuple, list[np.ndarray]] | None:
        got = fetch([(t, 0) for t in terms])
        if got is None:
            return None
        version, last, counts, new = got
        self._take(user, version, last, dict(zip(terms, new)))
        return counts, new

    def _take(self, user: str, version: tuple, last: int, terms: dict[str, np.ndarray]) -> None:
        """Whole postings of ``terms`` (ids up to ``last``) read at ``version``, which replaces
        the version kept."""
        with self._lock:
            entry = self._users.get(user)
            if entry is None or entry.version != version:
                entry = self._users[user] = _UserPostings(version)
            self._users.move_to_end(user)
        with entry.lock:
            self._keep(entry, last, terms)
        self._bound()

    def _bound(self) -> None:
        with self._lock:
            total = sum(u.size for u in self._users.values())
            while total > self.most and len(self._users) > 1:
                _, gone = self._users.popitem(last=False)
                total -= gone.size

    @staticmethod
    def _keep(entry: _UserPostings, last: int, terms: dict[str, np.ndarray]) -> None:
        """Each term not held, or held up to a lower id, takes its postings up to ``last``."""
        for t, postings in terms.items():
            held = entry.terms.get(t)
            if held is None or held[0] < last:
                entry.size += len(postings) - (len(held[1]) if held is not None else 0)
                entry.terms[t] = (last, postings)

    def fill(self, user: str, version: tuple, last: int, terms: dict[str, np.ndarray]) -> None:
        """Every posting of ``user`` with an id up to ``last``, read in one snapshot of the user
        at ``version``: each term not held, or held up to a lower id, takes them. Nothing is
        taken when the user's postings are held at another version (which is newer is unknown:
        searches go on reading as they do)."""
        with self._lock:
            entry = self._users.get(user)
            if entry is None:
                entry = self._users[user] = _UserPostings(version)
            elif entry.version != version:
                return
            self._users.move_to_end(user)
        with entry.lock:
            self._keep(entry, last, terms)

    def forget(self, user: str) -> None:
        with self._lock:
            self._users.pop(user, None)


def bm25_top(
    term: np.ndarray, postings: np.ndarray, n_terms: int, docs: float, tokens: float, limit: int
) -> list[SearchHit]:
    """The best ``limit`` memories by BM25 (``memory/bm25.py``) from their postings (memory id,
    tf, dl) and each posting's term (its position in the query), best first, ties by id."""
    if not len(postings):
        return []
    ids: np.ndarray = postings["id"]
    holding = np.bincount(term, minlength=n_terms).tolist()
    idf = np.asarray([bm25.idf(docs, n) for n in holding], dtype=np.float64)
    weight = bm25.parts(idf[term], postings["tf"], postings["dl"], max(tokens / max(docs, 1.0), 1e-9))
    if int(ids.max()) <= 8 * len(ids) + 1_000_000:  # a user's ids are dense: sum over the id range
        by_id = np.bincount(ids, weights=weight)
        found = np.flatnonzero(by_id)
        scores = by_id[found]
    else:
        found, where = np.unique(ids, return_inverse=True)
        scores = np.bincount(where, weights=weight)
    found, scores = bm25.best(found, scores, limit)
    # as Python numbers at once (indexing numpy scalar by scalar costs more than the hits)
    return [SearchHit(i, Side.WORDS, x) for i, x in zip(found.tolist(), scores.tolist())]
