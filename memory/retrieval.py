"""Hybrid retrieval over one user's active memories.

Candidates come from three places: the dense index (cosine of e5 / MiniLM vectors), the lexical
index (SQLite FTS5 BM25 over jieba / English word tokens) and, when the query names days ("on May
4th", "前天"), every active memory of those days. A candidate's base score mixes its dense
similarity and lexical score, each scaled to [0, 1] over the candidates. A dialogue turn then
takes a share of its neighbours' base scores (the turn before and after it on the same day):
conversations run over several turns, and "I loved Gulangyu Island" answers a question about
Xiamen that the turn before it named. A memory on a day the query names gets a bonus, and a small
retention term puts what is fresher in mind first among equals. Each hit carries its scores and
the reasons, for the UI. Retrieval never reinforces.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime

import numpy as np

from .dates import days_in_query
from .embedders import Embedder, embed_query
from .forgetting import ForgettingPolicy
from .index import UserIndex
from .lexical import fts_query
from .records import Kind, MemoryRecord, State
from .store import UserStore


@dataclass(frozen=True)
class RetrievalConfig:
    k: int = 5
    candidates: int = 40           # from each of the dense and lexical sides
    lexical_depth: int = 400       # lexical scores kept for the pool (neighbours); see retrieve()
    dense_weight: float = 0.7      # the lexical side gets 1 - dense_weight
    previous_weight: float = 0.4   # share of the previous turn's base score
    next_weight: float = 0.2       # share of the next turn's base score
    date_bonus: float = 1.0        # added when a memory is on a day the query names
    retention_weight: float = 0.05
    use_dates: bool = True
    kinds: tuple[Kind, ...] = (Kind.TURN, Kind.DAILY_EVENTS)

    @property
    def lexical_weight(self) -> float:
        return 1.0 - self.dense_weight


@dataclass
class Hit:
    record: MemoryRecord
    score: float
    dense: float = 0.0
    lexical: float = 0.0
    retention: float = 1.0
    on_named_day: bool = False
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        r = self.record
        return {"id": r.id, "kind": r.kind.value, "day": r.day.isoformat(), "text": r.text,
                "score": round(self.score, 4), "dense": round(self.dense, 4),
                "lexical": round(self.lexical, 4), "retention": round(self.retention, 4),
                "strength": r.strength, "on_named_day": self.on_named_day, "reasons": self.reasons}


def _scale(values: dict[int, float]) -> dict[int, float]:
    if not values:
        return {}
    low, top = min(values.values()), max(values.values())
    if top == low:  # one candidate, or all alike: nothing to tell them apart by
        return {k: 1.0 if v > 0 else 0.0 for k, v in values.items()}
    span = top - low
    return {k: (v - low) / span for k, v in values.items()}


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sf-lexical")
        return _pool


def _lexical_side(store: UserStore, query: str, config: RetrievalConfig) -> tuple[str | None, list[tuple[int, float]]]:
    """The FTS5 query and its ranked matches. One query gives both the candidates (its best
    ``candidates``) and the lexical scores of the neighbours that join the pool (its best
    ``lexical_depth``): asking FTS5 for given rows' scores costs a full pass over each query
    word's matches per row. Exact while fewer than ``lexical_depth`` memories match; past that,
    a neighbour beyond them scores 0."""
    match = fts_query(query)
    return match, store.lexical(match, max(config.candidates, config.lexical_depth)) if match else []


def retrieve(store: UserStore, index: UserIndex, embedder: Embedder, policy: ForgettingPolicy,
             query: str, now: datetime, config: RetrievalConfig = RetrievalConfig(), *,
             k: int | None = None, query_vector: np.ndarray | None = None) -> list[Hit]:
    k = config.k if k is None else k
    if not query.strip() or k <= 0:
        return []
    # The lexical side does not need the query vector: it runs on another thread while the query
    # is embedded (both leave Python's lock: SQLite while it searches, the embedder in its C
    # engine), so that on two cores a turn waits for the slower of the two, not for both.
    pending = _workers().submit(_lexical_side, store, query, config) if query_vector is None else None
    qvec = embed_query(embedder, query) if query_vector is None else query_vector
    match, ranked = pending.result() if pending is not None else _lexical_side(store, query, config)
    dense: dict[int, float] = dict(index.search(qvec, config.candidates))
    lexical: dict[int, float] = dict(ranked[:config.candidates])
    deeper = dict(ranked)
    named_days: list[date] = days_in_query(query, now.date()) if config.use_dates else []
    day_ids: set[int] = set()
    if named_days:
        day_ids = {r.id for r in store.records(days=named_days, state=State.ACTIVE)}

    found = store.get_many(set(dense) | set(lexical) | day_ids)
    records = {i: r for i, r in found.items() if r.kind in config.kinds and r.state == State.ACTIVE}
    # the neighbours of candidate turns join the pool, so that their scores can be shared
    places = {(r.day, r.position + d) for r in records.values() if r.kind == Kind.TURN for d in (-1, 1)}
    pool = dict(records)
    for rec in store.turns_at(sorted(places)):
        pool.setdefault(rec.id, rec)
    unscored = [i for i in pool if i not in dense]
    if unscored:  # cosine from the stored vectors for what the index did not return
        dense.update(zip(unscored, (store.vectors(unscored, index.dim) @ qvec).tolist()))
    for i in pool:
        if i not in lexical and i in deeper:
            lexical[i] = deeper[i]
    dense_s = _scale({i: dense[i] for i in pool})
    lex_s = _scale({i: lexical.get(i, 0.0) for i in pool})
    base = {i: config.dense_weight * dense_s[i] + config.lexical_weight * lex_s[i] for i in pool}
    at = {(r.day, r.position): r.id for r in pool.values() if r.kind == Kind.TURN}

    hits: list[Hit] = []
    for rid, rec in records.items():
        score = base[rid]
        context = ""
        if rec.kind == Kind.TURN:
            prev, nxt = at.get((rec.day, rec.position - 1)), at.get((rec.day, rec.position + 1))
            if prev is not None:
                score += config.previous_weight * base[prev]
            if nxt is not None:
                score += config.next_weight * base[nxt]
            if prev is not None and base[prev] > base[rid]:
                context = "continues a conversation about this"
        retention = policy.retention(rec, now)
        on_day = rec.day in named_days
        score += (config.date_bonus if on_day else 0.0) + config.retention_weight * retention
        reasons = []
        if dense_s.get(rid, 0) >= 0.5:
            reasons.append(f"similar in meaning ({dense[rid]:.2f})")
        if lexical.get(rid):
            reasons.append("shares words with your message")
        if context:
            reasons.append(context)
        if on_day:
            reasons.append(f"from {rec.day.isoformat()}, the day you named")
        if not reasons:
            reasons.append("closest of what is remembered")
        hits.append(Hit(rec, score, dense.get(rid, 0.0), lexical.get(rid, 0.0), retention, on_day, reasons))
    hits.sort(key=lambda h: (-h.score, -h.record.id))
    return hits[:k]
