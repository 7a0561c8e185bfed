"""Hybrid retrieval over one user's active memories.

Candidates come from three places: the store's dense search (cosine of e5 / MiniLM vectors), its
lexical search (BM25 over jieba / English word tokens) and, when the query names days ("on May
4th", "前天") or conversations ("our first conversation", "上次我们聊": the user's first day, the
latest before today), every active memory of those days. A candidate's base score mixes its dense
similarity and lexical score, each scaled to [0, 1] over the candidates. A dialogue turn then
takes a share of its neighbours' base scores (the turn before and after it on the same day):
conversations run over several turns, and "I loved Gulangyu Island" answers a question about
Xiamen that the turn before it named. A memory on a day the query names gets a bonus, and a small
retention term puts what is fresher in mind first among equals. Each hit carries its scores and
the reasons, for the UI. Retrieval never reinforces.

A turn's dense similarity is a weighted mean of its two vectors' cosines: the user's message
(two thirds) and the companion's reply (one third), so that both sides of an exchange count but
neither a long, generic reply ("here are some tips...") nor a short message decides alone; the
message weighs more because it is the person's own words, what a companion is later asked about
(in a conversation between two people, the reply is the second speaker's). A turn whose reply has
no vector yet counts its message only. The two sides weigh the same in the base score: a
question's words are a sharper cue than its meaning on conversations between two people
(third-person questions, names, rare nouns), and the dense side carries paraphrase
(docs/benchmarks.md, "Retrieval quality, issue 10", second and third passes).
Archived memories are the second tier: they take part, less a penalty, so that only a strong cue
brings one back (recognition rather than recall); the turn that uses it reinforces it, which
makes it active again. A turn that refers to another day ("yesterday", "last Friday") carries
that day in the lexical table, so a question naming the day finds it too.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Sequence

import numpy as np

from .dates import conversation_days, days_in_query
from .embedders import Embedder, embed_query
from .forgetting import ForgettingPolicy
from .lexical import query_terms
from .records import Kind, MemoryRecord, State
from .stores.base import SearchHit, Side, UserStore


@dataclass(frozen=True)
class RetrievalConfig:
    k: int = 5
    candidates: int = 40  # from each of the dense and lexical sides
    lexical_depth: int = 400  # lexical scores kept for the pool (neighbours); see _lexical_side()
    dense_weight: float = 0.5  # the lexical side gets 1 - dense_weight
    previous_weight: float = 0.4  # share of the previous turn's base score
    next_weight: float = 0.2  # share of the next turn's base score
    date_bonus: float = 1.0  # added when a memory is on a day the query names
    retention_weight: float = 0.05
    use_dates: bool = True
    use_replies: bool = True  # a turn's dense similarity also looks at its reply's vector
    reply_share: float = 1 / 3  # the reply's share of a turn's mean; the message has the rest
    archive_penalty: float | None = 0.3  # taken off an archived memory's score; None: never retrieved
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
        return {
            "id": r.id,
            "kind": r.kind.value,
            "day": r.day.isoformat(),
            "text": r.text,
            "score": round(self.score, 4),
            "dense": round(self.dense, 4),
            "lexical": round(self.lexical, 4),
            "retention": round(self.retention, 4),
            "strength": r.strength,
            "on_named_day": self.on_named_day,
            "reasons": self.reasons,
        }


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


def _lexical_side(
    store: UserStore, query: str, config: RetrievalConfig, named_days: Sequence[date] = ()
) -> list[tuple[int, float]]:
    """The lexical side's ranked matches (id, BM25). One search gives both the candidates (its
    best ``candidates``) and the lexical scores of the neighbours that join the pool (its best
    ``lexical_depth``): asking for given rows' scores costs a full pass over each query word's
    matches per row. Exact while fewer than ``lexical_depth`` memories match; past that, a
    neighbour beyond them scores 0."""
    terms = query_terms(query, named_days)
    hits: list[SearchHit] = store.lexical(terms, max(config.candidates, config.lexical_depth)) if terms else []
    return [(h.id, h.score) for h in hits]


@dataclass
class _Pool:
    """What one retrieval works on: the candidates, their neighbours, and the raw scores."""

    qvec: np.ndarray
    named_days: list[date]
    records: dict[int, MemoryRecord]  # the candidates that may become hits
    members: dict[int, MemoryRecord]  # the candidates and their neighbours
    dense: dict[int, float]  # cosine to the query (the better of message and reply)
    lexical: dict[int, float]  # BM25 (0 when not among the lexical side's matches)


def _search_sides(
    store: UserStore,
    embedder: Embedder,
    query: str,
    config: RetrievalConfig,
    query_vector: np.ndarray | None,
    named_days: Sequence[date],
) -> tuple[np.ndarray, list[int], list[tuple[int, float]]]:
    """Phase 1: the query vector, the dense side's candidates (memory ids whose message or reply
    vector is among the nearest) and the lexical side's ranked matches.

    The lexical side does not need the query vector: it runs on another thread while the query is
    embedded (both leave Python's lock: SQLite while it searches, the embedder in its C / PyTorch
    engine), so that on two cores a turn waits for the slower of the two, not for both."""
    pending = _workers().submit(_lexical_side, store, query, config, named_days) if query_vector is None else None
    qvec = embed_query(embedder, query) if query_vector is None else query_vector
    ranked = pending.result() if pending is not None else _lexical_side(store, query, config, named_days)
    found: list[int] = []
    # a turn can be found twice (its message and its reply): ask for twice the candidates
    for hit in store.dense(qvec, config.candidates * (2 if config.use_replies else 1)):
        if hit.side == Side.REPLY and not config.use_replies:
            continue
        if hit.id not in found:
            found.append(hit.id)
    return qvec, found[: config.candidates], ranked


def _allowed(rec: MemoryRecord, config: RetrievalConfig) -> bool:
    return rec.kind in config.kinds and (
        rec.state == State.ACTIVE or (rec.state == State.ARCHIVED and config.archive_penalty is not None)
    )


def _gather(
    store: UserStore,
    dense: list[int],
    ranked: list[tuple[int, float]],
    named_days: list[date],
    config: RetrievalConfig,
) -> tuple[dict[int, MemoryRecord], dict[int, MemoryRecord]]:
    """Phase 2: the candidates' records (dense, lexical and the days the query names) and the pool:
    the candidates plus the neighbouring turns of candidate turns, whose scores they share."""
    ids = set(dense) | {i for i, _ in ranked[: config.candidates]}
    if named_days:
        ids |= {r.stored_id for r in store.records(days=named_days)}
    records = {i: r for i, r in store.get_many(ids).items() if _allowed(r, config)}
    places = {(r.day, r.position + d) for r in records.values() if r.kind == Kind.TURN for d in (-1, 1)}
    pool = dict(records)
    for rec in store.turns_at(sorted(places)):
        pool.setdefault(rec.stored_id, rec)
    return records, pool


def _dense_sides(
    store: UserStore, qvec: np.ndarray, pool: dict[int, MemoryRecord], config: RetrievalConfig
) -> tuple[dict[int, float], dict[int, float]]:
    """Phase 3: the cosine of every pool member's message (or text) and, for turns, of its reply,
    from the exact stored vectors (the index may be approximate; -1 where a turn has no reply
    vector yet)."""
    ids = list(pool)
    own = dict(zip(ids, (store.vectors(ids) @ qvec).tolist())) if ids else {}
    reply: dict[int, float] = {}
    if config.use_replies:
        turns = [i for i in ids if pool[i].kind == Kind.TURN and pool[i].response.strip()]
        if turns:
            vecs = store.vectors(turns, column="reply_vector")
            sims = (vecs @ qvec).tolist()
            reply = {i: s for i, s, v in zip(turns, sims, vecs) if v.any()}
    return own, reply


def _combine_dense(
    own: dict[int, float], reply: dict[int, float], config: RetrievalConfig
) -> tuple[dict[int, float], dict[int, float]]:
    """A pool member's dense similarity (raw, for the reasons) and its dense score in [0, 1]."""
    raw = {i: max(s, reply.get(i, -1.0)) for i, s in own.items()}
    w = config.reply_share
    mixed = {i: (1 - w) * s + w * reply[i] if i in reply else s for i, s in own.items()}
    return raw, _scale(mixed)


def _base_scores(
    pool: dict[int, MemoryRecord], dense_s: dict[int, float], lexical: dict[int, float], config: RetrievalConfig
) -> dict[int, float]:
    """Phase 4: each pool member's base score: its dense score and its lexical score (scaled to
    [0, 1] over the pool), mixed."""
    lex_s = _scale({i: lexical.get(i, 0.0) for i in pool})
    return {i: config.dense_weight * dense_s.get(i, 0.0) + config.lexical_weight * lex_s[i] for i in pool}


def _reasons(rec: MemoryRecord, dense_s: float, dense: float, lexical: float, context: bool, on_day: bool) -> list[str]:
    reasons = []
    if dense_s >= 0.5:
        reasons.append(f"similar in meaning ({dense:.2f})")
    if lexical:
        reasons.append("shares words with your message")
    if context:
        reasons.append("continues a conversation about this")
    if on_day:
        reasons.append(f"from {rec.day.isoformat()}, the day you named")
    if rec.state == State.ARCHIVED:
        reasons.append("had faded; brought back by a strong cue")
    return reasons or ["closest of what is remembered"]


def _rank(
    p: _Pool,
    base: dict[int, float],
    dense_s: dict[int, float],
    policy: ForgettingPolicy,
    now: datetime,
    config: RetrievalConfig,
) -> list[Hit]:
    """Phase 5: a candidate's score is its base, plus shares of its neighbours' (a conversation
    runs over several turns), plus the bonus of a named day and a small retention term, less the
    archive's penalty for a memory of the second tier."""
    at = {(r.day, r.position): r.id for r in p.members.values() if r.kind == Kind.TURN}
    hits: list[Hit] = []
    for rid, rec in p.records.items():
        score = base[rid]
        context = False
        if rec.kind == Kind.TURN:
            prev, nxt = at.get((rec.day, rec.position - 1)), at.get((rec.day, rec.position + 1))
            if prev is not None:
                score += config.previous_weight * base[prev]
            if nxt is not None:
                score += config.next_weight * base[nxt]
            context = prev is not None and base[prev] > base[rid]
        retention = policy.retention(rec, now)
        on_day = rec.day in p.named_days
        score += (config.date_bonus if on_day else 0.0) + config.retention_weight * retention
        if rec.state == State.ARCHIVED:
            score -= config.archive_penalty or 0.0
        hits.append(
            Hit(
                rec,
                score,
                p.dense.get(rid, 0.0),
                p.lexical.get(rid, 0.0),
                retention,
                on_day,
                _reasons(rec, dense_s.get(rid, 0.0), p.dense.get(rid, 0.0), p.lexical.get(rid, 0.0), context, on_day),
            )
        )
    hits.sort(key=lambda h: (-h.score, -h.record.stored_id))
    return hits


def retrieve(
    store: UserStore,
    embedder: Embedder,
    policy: ForgettingPolicy,
    query: str,
    now: datetime,
    config: RetrievalConfig = RetrievalConfig(),
    *,
    k: int | None = None,
    query_vector: np.ndarray | None = None,
) -> list[Hit]:
    """The best ``k`` memories for ``query`` at ``now``, each with its scores and reasons."""
    k = config.k if k is None else k
    if not query.strip() or k <= 0:
        return []
    named_days: list[date] = []
    if config.use_dates:
        named_days = days_in_query(query, now.date())
        named_days += [d for d in conversation_days(query, store.days, now.date()) if d not in named_days]
    qvec, dense_ids, ranked = _search_sides(store, embedder, query, config, query_vector, named_days)
    records, members = _gather(store, dense_ids, ranked, named_days, config)
    deeper = dict(ranked)
    lexical = {i: deeper[i] for i in members if i in deeper}
    raw, dense_s = _combine_dense(*_dense_sides(store, qvec, members, config), config)
    p = _Pool(qvec, named_days, records, members, raw, lexical)
    base = _base_scores(members, dense_s, lexical, config)
    return _rank(p, base, dense_s, policy, now, config)[:k]
