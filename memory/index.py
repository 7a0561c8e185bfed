"""The FAISS index of one user's active memories: a cache of the vectors stored in SQLite.

Inner product on normalised vectors (``IndexIDMap2`` over ``IndexFlatIP``, ids = memory ids).
Updated incrementally from the store's change numbers (``vseq``), so that changes made by this
process or another one are applied without a rebuild; saved atomically beside the database;
rebuilt from the stored vectors (never re-embedded) when the file is missing, corrupt, made for
another embedder, or ahead of the store.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import faiss
import numpy as np

from .store import UserStore

log = logging.getLogger(__name__)

SAVE_EVERY_CHANGES = 500
MAGIC = b"SFINDEX1"


class UserIndex:
    def __init__(self, store: UserStore, path: Path, dim: int, embedder_id: str):
        self.store, self.path, self.dim, self.embedder_id = store, Path(path), dim, embedder_id
        self._lock = threading.RLock()
        self.seq = -1
        self._unsaved = 0
        self.rebuilt = False          # whether the last open had to rebuild (for tests / stats)
        self.index = self._load() or self._rebuild()

    def _empty(self) -> faiss.IndexIDMap2:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def _load(self) -> faiss.IndexIDMap2 | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            magic, header, body = raw.split(b"\n", 2)
            if magic != MAGIC:
                raise ValueError("not a SiliconFriend index file")
            meta = json.loads(header)
            if meta.get("embedder") != self.embedder_id or meta.get("dim") != self.dim:
                log.info("index %s was made for another embedder; rebuilding", self.path)
                return None
            if int(meta["seq"]) > self.store.vseq():
                log.info("index %s is ahead of its store; rebuilding", self.path)
                return None
            index = faiss.deserialize_index(np.frombuffer(body, dtype=np.uint8))
            if not isinstance(index, faiss.IndexIDMap2) or index.d != self.dim:
                return None
            self.seq = int(meta["seq"])
            return index
        except Exception as exc:  # a corrupt or truncated file: rebuilt from the store
            log.warning("index %s unreadable (%s); rebuilding from the store", self.path, exc)
            return None

    def _rebuild(self) -> faiss.IndexIDMap2:
        self.rebuilt = True
        self.seq = -1
        self.index = self._empty()
        self.sync(force_save=True)
        return self.index

    def sync(self, *, force_save: bool = False) -> None:
        """Apply the store's changes since the index last saw it (cheap when there are none)."""
        with self._lock:
            if self.store.vseq() != self.seq:
                drop, add_ids, blobs, now = self.store.active_vectors_since(self.seq)
                if drop:
                    self.index.remove_ids(np.asarray(drop, dtype=np.int64))
                if add_ids:
                    vecs = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(add_ids), -1)
                    if vecs.shape[1] != self.dim:
                        raise ValueError("stored vectors have another dimension; re-embed the memories")
                    self.index.add_with_ids(vecs, np.asarray(add_ids, dtype=np.int64))
                self._unsaved += len(drop) + len(add_ids)
                self.seq = now
            if force_save or self._unsaved >= SAVE_EVERY_CHANGES:
                self.save()

    def save(self) -> None:
        """One file, header and index together, replaced atomically: a reader never sees an
        index with another index's change number, whichever process wrote it."""
        with self._lock:
            header = json.dumps({"seq": self.seq, "dim": self.dim, "embedder": self.embedder_id,
                                 "count": int(self.index.ntotal)}).encode()
            body = faiss.serialize_index(self.index)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + b"\n" + header + b"\n")
                fh.write(body.tobytes())
            os.replace(tmp, self.path)
            self._unsaved = 0

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        with self._lock:
            self.sync()
            if self.index.ntotal == 0:
                return []
            scores, ids = self.index.search(np.asarray(query, dtype=np.float32).reshape(1, -1),
                                            min(k, self.index.ntotal))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def __len__(self) -> int:
        return int(self.index.ntotal)
