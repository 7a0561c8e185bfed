"""Hybrid retrieval over one user's active memories.

Candidates come from three places: the store's dense search (cosine of e5 / MiniLM vectors), its
lexical search (BM25 over jieba / English word tokens) and, when the query names days ("on May
4th", "前天") or conversations ("our first conversation", "上次我们聊": the user's first day, the
latest before today), every active memory of those days. A candidate's base score mixes its dense
similarity and lexical score, each scaled to [0, 1] over the candidates. A dialogue turn then
takes a share of its neighbours' base scores (the turn before and after it on the same day):
conversations run over several turns, and "I loved Gulangyu Island" answers a question about
Xiamen that the turn before it named. A memory on a day the query names gets a bonus. How
fresh a memory is does not order the hits: the forgetting curve acts through a memory's state
(an archived one pays the archive's penalty) and its tier in the prompt, and the cue alone ranks
what is active. Each hit carries its scores, its retention and the reasons, for the UI.
Retrieval never reinforces.

A turn's dense similarity is a weighted mean of its two vectors' cosines: the user's message
(two thirds) and the companion's reply (one third), so that both sides of an exchange count but
neither a long, generic reply ("here are some tips...") nor a short message decides alone; the
message weighs more because it is the person's own words, what a companion is later asked about
(in a conversation between two people, the reply is the second speaker's). A turn whose reply has
no vector yet counts its message only.
The two sides weigh the same in the base score: a
question's words are a sharper cue than its meaning on conversations between two people
(third-person questions, names, rare nouns), and the dense side carries paraphrase (the
weights' measurements are in docs/benchmarks.md, under "Retrieval quality").
Archived memories are the second tier: they take part, less a penalty, so that only a strong cue
brings one back (recognition rather than recall); the turn that uses it reinforces it, which
makes it active again. A turn that refers to another day ("yesterday", "last Friday") carries
that day in the lexical table, so a question naming the day finds it too.

The conversation before the message (today's talk) is a second cue, dense and lexical
(``_talk_vector``, ``_talk_terms``), weaker than the message.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Callable, Sequence

import numpy as np

from . import bm25
from .dates import conversation_days, days_in_query
from .embedders import Embedder, embed_query, embed_replies, embed_turns, normalise
from .forgetting import ForgettingPolicy
from .lexical import Tokenizer
from .links import CONVERSATION, ENTITY, SUMMARY, Spread, SpreadConfig, spread
from .message import Message
from .records import Kind, MemoryRecord, State
from .stores.base import Edge, PoolRows, SearchHit, Side, UserStore


@dataclass(frozen=True)
class RetrievalConfig:
    k: int = 5
    candidates: int = 40  # from each of the dense and lexical sides
    lexical_depth: int = 400  # lexical scores kept for the pool (neighbours); see _lexical_side()
    dense_weight: float = 0.5  # the lexical side gets 1 - dense_weight
    previous_weight: float = 0.4  # share of the previous turn's base score
    next_weight: float = 0.2  # share of the next turn's base score
    date_bonus: float = 1.0  # added when a memory is on a day the query names
    # a share of a memory's retention (R in [0, 1]) added to its score; 0: the cue alone orders
    # the active memories, and fading acts through the states and tiers. A share reorders near-ties
    # by what was recalled lately, which as used measured nothing either way, while it made the
    # ranking without forgetting one the curve still reordered (docs/benchmarks-journal.md, "The
    # cue orders, the curve archives")
    retention_weight: float = 0.0
    use_dates: bool = True
    use_replies: bool = True  # a turn's dense similarity also looks at its reply's vector
    reply_share: float = 1 / 3  # the reply's share of a turn's mean; the message has the rest
    archive_penalty: float | None = 0.3  # taken off an archived memory's score; None: never retrieved
    # the archive answers a strong cue: an archived memory pays the penalty in proportion to how
    # far its base score lies below a bar (none at or above it, all of it ``archive_margin``
    # below); False: a flat penalty. The bar (``archive_bar``): "prompt", the base score of the
    # k-th best active memory of the pool (k: ``k`` of this config, the prompt's), so that an
    # archived memory the cue matches as well as what fills the prompt is recognised; "best", the
    # pool's best base score (only the best match goes free)
    graded_archive: bool = True
    archive_margin: float = 0.2
    archive_bar: str = "prompt"
    kinds: tuple[Kind, ...] = (Kind.TURN, Kind.DAILY_EVENTS)
    # the conversation so far as a second cue (see _talk_vector): its share of the dense query,
    # how fast an earlier line's weight falls (per line back), and the companion's lines' weight
    talk_weight: float = 0.5
    talk_decay: float = 0.8
    talk_reply_share: float = 0.5
    # the conversation's words: the lexical side's share that goes to a second BM25 query over
    # the user's latest lines (this many of them); half, as the talk's vector has half the dense
    # side: the message weighs as much as all the talk before it, on each side
    talk_lexical_weight: float = 0.5
    talk_lexical_turns: int = 3
    talk_lexical_terms: int = 24
    # how the dense and lexical sides are weighed: "fixed" (``dense_weight`` each query), or the
    # lexical side's weight scaled by how much its evidence says for this query, the dense side
    # taking the rest (``_lexical_evidence``): "evidence" (its best match against a full match),
    # "vocabulary" (the share of the query's words that memory holds at all). Fixed: with e5 as
    # the one dense reader, both lowered recall on every measured set (docs/benchmarks-journal.md,
    # "Memory as a network")
    fusion: str = "fixed"
    # memory as a network (``memory/links.py``): the first hits pass activation along their links
    # (entities, a summary's turns, a conversation's), which is added to a memory's score at
    # ``link_weight``; the memories it reaches join the pool, scored by every cue as the others.
    # On: it lifted recall on LoCoMo and MADial zh, moved the rest within a question or two
    # (docs/benchmarks-journal.md, "Memory as a network")
    link_weight: float = 0.3
    spread: SpreadConfig = SpreadConfig()
    # a second reader (``MemoryBank.second``: USE multilingual v3, another model's reading of the
    # same words) is asked where the message's words say little: where the lexical side's evidence
    # ("evidence", whatever ``fusion`` weighs the sides by) is below this bar, the pool's dense
    # score is the rank fusion of the two readers' (``_with_second``); elsewhere the embedder
    # reads alone. An associative cue ("I'm performing magic at the party" for a Christmas on
    # stage) shares few words with what it should bring up, and there each reader finds what
    # the other misses; a factual question's words find its memory, and a second ranking only
    # reorders near-ties, as it does among the memories of a day the message names ("our first
    # conversation"), which the day anchors. 0: never (docs/benchmarks-journal.md, "The second
    # reader, landed")
    second_reader_below: float = 0.4

    @property
    def lexical_weight(self) -> float:
        return 1.0 - self.dense_weight


@dataclass(frozen=True)
class TalkLine:
    """One line of the conversation so far (today's talk), oldest first in a ``talk`` sequence:
    who said it, what, and its vector when one is stored already (a stored turn's message or reply
    vector); a line without one is embedded as a stored turn's would be."""

    role: str  # "user" or "assistant"
    text: str
    vector: np.ndarray | None = None


@dataclass
class Hit:
    record: MemoryRecord
    score: float
    dense: float = 0.0
    lexical: float = 0.0
    retention: float = 1.0
    on_named_day: bool = False
    reasons: list[str] = field(default_factory=list)  # each a Said (message.py): its id and values
    # the cue that found it: "message", "conversation" (the talk so far), "neighbour" (the turn
    # next to it), "named day", "link" (a first hit's links)
    cue: str = "message"
    # the link that passed it the most activation, when it was reached along one
    link: Edge | None = None
    # the side of the search that gave its base score the most: "dense" or "lexical"
    side: str = ""
    # where the memory stands: core, active, long_term or archive (``EbbinghausPolicy.tier``)
    tier: str = "active"

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
            "cue": self.cue,
            "side": self.side,
            "tier": self.tier,
            "link": None
            if self.link is None
            else {"from": self.link.src, "kind": self.link.kind, "through": self.link.label or None},
        }


def _lexical_side(store: UserStore, terms: Sequence[str], config: RetrievalConfig) -> list[tuple[int, float]]:
    """A lexical side's ranked matches (id, BM25). One search gives both the candidates (its
    best ``candidates``) and the lexical scores of the neighbours that join the pool (its best
    ``lexical_depth``): asking for given rows' scores costs a full pass over each query word's
    matches per row. Exact while fewer than ``lexical_depth`` memories match; past that, a
    neighbour beyond them scores 0."""
    hits: list[SearchHit] = store.lexical(terms, max(config.candidates, config.lexical_depth)) if terms else []
    return [(h.id, h.score) for h in hits]


@dataclass
class _Pool:
    """What one retrieval works on: the candidates, their neighbours, and the raw scores."""

    named_days: list[date]
    records: dict[int, MemoryRecord]  # the candidates that may become hits
    members: _Members  # the candidates and their neighbours
    dense: dict[int, float]  # cosine to the query (the better of message and reply)
    lexical: dict[int, float]  # BM25 (0 when not among the lexical side's matches)


# a lexical side's ranked matches, its candidates (with every memory of the days the query names,
# for the message's side) and the pool's rows of them
_Part = tuple[list[tuple[int, float]], set[int], PoolRows]


@dataclass
class _Sides:
    """What the search sides found: the cues (the message's vector, then the conversation's if
    any), the dense candidates, the lexical matches of the message and of the conversation's
    words, and the pool's rows of every candidate but the dense side's."""

    cues: np.ndarray
    dense: list[int]
    ranked: list[tuple[int, float]]
    talk_ranked: list[tuple[int, float]]
    first: set[int]
    rows: PoolRows
    # how much the lexical side's evidence says (``_lexical_evidence``): its share of the base score
    lexical_evidence: float = 1.0
    # the second reader's cues (the message's vector, then the conversation's if any) where it is
    # asked (``RetrievalConfig.second_reader_below``), else None; and its vectors of the pool's
    # members read so far (own, reply: a second scoring after the links reads only those it adds)
    second_cues: np.ndarray | None = None
    second_read: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _talk_terms(tokenizer: Tokenizer, talk: Sequence[TalkLine], query: str, config: RetrievalConfig) -> list[str]:
    """The words of the user's latest ``talk_lexical_turns`` lines that the message does not have,
    newest first, at most ``talk_lexical_terms`` (a long talk's words would make its search slow
    and diffuse).

    The user's lines only: the memories are the user's, and the companion's lines are its own
    words (encouragement, questions, advice) that echo the user's and add its own; the dense
    side still hears them, at ``talk_reply_share``. Of each line, the words of its situation
    (``Tokenizer.situation_terms``: in Chinese, the nouns and verbs, not the feelings)."""
    if config.talk_lexical_turns <= 0:
        return []
    lines = [line.text for line in talk if line.role == "user"][-config.talk_lexical_turns :]
    own = set(tokenizer.query_terms(query))
    terms: list[str] = []
    for text in lines[::-1]:
        terms += [t for t in tokenizer.situation_terms(text) if t not in own and t not in terms]
    return terms[: config.talk_lexical_terms]


def _side_rows(
    store: UserStore,
    terms: Sequence[str],
    named_days: Sequence[date],
    config: RetrievalConfig,
    cues: Callable[[], np.ndarray],
) -> _Part:
    """Phase 2a, for one lexical side: its ranked matches, then the pool's rows of its
    candidates and of every memory of ``named_days``, which need no query vector (``cues`` may
    still be in the making: the store waits for them where it needs them)."""
    ranked = _lexical_side(store, terms, config)
    ids = {i for i, _ in ranked[: config.candidates]}
    if named_days:
        ids |= {r.stored_id for r in store.records(days=named_days)}
    return ranked, ids, store.pool(ids, cues)


def _message_rows(
    store: UserStore,
    tokenizer: Tokenizer,
    query: str,
    named_days: Sequence[date],
    config: RetrievalConfig,
    cues: Callable[[], np.ndarray],
) -> _Part:
    """``_side_rows`` of the message's words and the days it names."""
    return _side_rows(store, tokenizer.query_terms(query, named_days), named_days, config, cues)


def _lexical_evidence(
    store: UserStore,
    tokenizer: Tokenizer,
    query: str,
    config: RetrievalConfig,
    named_days: Sequence[date],
    ranked: Sequence[tuple[int, float]],
) -> float:
    """How much the lexical side's evidence says, in [0, 1] (1 with a fixed fusion). "evidence":
    its best match's BM25 over what a memory holding every word of the query once scores (at the
    mean length: each word's inverse document frequency); "vocabulary": the share of the query's
    words that any memory holds. A query whose words a memory holds few of, or that memory never
    holds at all (an associative cue: "I'm performing magic at the party" for a Christmas on
    stage), has a weak lexical side, and the dense side decides more."""
    if config.fusion == "fixed":
        return 1.0
    terms = tokenizer.query_terms(query, named_days)
    if not terms or not ranked:
        return 0.0
    docs, holding = store.documents_with(terms)
    if config.fusion == "vocabulary":
        return sum(1 for n in holding if n) / len(terms)
    ceiling = sum(bm25.idf(docs, n) for n in holding)
    return min(1.0, ranked[0][1] / ceiling) if ceiling > 0 else 0.0


def _talk_rows(
    store: UserStore,
    tokenizer: Tokenizer,
    talk: Sequence[TalkLine],
    query: str,
    config: RetrievalConfig,
    cues: Callable[[], np.ndarray],
) -> _Part:
    """``_side_rows`` of the conversation's words (``_talk_terms``: a tagger's work for Chinese)."""
    return _side_rows(store, _talk_terms(tokenizer, talk, query, config), (), config, cues)


def _search_sides(
    store: UserStore,
    tokenizer: Tokenizer,
    embedder: Embedder,
    query: str,
    config: RetrievalConfig,
    query_vector: np.ndarray | None,
    named_days: Sequence[date],
    talk: Sequence[TalkLine] = (),
    workers: Executor | None = None,
    second: Embedder | None = None,
) -> _Sides:
    """Phase 1: the query vector, the conversation's vector (phase 1b), the dense side's
    candidates (memory ids whose message or reply vector is among the nearest to the two cues'
    mix, ``_cue_mix``) and the lexical side's ranked matches, of the message and of the
    conversation's latest words, each with its pool's rows (``_side_rows``).

    The lexical sides do not need the query vector: with ``workers``, they run on other threads
    while the query is embedded (both leave Python's lock: the database while it searches, the
    embedder in one scripted PyTorch call, ``e5_network``), so that on two cores a turn waits
    for the slower of the two, not for both; their rows' cosines are worked out once the cues
    are there."""
    ready: Future[np.ndarray] = Future()
    talks = bool(talk) and config.talk_lexical_weight > 0
    pending: list[Future[_Part]] = []
    if workers is not None:
        pending.append(workers.submit(_message_rows, store, tokenizer, query, named_days, config, ready.result))
        if talks:
            pending.append(workers.submit(_talk_rows, store, tokenizer, talk, query, config, ready.result))
    try:
        qvec = embed_query(embedder, query) if query_vector is None else query_vector
        tvec = _talk_vector(embedder, talk, config)
    except BaseException as e:
        ready.set_exception(e)  # the workers waiting for the cues stop too
        raise
    cues = _cues(qvec, tvec)
    ready.set_result(cues)
    if workers is None:
        pending.append(_done(_message_rows(store, tokenizer, query, named_days, config, ready.result)))
        if talks:
            pending.append(_done(_talk_rows(store, tokenizer, talk, query, config, ready.result)))
    found: list[int] = []
    # a turn can be found twice (its message, its reply): ask for more hits than the candidates
    # wanted; the hits are read only until ``candidates`` turns are found
    asked = config.candidates * (2 if config.use_replies else 1)
    for hit in store.dense(_cue_mix(qvec, tvec, config), asked, distinct=config.candidates, helpers=workers):
        if hit.side == Side.REPLY and not config.use_replies or hit.id in found:
            continue
        if len(found) < config.candidates:
            found.append(hit.id)
    parts = [p.result() for p in pending]
    ranked = parts[0][0]
    talk_ranked = parts[1][0] if talks else []
    rows = parts[0][2]
    for part in parts[1:]:
        rows = rows.joined(part[2])
    evidence = _lexical_evidence(store, tokenizer, query, config, named_days, ranked)
    second_cues = None
    # a message that names its days is anchored by them, whatever its other words say
    if second is not None and config.second_reader_below > 0 and not named_days:
        said = evidence
        if config.fusion != "evidence":
            said = _lexical_evidence(store, tokenizer, query, replace(config, fusion="evidence"), named_days, ranked)
        if said < config.second_reader_below:
            # lines embedded anew (the stored vectors are the embedder's): kept by the reader
            lines = [TalkLine(line.role, line.text) for line in talk]
            second_cues = _cues(embed_query(second, query), _talk_vector(second, lines, config))
    first = set().union(*(p[1] for p in parts))
    return _Sides(cues, found, ranked, talk_ranked, first, rows, evidence, second_cues)


def _done(part: _Part) -> Future[_Part]:
    done: Future[_Part] = Future()
    done.set_result(part)
    return done


def _cues(qvec: np.ndarray, tvec: np.ndarray | None) -> np.ndarray:
    """The cues a pool is scored by: the message's vector, then the conversation's if any."""
    return np.stack([qvec, tvec]) if tvec is not None else qvec[None, :]


def _cue_mix(qvec: np.ndarray, tvec: np.ndarray | None, config: RetrievalConfig) -> np.ndarray:
    """The vector the dense index is searched with: the message's, leaning ``talk_weight``
    towards the conversation's (the message stays the strongest cue: a change of subject
    changes what is found). Scoring mixes the two cosines the same way (``_dense_scores``)."""
    if tvec is None:
        return qvec
    return normalise(((1 - config.talk_weight) * qvec + config.talk_weight * tvec)[None, :])[0]


def _talk_vector(embedder: Embedder, talk: Sequence[TalkLine], config: RetrievalConfig) -> np.ndarray | None:
    """Phase 1b: the conversation so far as one vector: a weighted mean of its lines' vectors.

    The newest exchange weighs most and each one before it ``talk_decay`` times less (a talk
    drifts: what was said ten lines ago is a weaker cue than the line before); the companion's
    lines weigh ``talk_reply_share`` of the user's (they echo and elaborate what the user
    raised). Lines whose vector is stored already (today's turns) cost nothing; the others are
    embedded as a stored turn's message or reply would be."""
    lines = [line for line in talk if line.vector is not None or line.text.strip()]
    if not lines or config.talk_weight <= 0:
        return None
    # one text per call: a single text runs on one thread, a batch would switch PyTorch's thread
    # count back and forth (slow when other processes hold the cores)
    vectors = [
        line.vector
        if line.vector is not None
        else (embed_turns if line.role == "user" else embed_replies)(embedder, [line.text])[0]
        for line in lines
    ]
    total = np.zeros_like(next(v for v in vectors if v is not None), dtype=np.float32)
    age = 0
    for line, vector in zip(reversed(lines), reversed(vectors)):
        if not vector.any():  # a stored reply whose vector is not made yet
            continue
        weight = config.talk_decay**age * (1.0 if line.role == "user" else config.talk_reply_share)
        total += weight * vector
        if line.role == "user":
            age += 1  # a user's line closes the exchange it opened (going back in time)
    return normalise(total[None, :])[0] if total.any() else None


def _allowed(rec: MemoryRecord, config: RetrievalConfig) -> bool:
    return rec.kind in config.kinds and (
        rec.state == State.ACTIVE or (rec.state == State.ARCHIVED and config.archive_penalty is not None)
    )


@dataclass
class _Members:
    """A pool's members: the candidates that may become hits, then the turns next to them, whose
    scores they share (read as places only: their words are never shown)."""

    ids: list[int]
    at: dict[tuple[date, int], int]  # the turns among them by (day, position)
    replied: set[int]  # the turns among them with a reply
    rows: PoolRows  # what the store read: their vectors


def _gather(
    store: UserStore,
    sides: _Sides,
    config: RetrievalConfig,
    linked: Sequence[int] = (),
    before: tuple[dict[int, MemoryRecord], _Members] | None = None,
) -> tuple[dict[int, MemoryRecord], _Members]:
    """Phase 2: the candidates' records (dense, lexical, the days the query names and those
    reached along links) and the pool: the candidates plus the neighbouring turns of candidate
    turns, whose scores they share. ``before``: what a first gathering gave (only what it lacks
    is read, and added to it)."""
    rows = sides.rows
    more = (set(sides.dense) | set(linked)) - sides.first
    if before is not None:
        rows = before[1].rows
        more -= set(rows.found)
    part = None
    if more:
        cues = sides.cues
        part = store.pool(more, lambda: cues)
        rows = rows.joined(part)
    if before is not None:
        return _gathered_more(before, part, rows, config)
    records = {i: r for i, r in rows.found.items() if _allowed(r, config)}
    places = {(r.day, r.position + d) for r in records.values() if r.kind == Kind.TURN for d in (-1, 1)}
    members = list(records)
    at = {(r.day, r.position): i for i, r in records.items() if r.kind == Kind.TURN}
    replied = {i for i, r in records.items() if r.kind == Kind.TURN and r.response.strip()}
    seen = set(records)
    for n in rows.beside:  # the neighbours of the candidates that may become hits
        if (n.day, n.position) in places and n.id not in seen:
            seen.add(n.id)
            members.append(n.id)
            at[(n.day, n.position)] = n.id
            if n.replied:
                replied.add(n.id)
    return records, _Members(members, at, replied, rows)


def _gathered_more(
    before: tuple[dict[int, MemoryRecord], _Members], part: PoolRows | None, rows: PoolRows, config: RetrievalConfig
) -> tuple[dict[int, MemoryRecord], _Members]:
    """``_gather``'s pool with the memories of ``part`` (read after it; ``rows``: all rows read)
    added: the same members as gathered at once, those before untouched (an order of members
    changes no score)."""
    records, old = before
    added = {i: r for i, r in (part.found.items() if part else ()) if i not in records and _allowed(r, config)}
    if not added:
        return records, _Members(old.ids, old.at, old.replied, rows)
    records = {**records, **added}
    members, at, replied = list(old.ids), dict(old.at), set(old.replied)
    seen = set(members)
    for i, r in added.items():
        if i not in seen:  # (a neighbour before: a candidate now)
            seen.add(i)
            members.append(i)
        if r.kind == Kind.TURN:
            at[(r.day, r.position)] = i
            if r.response.strip():
                replied.add(i)
    # the places next to those before are taken: their turns were read with them
    places = {(r.day, r.position + d) for r in added.values() if r.kind == Kind.TURN for d in (-1, 1)}
    for n in rows.beside:
        if (n.day, n.position) in places and n.id not in seen:
            seen.add(n.id)
            members.append(n.id)
            at[(n.day, n.position)] = n.id
            if n.replied:
                replied.add(n.id)
    return records, _Members(members, at, replied, rows)


def _scaled(values: np.ndarray) -> np.ndarray:
    """``values`` scaled to [0, 1] over the pool: the lowest 0, the highest 1; all alike (one
    candidate): nothing to tell them apart by, 1 where above 0."""
    if not len(values):
        return values
    low, top = values.min(), values.max()
    if top == low:
        return (values > 0).astype(np.float64)
    return (values - low) / (top - low)


def _dense_scores(members: _Members, cues: int, config: RetrievalConfig) -> tuple[np.ndarray, ...]:
    """Phase 3, over the pool's members in order (the stored vectors: the index may be
    approximate): each one's dense similarity, raw (the better of its message's (or text's)
    cosine with the message and its reply's: for the reasons); its dense score in [0, 1], of the
    cues' mix (the message's cosine and the conversation's, weighed as ``_cue_mix`` weighs them);
    and the conversation's own dense score in [0, 1] (for the cue a hit is credited to; empty with
    the message alone). A turn's cosine with a cue mixes its message's and its reply's, the reply
    weighing ``reply_share`` where the turn has a reply vector."""
    ids = members.ids
    n = len(ids)
    rows = np.fromiter((members.rows.row[i] for i in ids), dtype=np.int64, count=n)
    own_all, reply_all = members.rows.cosines
    own, reply = own_all[rows].astype(np.float64), reply_all[rows].astype(np.float64)
    mixed, has = _turn_mix(own, reply, members, config)
    raw = np.maximum(own[:, 0], np.where(has, reply[:, 0], -1.0)) if n else np.zeros(0)
    if cues == 1 or not n:
        return raw, _scaled(mixed[:, 0] if n else np.zeros(0)), np.zeros(0)
    return raw, _scaled(_cue_weighed(mixed, config)), _scaled(mixed[:, 1])


def _turn_mix(
    own: np.ndarray, reply: np.ndarray, members: _Members, config: RetrievalConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The members' cosines with each cue (``own``, ``reply``: (members, cues), reply NaN where a
    memory has no reply vector), a turn's message's and reply's mixed, the reply weighing
    ``reply_share`` where the turn has a reply (``use_replies``); and which members have one."""
    ids = members.ids
    has: np.ndarray = np.zeros(len(ids), dtype=bool)
    if config.use_replies and len(ids):
        has = ~np.isnan(reply[:, 0]) & np.fromiter((i in members.replied for i in ids), dtype=bool, count=len(ids))
    w = config.reply_share
    return np.where(has[:, None], (1 - w) * own + w * np.where(has[:, None], reply, 0.0), own), has


def _cue_weighed(mixed: np.ndarray, config: RetrievalConfig) -> np.ndarray:
    """The cues' cosines (``_turn_mix``) as one: the message's alone, or the message's and the
    conversation's weighed as ``_cue_mix`` weighs them."""
    if mixed.shape[1] == 1:
        return mixed[:, 0]
    t = config.talk_weight
    return (1 - t) * mixed[:, 0] + t * mixed[:, 1]


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank among ``values``, 1 for the highest (ties in their order)."""
    ranks = np.empty(len(values))
    ranks[np.argsort(-values, kind="stable")] = np.arange(1, len(values) + 1)
    return ranks


def _second_vectors(
    store: UserStore, read: dict[int, tuple[np.ndarray, np.ndarray]], ids: Sequence[int], dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """The second reader's (own, reply) vectors of ``ids`` (``UserStore.second_vectors``: NaN
    where none; one of another width counts as none), those not in ``read`` read and kept there."""
    missing = [i for i in ids if i not in read]
    if missing:
        own, reply = store.second_vectors(missing)
        read.update({i: (own[k], reply[k]) for k, i in enumerate(missing)})
    none: np.ndarray = np.full(dim, np.nan, dtype=np.float32)
    return (
        np.stack([v if len(v) == dim else none for v in (read[i][0] for i in ids)]),
        np.stack([v if len(v) == dim else none for v in (read[i][1] for i in ids)]),
    )


def _with_second(
    vectors: tuple[np.ndarray, np.ndarray],
    members: _Members,
    dense_s: np.ndarray,
    cues: np.ndarray,
    config: RetrievalConfig,
) -> np.ndarray:
    """The pool's dense scores (``_dense_scores``, the embedder's) fused with the second reader's
    (``vectors``: the members' own and reply vectors, NaN where none, of the cues' width; ``cues``:
    its cues, mixed as the embedder's are): the reciprocal ranks of the two readings, 1/(60 + rank) each (the
    constant of Cormack et al.'s fusion), scaled over the pool. Ranks, not scores: the two
    models' cosines live on different scales. A member without the second reader's vector yet
    (stored a moment ago) takes the embedder's rank for it: one reading, counted twice."""
    own, reply = vectors
    lacking = np.isnan(own[:, 0])
    if lacking.all():
        return dense_s
    mixed, _ = _turn_mix((own @ cues.T).astype(np.float64), (reply @ cues.T).astype(np.float64), members, config)
    score = _cue_weighed(mixed, config)
    first = _ranks(dense_s)
    second = np.where(lacking, first, _ranks(np.where(lacking, -np.inf, score)))
    return _scaled(1 / (60 + first) + 1 / (60 + second))


def _base_scores(
    ids: Sequence[int],
    dense_s: np.ndarray,
    lexical: dict[int, float],
    config: RetrievalConfig,
    talk_lexical: dict[int, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Phase 4: each pool member's base score (in ``ids`` order): its dense score and its
    lexical score (scaled to [0, 1] over the pool), mixed; the lexical score of the
    conversation's words, when there are any, takes ``talk_lexical_weight`` of the lexical side.
    Also what those words give it (their share of the lexical side, scaled on their own; empty
    without them)."""
    lex_s = _scaled(np.array([lexical.get(i, 0.0) for i in ids], dtype=np.float64))
    from_words = np.zeros(0)
    if talk_lexical:
        w = config.talk_lexical_weight
        talk_s = _scaled(np.array([talk_lexical.get(i, 0.0) for i in ids], dtype=np.float64))
        from_words = config.lexical_weight * w * talk_s
        lex_s = (1 - w) * lex_s + w * talk_s
    return config.dense_weight * dense_s + config.lexical_weight * lex_s, from_words


WHY_LINK_ENTITY = Message("why.link_entity", en="linked to #{id} through '{what}'", zh="通过“{what}”和 #{id} 相连")
WHY_LINK_SUMMARY = Message(
    "why.link_summary",
    en="linked to #{id}: that day's summary and what it draws on",
    zh="和 #{id} 相连：那天的总结和它所依据的对话",
)
WHY_LINK_CONVERSATION = Message(
    "why.link_conversation", en="linked to #{id}: the same conversation", zh="和 #{id} 相连：同一段对话"
)
WHY_LINK = Message("why.link", en="linked to #{id}", zh="和 #{id} 相连")


def link_reason(edge: Edge) -> str:
    """Why a memory reached along a link was remembered: the memory that passed it the most, and
    through what ("linked to #12 through 'Mei'")."""
    if edge.kind == ENTITY:
        return WHY_LINK_ENTITY(id=str(edge.src), what=edge.label)
    if edge.kind == SUMMARY:
        return WHY_LINK_SUMMARY(id=str(edge.src))
    if edge.kind == CONVERSATION:
        return WHY_LINK_CONVERSATION(id=str(edge.src))
    return WHY_LINK(id=str(edge.src))


# why a memory was retrieved, as the page, the API and the footnote say it
WHY_CONVERSATION = Message("why.conversation", en="fits the conversation so far", zh="和到目前为止的对话相符")
WHY_SIMILAR = Message("why.similar", en="similar in meaning ({x})", zh="意思相近（{x}）")
WHY_WORDS = Message("why.words", en="shares words with your message", zh="和你的话有相同的词")
WHY_CONTEXT = Message("why.context", en="continues a conversation about this", zh="接着同一段对话")
WHY_DAY = Message("why.day", en="from {day}, the day you named", zh="来自你提到的那天（{day}）")
WHY_ARCHIVED = Message("why.archived", en="had faded; brought back by a strong cue", zh="曾经淡忘；被强烈的提示唤起")
WHY_CLOSEST = Message("why.closest", en="closest of what is remembered", zh="记得的内容里最接近的")


def _reasons(
    rec: MemoryRecord,
    dense_s: float,
    dense: float,
    lexical: float,
    context: bool,
    on_day: bool,
    cue: str,
    link: Edge | None = None,
) -> list[str]:
    reasons: list[str] = []
    if link is not None:
        reasons.append(link_reason(link))
    if cue == "conversation":
        reasons.append(WHY_CONVERSATION())
    elif dense_s >= 0.5:
        reasons.append(WHY_SIMILAR(x=f"{dense:.2f}"))
    if lexical:
        reasons.append(WHY_WORDS())
    if context:
        reasons.append(WHY_CONTEXT())
    if on_day:
        reasons.append(WHY_DAY(day=rec.day.isoformat()))
    if rec.state == State.ARCHIVED:
        reasons.append(WHY_ARCHIVED())
    return reasons or [WHY_CLOSEST()]


def _rank(
    p: _Pool,
    base: dict[int, float],
    dense_s: dict[int, float],
    parts: dict[str, dict[int, float]],  # the part of each base score each cue gave
    policy: ForgettingPolicy,
    now: datetime,
    config: RetrievalConfig,
    k: int,
    via: dict[int, Edge] | None = None,
    side: dict[int, str] | None = None,
) -> list[Hit]:
    """Phase 5: a candidate's score is its base, plus shares of its neighbours' (a conversation
    runs over several turns), plus the bonus of a named day and the retention term (none by
    default: ``retention_weight``), less the archive's penalty for a memory of the second tier.
    Each of the best ``k`` is credited to the cue that gave it the most of its score; ``via``:
    the link that passed each memory reached along one the most activation (said among its
    reasons)."""
    at = p.members.at
    scored: list[tuple[float, int, float, bool, float, bool]] = []
    best = max(base.values(), default=0.0)
    bar = best
    if config.archive_bar == "prompt":
        active = sorted((base[i] for i, r in p.records.items() if r.state == State.ACTIVE), reverse=True)
        bar = active[min(config.k, len(active)) - 1] if active else best
    # each memory's score before its retention term, which adds ``retention_weight`` x a retention
    # in [0, 1] (``ForgettingPolicy.retention``); the named day's bonus and the archive's penalty
    ahead: list[tuple[float, int, bool, float, bool, float, float]] = []
    for rid, rec in p.records.items():
        score = base[rid]
        context = False
        shared = 0.0
        if rec.kind == Kind.TURN:
            prev, nxt = at.get((rec.day, rec.position - 1)), at.get((rec.day, rec.position + 1))
            if prev is not None:
                shared += config.previous_weight * base[prev]
            if nxt is not None:
                shared += config.next_weight * base[nxt]
            score += shared
            context = prev is not None and base[prev] > base[rid]
        on_day = rec.day in p.named_days
        penalty = 0.0
        if rec.state == State.ARCHIVED:
            weak = min(1.0, max(0.0, bar - base[rid]) / config.archive_margin) if config.graded_archive else 1.0
            penalty = (config.archive_penalty or 0.0) * weak
        ahead.append((score, rid, on_day, shared, context, config.date_bonus if on_day else 0.0, penalty))
    # a memory whose score could not reach the k-th best's with all of its retention term is not
    # among the hits, and its retention is not worked out (its sort is read from its words: the
    # costliest part of a pool member's rank); the margin keeps float rounding out of it
    w = config.retention_weight
    floor = -math.inf
    if w >= 0 and len(ahead) > k:
        floor = sorted((s + bonus - penalty for s, _, _, _, _, bonus, penalty in ahead), reverse=True)[k - 1] - 1e-9
    for score, rid, on_day, shared, context, bonus, penalty in ahead:
        if score + bonus + w - penalty < floor:
            continue
        rec = p.records[rid]
        retention = policy.retention(rec, now)
        score += bonus + w * retention
        if rec.state == State.ARCHIVED:
            score -= penalty
        scored.append((score, rid, retention, on_day, shared, context))
    # the hits (their cues and reasons) of the best k only: a pool has a hundred candidates or more
    scored.sort(key=lambda s: (-s[0], -s[1]))
    hits: list[Hit] = []
    for score, rid, retention, on_day, shared, context in scored[:k]:
        rec = p.records[rid]
        cue = max(
            [*((name, part.get(rid, 0.0)) for name, part in parts.items()), ("neighbour", shared)], key=lambda c: c[1]
        )[0]
        cue = "named day" if on_day else cue
        dense, lexical = p.dense.get(rid, 0.0), p.lexical.get(rid, 0.0)
        link = (via or {}).get(rid)
        reasons = _reasons(rec, dense_s.get(rid, 0.0), dense, lexical, context, on_day, cue, link)
        hits.append(
            Hit(
                rec,
                score,
                dense,
                lexical,
                retention,
                on_day,
                reasons,
                cue,
                link,
                (side or {}).get(rid, ""),
                policy.tier(rec, retention),
            )
        )
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
    talk: Sequence[TalkLine] = (),
    workers: Executor | None = None,
    tokenizer: Tokenizer,
    second: Embedder | None = None,
) -> list[Hit]:
    """The best ``k`` memories for ``query`` at ``now``, each with its scores and reasons.
    ``talk``: the conversation before ``query`` (today's turns), oldest first, a second cue.
    ``workers``: where the lexical searches run beside the query's embedding (the bank's pool;
    without one they run in turn). ``tokenizer``: the one ``store``'s lexical documents were made
    with (the bank's). ``second``: the second reader, whose vectors the store holds beside the
    embedder's (``RetrievalConfig.second_reader_below``)."""
    k = config.k if k is None else k
    if not query.strip() or k <= 0:
        return []
    named_days: list[date] = []
    if config.use_dates:
        named_days = days_in_query(query, now.date())
        named_days += [d for d in conversation_days(query, store.days, now.date()) if d not in named_days]
    sides = _search_sides(store, tokenizer, embedder, query, config, query_vector, named_days, talk, workers, second)
    scored = _score_pool(store, sides, named_days, config)
    via: dict[int, Edge] = {}
    if config.link_weight > 0:
        scored, via = _spread_links(store, sides, named_days, config, scored)
    return _rank(scored.pool, scored.base, scored.dense_s, scored.parts, policy, now, config, k, via, scored.side)


def _spread_links(
    store: UserStore, sides: _Sides, named_days: list[date], config: RetrievalConfig, scored: _Scored
) -> tuple[_Scored, dict[int, Edge]]:
    """Phase 4b: spreading activation (``memory/links.py``). The pool's best by their base scores
    pass activation along their links; what it reaches outside the pool joins it, the most
    activated first and ``SpreadConfig.join`` at most (read and scored by every cue as the rest: a
    linked memory is found by what it says too), and each memory's
    activation is added to its score at ``link_weight`` (its part credited to the cue "link"). A
    summary that hangs on superseded turns keeps a share of its score (``SpreadConfig.damp``)."""
    sc = config.spread
    first = {i: scored.base[i] for i in scored.pool.records}
    reached: Spread = spread(lambda ids: store.links(ids, max_share=sc.max_share, limit=sc.fan_out), first, sc)
    if not reached.activation and not reached.damped:
        return scored, {}
    outside = [i for i in reached.activation if i not in scored.pool.records]
    new = sorted(outside, key=lambda i: (-reached.activation[i], i))[: max(sc.join, 0)]
    if new:
        scored = _score_pool(store, sides, named_days, config, linked=new, before=scored.pool)
    records = scored.pool.records
    lift = {i: config.link_weight * a for i, a in reached.activation.items() if i in records}
    base = {i: b * reached.damped.get(i, 1.0) + lift.get(i, 0.0) for i, b in scored.base.items()}
    parts = {**scored.parts, "link": lift}
    via = {i: e for i, e in reached.via.items() if i in lift}
    return replace(scored, base=base, parts=parts), via


@dataclass
class _Scored:
    """A pool scored: its base scores, each cue's part of them, and the side of the search that
    gave each the most ("dense", meaning, or "lexical", words)."""

    pool: _Pool
    base: dict[int, float]
    dense_s: dict[int, float]
    parts: dict[str, dict[int, float]]
    side: dict[int, str]


def _score_pool(
    store: UserStore,
    sides: _Sides,
    named_days: list[date],
    config: RetrievalConfig,
    linked: Sequence[int] = (),
    before: _Pool | None = None,
) -> _Scored:
    """Phases 2-4: the pool gathered and read (with the memories reached along ``linked``;
    ``before``: the pool before them, whose rows are not read again), its base scores by every
    cue."""
    if sides.lexical_evidence < 1.0:
        # the lexical side weighs what its evidence says for this query, the dense side the rest
        config = replace(config, dense_weight=1.0 - config.lexical_weight * sides.lexical_evidence)
    records, members = _gather(
        store, sides, config, linked, None if before is None else (before.records, before.members)
    )
    ids = members.ids
    lexical = _scores_of(sides.ranked, ids)
    talk_lexical = _scores_of(sides.talk_ranked, ids)
    raw, dense_s, talk_dense = _dense_scores(members, len(sides.cues), config)
    if sides.second_cues is not None and len(ids):
        vectors = _second_vectors(store, sides.second_read, ids, sides.second_cues.shape[1])
        dense_s = _with_second(vectors, members, dense_s, sides.second_cues, config)
    base, from_words = _base_scores(ids, dense_s, lexical, config, talk_lexical)
    dense_part = config.dense_weight * dense_s
    side = dict(zip(ids, np.where(dense_part >= base / 2, "dense", "lexical").tolist()))
    # the conversation's part of a base score: its two sides at their weights, each scaled on its
    # own, so that a hit is credited to the cue that gave it the most
    talk_part = config.dense_weight * config.talk_weight * (talk_dense if len(talk_dense) else 0.0) + (
        from_words if len(from_words) else 0.0
    )
    talk_part = np.broadcast_to(talk_part, base.shape)
    parts = {"message": dict(zip(ids, (base - talk_part).tolist())), "conversation": dict(zip(ids, talk_part.tolist()))}
    scored_base = dict(zip(ids, base.tolist()))
    pool = _Pool(named_days, records, members, dict(zip(ids, raw.tolist())), lexical)
    return _Scored(pool, scored_base, dict(zip(ids, dense_s.tolist())), parts, side)


def _scores_of(ranked: Sequence[tuple[int, float]], ids: Sequence[int]) -> dict[int, float]:
    """The scores of ``ranked`` (a lexical side's matches) of the pool members ``ids``."""
    deeper = dict(ranked)
    return {i: deeper[i] for i in ids if i in deeper}
