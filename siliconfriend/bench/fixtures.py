"""Homes full of memories for the benchmarks, made fast without embedding every memory.

Embedding 100,000 turns with e5 would take the better part of an hour, so a user's history is
written straight into their store: real generated text (so the lexical index, the named days and
the neighbours behave as in use) with vectors drawn from a pool of real e5 document vectors of
generated turns, two of them mixed with a little noise. Such vectors have the shape of real ones
(all in the same narrow cone, clustered by topic), which is what search speed and approximate
search recall depend on. Forgetting fields vary (strength, recalls, some memories archived).
A home of many users is made by copying a few such users' files under other names.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from datetime import date, datetime, time, timedelta
from pathlib import Path

import numpy as np

from memory import links
from memory.bank import MemoryBank
from memory.embedders import embed_replies, embed_turns
from memory.records import Kind, MemoryRecord, State, turn_text
from memory.stores.base import SECOND_REPLY_VECTOR, SECOND_VECTOR
from memory.stores.sqlite import SqliteStores

from .data import DialogueGenerator, turn_times

CHUNK = 4000  # memories written per transaction


def vector_pool(bank: MemoryBank, gen: DialogueGenerator, size: int) -> np.ndarray:
    """Real vectors of ``size`` generated turns, made as the bank makes a turn's."""
    return embed_turns(bank.embedder, [gen.turn()[0] for _ in range(size)])


def reply_vector_pool(bank: MemoryBank, gen: DialogueGenerator, size: int) -> np.ndarray:
    """Real vectors of ``size`` generated replies, made as the bank makes a turn's reply vector."""
    return embed_replies(bank.embedder, [gen.turn()[1] for _ in range(size)])


def synthetic_vectors(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors, each a mix of two pool vectors plus noise."""
    a = pool[rng.integers(0, len(pool), n)]
    b = pool[rng.integers(0, len(pool), n)]
    w = rng.uniform(0.15, 0.5, (n, 1)).astype(np.float32)
    v = a + w * b + rng.normal(0, 0.02, a.shape).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def fill_user(
    bank: MemoryBank,
    user: str,
    n_memories: int,
    gen: DialogueGenerator,
    pool: np.ndarray,
    *,
    end: date,
    seed: int = 0,
    archived_share: float = 0.1,
    reply_pool: np.ndarray | None = None,
    second_pools: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """Write ``n_memories`` memories (turns and daily summaries) for ``user``, ending the day
    before ``end``; every turn with a reply gets a reply vector too (mixed from ``reply_pool``,
    default ``pool``), and a long turn its sentence vectors where the bank writes them, as the
    reply worker would have made them, and the second reader's two (mixed from ``second_pools``:
    its vectors of messages, of replies) where given; the index is synced (built) and
    saved. Returns what was written."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    days = list(gen.days(n_memories, date(2000, 1, 1)))
    shift = (end - timedelta(days=1)) - days[-1][0]  # so that the history ends yesterday
    store = bank.user_store(user)
    records: list[MemoryRecord] = []
    counts = {"turns": 0, "summaries": 0, "days": len(days)}

    def flush() -> None:
        if records:
            stored = store.insert(records, synthetic_vectors(pool, len(records), nrng))
            answered = [r.stored_id for r in stored if r.kind == Kind.TURN and r.response]
            store.set_vectors(
                answered,
                synthetic_vectors(pool if reply_pool is None else reply_pool, len(answered), nrng),
                column="reply_vector",
            )
            if second_pools is not None:
                own, replies = second_pools
                ids = [r.stored_id for r in stored]
                store.set_vectors(ids, synthetic_vectors(own, len(ids), nrng), column=SECOND_VECTOR)
                store.set_vectors(answered, synthetic_vectors(replies, len(answered), nrng), column=SECOND_REPLY_VECTOR)
            records.clear()

    for day, _lang, turns, events, persona in days:
        day = day + shift
        for pos, ((q, a), when) in enumerate(zip(turns, turn_times(day, len(turns)))):
            strength = float(rng.choice((1, 1, 1, 2, 2, 3, 5, 8)))
            recalled = when + timedelta(days=rng.randint(1, 30)) if strength > 1 else None
            state = State.ARCHIVED if rng.random() < archived_share else State.ACTIVE
            records.append(
                MemoryRecord(
                    user=user,
                    kind=Kind.TURN,
                    text=turn_text(q, a),
                    created_at=when,
                    day=day,
                    query=q,
                    response=a,
                    position=pos,
                    strength=strength,
                    last_recall=recalled,
                    recall_count=int(strength) - 1,
                    state=state,
                )
            )
        counts["turns"] += len(turns)
        night = datetime.combine(day, time(23, 59))
        for kind, text in ((Kind.DAILY_EVENTS, events), (Kind.DAILY_PERSONALITY, persona)):
            if text:
                records.append(MemoryRecord(user=user, kind=kind, text=text, created_at=night, day=day))
                counts["summaries"] += 1
        if len(records) >= CHUNK:
            flush()
    flush()
    if bank.retrieval_config.link_weight > 0:
        # the links between them, as the bank writes them when memories are stored, where
        # retrieval spreads along them (a turn's reads are then those of a linked memory)
        links.backfill(store, bank.tokenizer, again=True)
    store.sync()
    store.flush()
    return counts


def clone_user(bank: MemoryBank, source: str, target: str) -> None:
    """``target`` gets a copy of ``source``'s files (the source must be closed)."""
    stores = bank.stores
    assert isinstance(stores, SqliteStores), "copies the files of a home folder"
    src, dst = stores.user_dir(source), stores.user_dir(target)
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("memory.db", "index.faiss"):
        shutil.copyfile(src / name, dst / name)
    con = sqlite3.connect(dst / "memory.db")
    try:
        con.execute("UPDATE meta SET value = ? WHERE key = 'user'", (target,))
        con.commit()
    finally:
        con.close()


def many_users(
    bank: MemoryBank,
    users: int,
    per_user: int,
    gen: DialogueGenerator,
    pool: np.ndarray,
    *,
    reply_pool: np.ndarray | None = None,
    end: date,
    templates: int = 8,
) -> list[str]:
    """A home of ``users`` users of ``per_user`` memories each: ``templates`` users are written,
    the others are copies of them under their own names."""
    names = [f"member{i:05d}" for i in range(users)]
    templates = min(templates, users)
    for i in range(templates):
        fill_user(bank, names[i], per_user, gen, pool, end=end, seed=1000 + i, reply_pool=reply_pool)
    bank.close()
    for i in range(templates, users):
        clone_user(bank, names[i % templates], names[i])
    return names


def write_memorybank_file(path: Path, gen: DialogueGenerator, users: int, turns_per_user: int) -> int:
    """A MemoryBank JSON file to import; returns its number of turns."""
    import json

    data = gen.memorybank_file(users, turns_per_user)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return sum(len(t) for u in data.values() for t in u["history"].values())
