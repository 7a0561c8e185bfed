"""The FAISS index of one user's memories: a cache of the vectors stored in SQLite.

Inner product on normalised vectors, ids = memory ids (a turn's reply vector: the id plus
``stores.sqlite.REPLY_ID_OFFSET``); archived memories are in it too, as the second tier. Up to
``IVF_MIN`` vectors the search is exact (``IndexIDMap2`` over ``IndexFlatIP``); past that, exact
search grows with the memories (docs/benchmarks.md, "Numbers behind the code"), so the index becomes an inverted file
(``IndexIVFScalarQuantizer``, vectors kept as float16, about sqrt(n) lists of which a seventh, at
least 64, are searched, in parts that an idle thread of the bank's may share), which also takes
ids, additions and removals incrementally and is retrained from the stored vectors when the
memories have grown fourfold since it was trained. Updated incrementally from the store's change
numbers (``vseq``), so that changes made by this process or another one are applied without a
rebuild; saved atomically beside the database; rebuilt from the stored vectors (never re-embedded)
when the file is missing, corrupt, made for another embedder, or ahead of the store.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from concurrent.futures import Executor
from pathlib import Path
from typing import Protocol

import faiss
import numpy as np

log = logging.getLogger(__name__)

SAVE_EVERY_CHANGES = 500  # saved after this many changes, or a twentieth of the index if more
MAGIC = b"SFINDEX1"
IVF_MIN = 50_000  # from this many vectors on, an inverted file instead of exact search
# lists searched per query: a seventh, at least 64, find nearly all of what a third of them find
# (measured in docs/benchmarks-journal.md, "The 100k turn profiled and fixed"), at under half the cost
IVF_PROBE_SHARE = 1 / 7
IVF_PROBE_MIN = 64
IVF_TRAIN_PER_LIST = 40  # training sample size per list
# an inverted file's probed lists are searched in this many parts, which a helper thread shares
# (``UserIndex.search``): four, so that where the helper is late the search waits for a quarter
# of the lists at most
IVF_SEARCH_PARTS = 4


def _threads(n: int) -> None:
    """OpenMP threads for FAISS in the calling thread. One for the per-turn work (a search for one
    query, a few additions): FAISS would otherwise open a parallel region for each, which costs
    far more than the work on a small machine that has other work (docs/benchmarks.md, "Numbers behind
    the code"). Training and
    rebuilds use every core."""
    faiss.omp_set_num_threads(n)


def _nlist(n: int) -> int:
    return max(64, int(math.sqrt(n)))


def _nprobe(nlist: int) -> int:
    """Lists searched per query."""
    return min(nlist, max(1, int(max(IVF_PROBE_MIN, nlist * IVF_PROBE_SHARE))))


class VectorSource(Protocol):
    """Where an index's vectors are stored (the SQLite store of the same user)."""

    def vseq(self) -> int:
        """The number of the latest change to what the index holds."""
        ...

    def index_vectors_since(
        self, seq: int, top: int | None = None
    ) -> tuple[list[int], list[int], list[bytes], int, int | None]:
        """(index ids to drop, index ids to (re)add, their vectors, now, the new ``top``)."""
        ...


class UserIndex:
    def __init__(self, store: VectorSource, path: Path, dim: int, embedder_id: str):
        self.store, self.path, self.dim, self.embedder_id = store, Path(path), dim, embedder_id
        self._lock = threading.RLock()
        self.seq = -1
        # the highest memory id this index has held vectors of (None: not known, as in a file
        # saved without it): a memory above it has nothing here to remove (``index_vectors_since``)
        self.top: int | None = None
        self._unsaved = 0
        loaded = self._load()
        self.rebuilt = loaded is None  # whether the last open had to rebuild (for tests / stats)
        if loaded is not None:
            self.index: faiss.Index = loaded
            self._probe()
        if loaded is None or not self._shape_fits():
            self._rebuild()

    def _empty(self) -> faiss.IndexIDMap2:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def _ivf(self, vecs: np.ndarray, ids: np.ndarray) -> faiss.IndexIVF:
        nlist = _nlist(len(ids))
        index = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatIP(self.dim), self.dim, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
        )
        index.by_residual = False
        sample = vecs
        if len(vecs) > nlist * IVF_TRAIN_PER_LIST:  # a fixed, evenly spread sample: reproducible
            sample = vecs[np.linspace(0, len(vecs) - 1, nlist * IVF_TRAIN_PER_LIST).astype(np.int64)]
        index.cp.niter = 12
        _threads(os.cpu_count() or 1)
        try:
            index.train(np.ascontiguousarray(sample))
            index.add_with_ids(vecs, ids)
        finally:
            _threads(1)
        return index

    def _probe(self) -> None:
        """The IVF's probes for its current count of vectors."""
        if isinstance(self.index, faiss.IndexIVF):
            self.index.nprobe = _nprobe(self.index.nlist)

    def _shape_fits(self) -> bool:
        """Whether the index is of the kind (and size of inverted file) its count calls for."""
        n = int(self.index.ntotal)
        if isinstance(self.index, faiss.IndexIVF):
            return IVF_MIN // 2 <= n <= 4 * self.index.nlist**2
        return n < IVF_MIN

    def _load(self) -> faiss.Index | None:
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            return None
        try:
            with fh:
                if fh.readline().rstrip(b"\n") != MAGIC:
                    raise ValueError("not a SiliconFriend index file")
                meta = json.loads(fh.readline())
                if meta.get("embedder") != self.embedder_id or meta.get("dim") != self.dim:
                    log.info("index %s was made for another embedder; rebuilding", self.path)
                    return None
                if int(meta["seq"]) > self.store.vseq():
                    log.info("index %s is ahead of its store; rebuilding", self.path)
                    return None
                # read straight from the file, without a copy of the whole body in memory
                index = faiss.read_index(faiss.PyCallbackIOReader(fh.read))  # type: ignore[attr-defined]  # not in faiss's stubs
            if not isinstance(index, (faiss.IndexIDMap2, faiss.IndexIVF)) or index.d != self.dim:
                return None
            if meta.get("sentences"):  # it holds sentence vectors, which the store no longer has
                return None
            self.seq = int(meta["seq"])
            self.top = meta.get("top")
            return index
        except Exception as exc:  # a corrupt or truncated file: rebuilt from the store
            log.warning("index %s unreadable (%s); rebuilding from the store", self.path, exc)
            return None

    def _rebuild(self) -> faiss.Index:
        """A new index of the kind the count calls for, from the stored vectors (no embedding)."""
        _, ids, blobs, now, self.top = self.store.index_vectors_since(-1)
        vecs = (
            np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)
            if ids
            else np.zeros((0, self.dim), dtype=np.float32)
        )
        if len(ids) and vecs.shape[1] != self.dim:
            raise ValueError("stored vectors have another dimension; re-embed the memories")
        ids_arr = np.asarray(ids, dtype=np.int64)
        if len(ids) >= IVF_MIN:
            self.index = self._ivf(vecs, ids_arr)
        else:
            self.index = self._empty()
            if len(ids):
                self.index.add_with_ids(vecs, ids_arr)
        self.seq = now
        self._probe()
        self.save()
        return self.index

    def sync(self, *, force_save: bool = False) -> None:
        """Apply the store's changes since the index last saw it (cheap when there are none)."""
        with self._lock:
            _threads(1)
            if self.store.vseq() != self.seq:
                drop, add_ids, blobs, now, self.top = self.store.index_vectors_since(self.seq, self.top)
                removed = 0
                if drop:
                    removed = int(self.index.remove_ids(np.asarray(drop, dtype=np.int64)))
                if add_ids:
                    vecs = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(add_ids), -1)
                    if vecs.shape[1] != self.dim:
                        raise ValueError("stored vectors have another dimension; re-embed the memories")
                    self.index.add_with_ids(vecs, np.asarray(add_ids, dtype=np.int64))
                # what the index holds that its file does not: the slots dropped that held nothing
                # (most of a changed memory's) are no change
                self._unsaved += removed + len(add_ids)
                self.seq = now
                if not self._shape_fits():
                    self._rebuild()
                    return
                self._probe()
            if force_save or self._unsaved >= max(SAVE_EVERY_CHANGES, self.index.ntotal // 20):
                self.save()

    def flush(self) -> None:
        """Catch up with the store and save, if anything changed since the last save."""
        with self._lock:
            self.sync()
            if self._unsaved:
                self.save()

    def save(self) -> None:
        """One file, header and index together, replaced atomically: a reader never sees an
        index with another index's change number, whichever process wrote it."""
        with self._lock:
            header = json.dumps(
                {
                    "seq": self.seq,
                    "dim": self.dim,
                    "embedder": self.embedder_id,
                    "count": int(self.index.ntotal),
                    "top": self.top,
                }
            ).encode()
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + b"\n" + header + b"\n")
                faiss.write_index(self.index, faiss.PyCallbackIOWriter(fh.write))  # type: ignore[attr-defined]  # not in faiss's stubs
            os.replace(tmp, self.path)
            self._unsaved = 0

    def search(self, query: np.ndarray, k: int, *, helpers: Executor | None = None) -> list[tuple[int, float]]:
        """The ``k`` best (id, inner product), best first. ``helpers``: a thread of theirs may
        share an inverted file's search (``_probed``)."""
        q = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(1, -1))
        with self._lock:
            self.sync()
            if self.index.ntotal == 0:
                return []
            k = min(k, int(self.index.ntotal))
            if isinstance(self.index, faiss.IndexIVF):
                scores, ids = self._probed(q, k, helpers)
            else:
                found = self.index.search(q, k)
                scores, ids = found[0][0], found[1][0]
        return [(int(i), float(s)) for i, s in zip(ids, scores) if i >= 0]

    def _probed(self, q: np.ndarray, k: int, helpers: Executor | None) -> tuple[np.ndarray, np.ndarray]:
        """An inverted file's search, its probed lists in ``IVF_SEARCH_PARTS`` parts. This thread
        takes parts one by one, and so does one of ``helpers``' threads once it starts (FAISS
        leaves Python's lock while it scans): on two cores with nothing else to do, the search
        takes about two thirds of its time alone (docs/benchmarks-journal.md, "The dense search shared with
        an idle worker"). This thread waits only for a part the
        helper is scanning, never for the helper to start: on a busy machine it scans every part
        itself. Each part's best ``k`` are merged by score, then id, so the hits are the same
        whoever scanned which part."""
        index: faiss.IndexIVF = self.index  # type: ignore[assignment]
        dist, assign = index.quantizer.search(q, index.nprobe)
        bounds = np.linspace(0, index.nprobe, min(IVF_SEARCH_PARTS, index.nprobe) + 1).astype(int)
        parts = [
            (np.ascontiguousarray(assign[:, a:b]), np.ascontiguousarray(dist[:, a:b]))
            for a, b in zip(bounds, bounds[1:])
        ]
        found: list[tuple[np.ndarray, np.ndarray] | BaseException | None] = [None] * len(parts)
        scanned = [threading.Event() for _ in parts]
        untaken = iter(range(len(parts)))
        taking = threading.Lock()

        def scan_parts() -> None:
            _threads(1)
            while True:
                with taking:
                    n = next(untaken, None)
                if n is None:
                    return
                try:
                    lists, near = parts[n]
                    params = faiss.SearchParametersIVF()
                    params.nprobe = lists.shape[1]
                    best: np.ndarray = np.empty((1, k), dtype=np.float32)
                    which: np.ndarray = np.empty((1, k), dtype=np.int64)
                    index.search_preassigned_c(  # type: ignore[attr-defined]  # the wrapper takes no params
                        1, faiss.swig_ptr(q), k, faiss.swig_ptr(lists), faiss.swig_ptr(near),
                        faiss.swig_ptr(best), faiss.swig_ptr(which), False, params,
                    )  # fmt: skip
                    found[n] = (best[0], which[0])
                except BaseException as exc:  # raised again on the searching thread
                    found[n] = exc
                finally:
                    scanned[n].set()

        if helpers is not None:
            try:
                helpers.submit(scan_parts)
            except RuntimeError:  # the helpers' pool is shut down (its bank is closing): alone
                pass
        scan_parts()
        for event in scanned:
            event.wait()
        scores_all, ids_all = [], []
        for part in found:
            if isinstance(part, BaseException):
                raise part
            assert part is not None
            scores_all.append(part[0])
            ids_all.append(part[1])
        scores, ids = np.concatenate(scores_all), np.concatenate(ids_all)
        held = ids >= 0
        scores, ids = scores[held], ids[held]
        order = np.lexsort((ids, -scores))[:k]
        return scores[order], ids[order]

    def __len__(self) -> int:
        return int(self.index.ntotal)
