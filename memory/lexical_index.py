"""BM25 over one user's lexical table in memory: the SQLite store's lexical search for large memories.

SQLite's FTS5 scores every row that holds any of a query's words, and its ``bm25()`` reads each
such row's size and instances one by one: a conversation's two dozen words match a third of a
100,000-memory history, and one search costs a few hundred milliseconds (docs/benchmarks-journal.md,
"The 100k turn profiled again").
Here the same table is held as posting lists (term -> ids and term counts, from the table's own
token strings) and a search is a few array operations.

The scores are FTS5's own, to the last bit: the same formula (``memory/bm25.py``, N and the
average length over every row of the table), computed in the same order (a row's score is the sum of its terms' parts in the query's
order), and ties broken as SQLite breaks them (the lower id first). That holds while FTS5 cuts the
token strings where this module does, at spaces: the stored strings are made of ASCII words, Han
words and day tokens; a string with anything else (which FTS5's unicode61 tokenizer might cut
differently) makes the store keep FTS5 for its searches.

Changes come from the store's change numbers (``vseq`` and the tombstones), as the FAISS index's
do: the rows changed since the last look are read again, their old postings masked out, and
the lists are rebuilt when the changes have piled up.
"""

from __future__ import annotations

import logging
import re
import threading
from array import array
from typing import Callable, Iterable, Sequence

import numpy as np

from . import bm25

log = logging.getLogger(__name__)


# what FTS5's unicode61 tokenizer keeps whole, as this module does: ASCII letters and digits, and
# Han characters assigned in Unicode 6.1 (the tokenizer's tables); anything else may be a separator
_SIMPLE = re.compile(r"[a-z0-9]+|[\u3400-\u4db5\u4e00-\u9fcc]+")
REBUILD_SHARE = 0.05  # rebuilt when this share of the rows has changed since the last build


class UnsupportedTokens(ValueError):
    """A token string FTS5 might cut otherwise than at spaces."""


def searchable(terms: Sequence[str]) -> bool:
    """Whether FTS5 reads each of ``terms`` as the one token it is here."""
    return all(_SIMPLE.fullmatch(t) for t in terms)


def _tokens(text: str) -> list[str]:
    tokens = text.split(" ") if text else []
    for token in tokens:
        if not _SIMPLE.fullmatch(token):
            raise UnsupportedTokens(token)
    return tokens


class LexicalIndex:
    """Posting lists of an FTS5 table's rows (id -> token string); ``search`` ranks as
    ``SELECT rowid, -bm25(t) FROM t WHERE t MATCH '"a" OR "b" ...' ORDER BY bm25(t) LIMIT n``."""

    def __init__(self, rows: Iterable[tuple[int, str]]):
        self._lock = threading.Lock()
        self._build(list(rows))

    def _build(self, rows: list[tuple[int, str]]) -> None:
        vocab: dict[str, int] = {}
        term_ids = array("i")  # 4 bytes a token while building, not a Python int's 36
        ids: np.ndarray = np.zeros(len(rows), dtype=np.int64)
        lengths: np.ndarray = np.zeros(len(rows), dtype=np.int64)
        for n, (rid, text) in enumerate(rows):
            tokens = _tokens(text)
            ids[n], lengths[n] = rid, len(tokens)
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in tokens])
        top = int(ids.max()) + 1 if len(ids) else 1
        self.length: np.ndarray = np.zeros(top, dtype=np.float64)  # tokens per row, by id
        self.length[ids] = lengths
        self.present: np.ndarray = np.zeros(top, dtype=bool)  # in the table
        self.present[ids] = True
        # postings sorted by (term, id): one run per term; a run's term count = repeats of the pair
        doc: np.ndarray = np.repeat(ids, lengths)
        key: np.ndarray = (np.frombuffer(term_ids, dtype=np.int32).astype(np.int64) << 40) | doc
        key.sort()
        first: np.ndarray = np.ones(len(key), dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        pairs: np.ndarray = key[starts]
        # 8 bytes a posting (~20 MB at 100,000 memories); counts are small integers, exact in float32
        self.tf: np.ndarray = np.diff(np.append(starts, len(key))).astype(np.float32)
        self.ids: np.ndarray = (pairs & ((1 << 40) - 1)).astype(np.int32 if top < 2**31 else np.int64)
        term_of: np.ndarray = pairs >> 40
        bounds = np.asarray(np.searchsorted(term_of, np.arange(len(vocab) + 1)))
        self.runs = {t: (int(bounds[i]), int(bounds[i + 1])) for t, i in vocab.items()}
        self.base_valid = self.present.copy()  # ids whose postings in the lists are current
        self.extra: dict[str, dict[int, int]] = {}  # term -> {id: count} of rows changed since
        self.changed = 0
        self.rows = len(rows)
        self.tokens = int(lengths.sum())

    def __len__(self) -> int:
        return self.rows

    def _grow(self, top: int) -> None:
        if top > len(self.length):
            size = max(top, int(len(self.length) * 1.25) + 1)
            for name in ("length", "present", "base_valid"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def apply(self, changed: Sequence[int], rows: Sequence[tuple[int, str]]) -> bool:
        """Rows ``changed`` since the last look; ``rows``: those of them still in the table, with
        their token strings. Returns whether enough has changed for a rebuild to be worth it."""
        fresh = [(rid, _tokens(text)) for rid, text in rows]
        with self._lock:
            self._grow(max([*changed, *(r for r, _ in fresh)], default=0) + 1)
            for rid in changed:
                if rid < len(self.present) and self.present[rid]:
                    self.rows -= 1
                    self.tokens -= int(self.length[rid])
                    self.present[rid] = False
                    self.length[rid] = 0
                self.base_valid[rid] = False
            for terms in self.extra.values():
                for rid in changed:
                    terms.pop(rid, None)
            for rid, tokens in fresh:
                self.present[rid] = True
                self.length[rid] = len(tokens)
                self.rows += 1
                self.tokens += len(tokens)
                for t in tokens:
                    bucket = self.extra.setdefault(t, {})
                    bucket[rid] = bucket.get(rid, 0) + 1
            self.changed += len(changed)
            return self.changed > REBUILD_SHARE * max(self.rows, 1)

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        run = self.runs.get(term)
        ids: np.ndarray
        tf: np.ndarray
        if run is not None:
            ids, tf = self.ids[run[0] : run[1]], self.tf[run[0] : run[1]].astype(np.float64)
            keep = self.base_valid[ids]
            if not keep.all():
                ids, tf = ids[keep], tf[keep]
        else:
            ids, tf = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        more = self.extra.get(term)
        if more:
            ids = np.concatenate([ids, np.fromiter(more.keys(), dtype=np.int64, count=len(more))])
            tf = np.concatenate([tf, np.fromiter(more.values(), dtype=np.float64, count=len(more))])
        return ids, tf

    def documents_with(self, terms: Sequence[str]) -> tuple[int, list[int]]:
        """The rows of the table, and how many of them hold each of ``terms``."""
        with self._lock:
            return self.rows, [len(self._postings(t)[0]) for t in terms]

    def search(self, terms: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(id, score) of the best ``limit`` rows holding any of ``terms``, best first: FTS5's
        ``-bm25()`` and order (ties: the lower id first)."""
        with self._lock:
            if not terms or self.rows == 0:
                return []
            n_rows = self.rows
            avgdl = float(self.tokens) / float(n_rows)
            all_ids, parts = [], []
            for term in terms:
                ids, tf = self._postings(term)
                hits = len(ids)
                if hits == 0:
                    continue
                all_ids.append(ids)
                parts.append(bm25.parts(bm25.idf(n_rows, hits), tf, self.length[ids], avgdl))
            if not all_ids:
                return []
            ids = np.concatenate(all_ids)
            # a row's parts are added in the query's order (bincount adds in array order), as
            # bm25() adds its phrases
            score = np.bincount(ids, weights=np.concatenate(parts))
            hit: np.ndarray = np.zeros(len(score), dtype=bool)
            hit[ids] = True
        found = np.flatnonzero(hit)
        found, score = bm25.best(found, score[found], limit)
        return list(zip(found.tolist(), score.tolist()))


class LexicalCache:
    """A store's ``LexicalIndex``, built on a background thread the first time it is asked for
    (the store searches FTS5 meanwhile), caught up with the store's changes before each search,
    rebuilt when they have piled up. ``read_all`` gives (vseq, every row); ``read_changes``
    (since) gives (vseq, changed ids, their rows still in the table)."""

    def __init__(
        self,
        read_all: Callable[[], tuple[int, list[tuple[int, str]]]],
        read_changes: Callable[[int], tuple[int, list[int], list[tuple[int, str]]]],
        current: Callable[[], int],
    ):
        self._read_all, self._read_changes, self._current = read_all, read_changes, current
        self._lock = threading.Lock()
        self._index: LexicalIndex | None = None
        self._seq = -1
        self._building: threading.Thread | None = None
        self.unsupported = False  # the table holds tokens FTS5 may cut otherwise: FTS5 it is

    def _build(self) -> None:
        try:
            seq, rows = self._read_all()  # the change number first: a change after it is replayed
            index = LexicalIndex(rows)
        except UnsupportedTokens:
            self.unsupported = True
            return
        except Exception as exc:  # the store closed or deleted meanwhile: FTS5 goes on answering
            log.info("lexical index not built (%s)", exc)
            self.unsupported = True
            return
        with self._lock:
            self._index, self._seq = index, seq

    def start(self) -> None:
        """Build (or rebuild) in the background unless a build is under way."""
        with self._lock:
            if self.unsupported or (self._building is not None and self._building.is_alive()):
                return
            self._building = threading.Thread(target=self._build, name="lexical-index", daemon=True)
            self._building.start()

    def wait(self) -> None:
        """Until a build under way is done."""
        building = self._building
        if building is not None:
            building.join()

    def ready(self) -> LexicalIndex | None:
        """The index, caught up with the store; None until the first build is done."""
        rebuild = False
        with self._lock:
            index = self._index
            if index is not None and self._current() != self._seq:
                try:
                    seq, changed, rows = self._read_changes(self._seq)
                    rebuild = index.apply(changed, rows)
                except UnsupportedTokens:
                    self._index, index, self.unsupported = None, None, True
                else:
                    self._seq = seq
        if index is None or rebuild:
            self.start()  # the current index answers until the new one is there
        return index
