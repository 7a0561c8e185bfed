"""Copying one user's memories from one bank to another (a home folder and a PostgreSQL store,
either way): every row with its id, place, forgetting state and stored vectors (its own, its
reply's, the second reader's; nothing is embedded again), and the user's meta values (which embedder
made the vectors). Safe to run again: a user whose copy already matches is left alone; a partial
copy is replaced."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .bank import MemoryBank
from .stores.base import SECOND_COLUMNS
from .stores.record_reads import with_vectors


def census(bank: MemoryBank, user: str) -> dict[str, int]:
    """How many memories ``user`` has, by kind and state: what a copy must match."""
    counts = Counter(f"{r.kind.value}/{r.state.value}" for r in bank.records(user))
    return dict(sorted(counts.items()))


def copy_user(source: MemoryBank, target: MemoryBank, user: str) -> str:
    """Copy ``user``; returns "copied" or "unchanged" (already there, same census). Raises
    RuntimeError when the copy does not match the source."""
    want = census(source, user)
    if target.has_user(user) and census(target, user) == want:
        return "unchanged"
    if target.has_user(user):
        target.delete_user(user)  # an earlier, interrupted copy
    src = source.user_store(user)
    dst = target.user_store(user)  # opened empty: nothing to re-embed
    for key, value in src.meta().items():
        dst.set_meta(key, value)
    for batch in with_vectors(src):
        records = [rec for rec, _, _ in batch]
        dim = next((len(v) for _, v, _ in batch if v is not None), target.embedder.dim)
        vectors = np.stack([v if v is not None and len(v) == dim else np.zeros(dim, np.float32) for _, v, _ in batch])
        dst.insert(records, vectors, keep_ids=True)
        replies = [(rec.stored_id, r) for rec, _, r in batch if r is not None]
        if replies:
            dst.set_vectors([i for i, _ in replies], np.stack([r for _, r in replies]), column="reply_vector")
        ids = [rec.stored_id for rec in records]
        for column, vectors in zip(SECOND_COLUMNS, src.second_vectors(ids)):
            held = np.flatnonzero(~np.isnan(vectors[:, 0]))
            if len(held):
                dst.set_vectors([ids[i] for i in held], vectors[held], column=column)
    dst.sync()
    got = census(target, user)
    if got != want:
        raise RuntimeError(f"the copy of {user!r} does not match: {got} instead of {want}")
    return "copied"
