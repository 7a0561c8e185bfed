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
no vector yet counts its message only. A long turn is also searched by its sentences (each a
vector, ``memory/sentences.py``): a sentence that matches brings its turn among the candidates,
so that one clause of a long exchange, which the turn's vectors average away with the rest, can
still find it; a candidate turn can also be scored by its best unit, a sentence taken as a
memory of its own (its cosine and BM25 over its words, ``_units``). Both are off
(``RetrievalConfig.use_sentences``, ``sentence_weight``): on the measured sets they did not earn
their cost. The two sides weigh the same in the base score: a
question's words are a sharper cue than its meaning on conversations between two people
(third-person questions, names, rare nouns), and the dense side carries paraphrase (the
weights' measurements are in docs/benchmarks.md, under "Retrieval quality").
Archived memories are the second tier: they take part, less a penalty, so that only a strong cue
brings one back (recognition rather than recall); the turn that uses it reinforces it, which
makes it active again. A turn that refers to another day ("yesterday", "last Friday") carries
that day in the lexical table, so a question naming the day finds it too.

The conversation before the message (today's talk) is a second cue, dense and lexical
(``_talk_vector``, ``_talk_terms``), weaker than the message. Two second hops seeded by the first
hits can be switched on, their stored vectors' mean (``_second_hop``) and their words
(``_hop_words``); both are off: on the measured sets they did not help chains (multi-hop
questions) and the word hop costs a second search (docs/benchmarks.md, issue 20).
"""

from __future__ import annotations

import math
from collections import Counter
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Callable, Sequence

import numpy as np

from .dates import conversation_days, days_in_query
from .embedders import Embedder, embed_query, embed_replies, embed_turns, normalise, turn_sentences
from .forgetting import ForgettingPolicy
from .lexical import Tokenizer
from .lexical_index import K1, B
from .links import CONVERSATION, ENTITY, SUMMARY, Spread, SpreadConfig, spread
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
    retention_weight: float = 0.05
    use_dates: bool = True
    use_replies: bool = True  # a turn's dense similarity also looks at its reply's vector
    reply_share: float = 1 / 3  # the reply's share of a turn's mean; the message has the rest
    # the sentences of long turns (``memory/sentences.py``) as dense candidates: the bank then
    # writes their vectors, and the dense search may add ``sentence_candidates`` turns that a
    # sentence of theirs found beyond the ``candidates``; a candidate turn's best unit (one of
    # its sentences, or a message or reply of one sentence), scored as a memory of its own by its
    # cosine and its words (``_units``), may take ``sentence_weight`` of its base score.
    # Off (whole turns only): on the measured sets they found more of the evidence but moved
    # recall within a few questions, while every stored turn would need its sentences embedded;
    # the scoring by units lifts the first five and lowers the first ten, and loses MemoryBank
    # questions to short sentences rich in a question's common words (docs/benchmarks.md,
    # issue 20, fourth and fifth passes)
    use_sentences: bool = False
    sentence_weight: float = 0.0
    sentence_candidates: int = 40
    archive_penalty: float | None = 0.3  # taken off an archived memory's score; None: never retrieved
    # the archive answers a strong cue: an archived memory pays the penalty in proportion to how
    # far its base score lies below the pool's best (none for the best match itself, all of it
    # ``archive_margin`` below); False: a flat penalty
    graded_archive: bool = True
    archive_margin: float = 0.2
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
    # memories that chain (see _second_hop): the first hits whose vectors seed a second cue, and
    # that cue's weight in a memory's base score
    hop_seeds: int = 3
    hop_weight: float = 0.0
    # memories that chain by their words (see _hop_words): the first hits whose words (names,
    # places, things) are a second lexical search, at most this many of those words, and the
    # weight of what it finds (off: it did not help on the measured sets, docs/benchmarks.md)
    hop_word_seeds: int = 2
    hop_word_terms: int = 24
    hop_word_weight: float = 0.0
    # how the dense and lexical sides are weighed: "fixed" (``dense_weight`` each query), or the
    # lexical side's weight scaled by how much its evidence says for this query, the dense side
    # taking the rest (``_lexical_evidence``): "evidence" (its best match against a full match),
    # "vocabulary" (the share of the query's words that memory holds at all). Fixed: with e5 as
    # the one dense reader, both lowered recall on every measured set (docs/benchmarks.md)
    fusion: str = "fixed"
    # memory as a network (``memory/links.py``): the first hits pass activation along their links
    # (entities, a summary's turns, a conversation's), which is added to a memory's score at
    # ``link_weight``; the memories it reaches join the pool, scored by every cue as the others.
    # On: it lifted recall on LoCoMo and MADial zh, moved the rest within a question or two
    # (docs/benchmarks.md, "Memory as a network")
    link_weight: float = 0.3
    spread: SpreadConfig = SpreadConfig()

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
    reasons: list[str] = field(default_factory=list)
    # the cue that found it: "message", "conversation" (the talk so far), "neighbour" (the turn
    # next to it), "named day", "second hop" (a first hit's names), "link" (a first hit's links)
    cue: str = "message"
    # the link that passed it the most activation, when it was reached along one
    link: Edge | None = None
    # the side of the search that gave its base score the most: "dense" or "lexical"
    side: str = ""

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
            "link": None
            if self.link is None
            else {"from": self.link.src, "kind": self.link.kind, "through": self.link.label or None},
        }


def _scale(values: dict[int, float]) -> dict[int, float]:
    if not values:
        return {}
    low, top = min(values.values()), max(values.values())
    if top == low:  # one candidate, or all alike: nothing to tell them apart by
        return {k: 1.0 if v > 0 else 0.0 for k, v in values.items()}
    span = top - low
    return {k: (v - low) / span for k, v in values.items()}


def _lexical_side(
    store: UserStore, tokenizer: Tokenizer, query: str, config: RetrievalConfig, named_days: Sequence[date] = ()
) -> list[tuple[int, float]]:
    """The lexical side's ranked matches (id, BM25). One search gives both the candidates (its
    best ``candidates``) and the lexical scores of the neighbours that join the pool (its best
    ``lexical_depth``): asking for given rows' scores costs a full pass over each query word's
    matches per row. Exact while fewer than ``lexical_depth`` memories match; past that, a
    neighbour beyond them scores 0."""
    terms = tokenizer.query_terms(query, named_days)
    hits: list[SearchHit] = store.lexical(terms, max(config.candidates, config.lexical_depth)) if terms else []
    return [(h.id, h.score) for h in hits]


@dataclass
class _Pool:
    """What one retrieval works on: the candidates, their neighbours, and the raw scores."""

    qvec: np.ndarray
    named_days: list[date]
    records: dict[int, MemoryRecord]  # the candidates that may become hits
    members: _Members  # the candidates and their neighbours
    dense: dict[int, float]  # cosine to the query (the better of message and reply)
    lexical: dict[int, float]  # BM25 (0 when not among the lexical side's matches)


@dataclass
class _Sides:
    """What the search sides found: the cues' vectors, the dense candidates, the lexical matches
    of the message and of the conversation's words."""

    qvec: np.ndarray
    tvec: np.ndarray | None  # the conversation's vector (None without a conversation)
    dense: list[int]
    ranked: list[tuple[int, float]]
    talk_ranked: list[tuple[int, float]]
    # the pool's rows that need no query vector, read beside the dense search (``_first_rows``)
    first: Future[tuple[set[int], PoolRows]]
    # the words searched for: the message's and the conversation's (for a turn's sentences)
    terms: list[str] = field(default_factory=list)
    talk_terms: list[str] = field(default_factory=list)
    # the cues the pool's rows are read with (``_pool_cues``; None: the vectors are read)
    pool_cues: np.ndarray | None = None
    # how much the lexical side's evidence says (``_lexical_evidence``): its share of the base score
    lexical_evidence: float = 1.0


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
    return _words_beside(tokenizer, lines[::-1], query, tokenizer.situation_terms)[: config.talk_lexical_terms]


def _words_beside(
    tokenizer: Tokenizer, texts: Sequence[str], query: str, terms_of: Callable[[str], list[str]] | None = None
) -> list[str]:
    """The distinct terms of ``texts`` (``terms_of`` each: by default its query terms), in their
    order, that ``query`` does not have."""
    own = set(tokenizer.query_terms(query))
    terms: list[str] = []
    for text in texts:
        terms += [t for t in (terms_of or tokenizer.query_terms)(text) if t not in own and t not in terms]
    return terms


def _talk_lexical_side(store: UserStore, terms: list[str], config: RetrievalConfig) -> list[tuple[int, float]]:
    """The lexical side's ranked matches of the conversation's words (as ``_lexical_side``)."""
    hits: list[SearchHit] = store.lexical(terms, max(config.candidates, config.lexical_depth))
    return [(h.id, h.score) for h in hits]


def _talk_side(
    store: UserStore, tokenizer: Tokenizer, talk: Sequence[TalkLine], query: str, config: RetrievalConfig
) -> tuple[list[str], list[tuple[int, float]]]:
    """The conversation's words (``_talk_terms``) and their ranked matches."""
    words = _talk_terms(tokenizer, talk, query, config)
    return words, (_talk_lexical_side(store, words, config) if words else [])


# a side's candidates and the pool's rows of them, read on its worker (``_first_rows`` of that
# side alone, without cues: read while the query is embedded)
_Part = tuple[set[int], PoolRows]


def _lexical_read(
    store: UserStore, tokenizer: Tokenizer, query: str, config: RetrievalConfig, named_days: Sequence[date], read: bool
) -> tuple[list[tuple[int, float]], _Part | None, float]:
    """``_lexical_side``, then, if ``read``, its rows (``_first_rows``), and what its evidence
    says (``_lexical_evidence``), on one worker."""
    ranked = _lexical_side(store, tokenizer, query, config, named_days)
    part = _first_rows(store, ranked, (), named_days, config) if read else None
    return ranked, part, _lexical_evidence(store, tokenizer, query, config, named_days, ranked)


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
    ceiling = sum(max(math.log((docs - n + 0.5) / (n + 0.5)), 1e-6) for n in holding)
    return min(1.0, ranked[0][1] / ceiling) if ceiling > 0 else 0.0


def _talk_read(
    store: UserStore, tokenizer: Tokenizer, talk: Sequence[TalkLine], query: str, config: RetrievalConfig, read: bool
) -> tuple[list[str], list[tuple[int, float]], _Part | None]:
    """``_talk_side``, then, if ``read``, its rows (``_first_rows``), on one worker."""
    words, ranked = _talk_side(store, tokenizer, talk, query, config)
    return words, ranked, (_first_rows(store, ranked, (), (), config) if read else None)


def _first_of(parts: Sequence[_Part], cues: np.ndarray | None) -> Future[tuple[set[int], PoolRows]]:
    """The pool's rows that need no query vector, from the sides' rows read beside the
    embedding, with their cosines to ``cues`` worked out now that the query's vector is here."""
    ids: set[int] = set()
    rows: PoolRows | None = None
    for part_ids, part_rows in parts:
        ids |= part_ids
        rows = part_rows if rows is None else rows.joined(part_rows)
    assert rows is not None
    if cues is not None:
        rows = replace(rows, cosines=PoolRows.cosines_of(rows.own, rows.reply, cues))
    first: Future[tuple[set[int], PoolRows]] = Future()
    first.set_result((ids, rows))
    return first


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
) -> _Sides:
    """Phase 1: the query vector, the conversation's vector (phase 1b), the dense side's
    candidates (memory ids whose message or reply vector is among the nearest to the two cues'
    mix, ``_cue_mix``) and the lexical side's ranked matches, of the message and of the
    conversation's latest words.

    The lexical side does not need the query vector: it runs on another thread while the query is
    embedded (both leave Python's lock: SQLite while it searches, the embedder in one scripted
    PyTorch call, ``e5_network``), so that on two cores a turn waits for the slower of the two,
    not for both. Where the store works out the pool's cosines from the vectors it reads
    (``UserStore.cosines_where_read`` false: SQLite), each lexical side's candidates' rows are read
    on its worker too, right after its search; a database that sends the cosines instead reads
    them once the query's vector is there, while the dense side searches."""
    beside = query_vector is None and workers is not None
    early = beside and not store.cosines_where_read  # the sides' rows read on their workers
    pending = (
        workers.submit(_lexical_read, store, tokenizer, query, config, named_days, early)
        if beside and workers is not None
        else None
    )
    # the conversation's words are picked on that other thread too (a tagger's work for Chinese)
    talks = bool(talk) and config.talk_lexical_weight > 0
    talk_pending = (
        workers.submit(_talk_read, store, tokenizer, talk, query, config, early) if talks and workers else None
    )
    qvec = embed_query(embedder, query) if query_vector is None else query_vector
    tvec = _talk_vector(embedder, talk, config)
    part: _Part | None = None
    if pending is not None:
        ranked, part, evidence = pending.result()
    else:
        ranked = _lexical_side(store, tokenizer, query, config, named_days)
        evidence = _lexical_evidence(store, tokenizer, query, config, named_days, ranked)
    words: list[str] = []
    talk_ranked: list[tuple[int, float]] = []
    talk_part: _Part | None = None
    if talk_pending is not None:
        words, talk_ranked, talk_part = talk_pending.result()
    elif talks:
        words, talk_ranked = _talk_side(store, tokenizer, talk, query, config)
    # otherwise the lexical candidates' rows are read on the other core while FAISS searches (it
    # leaves Python's lock)
    first: Future[tuple[set[int], PoolRows]]
    cues = _pool_cues(qvec, tvec, config)
    if early:
        first = _first_of([p for p in (part, talk_part) if p is not None], cues)
    elif workers is not None:
        first = workers.submit(_first_rows, store, ranked, talk_ranked, named_days, config, cues)
    else:
        first = Future()
        first.set_result(_first_rows(store, ranked, talk_ranked, named_days, config, cues))
    found: list[int] = []
    # a turn can be found several times (its message, its reply, its sentences): ask for more
    # hits than the candidates wanted. The first ``candidates`` turns are the best by any of
    # their vectors; then up to ``sentence_candidates`` more that one of their sentences brought
    # (a memory without sentence vectors is searched as before)
    extra = 0
    more = config.sentence_candidates if config.use_sentences else 0
    asked = (config.candidates + more) * (2 if config.use_replies else 1) * (2 if config.use_sentences else 1)
    # without sentences, the hits are read only until ``candidates`` turns are found
    distinct = None if config.use_sentences else config.candidates
    # the workers are idle by now (SQLite's lexical rows are read; a database reads them in
    # ``first``, on its own connections): one may share the search
    for hit in store.dense(_cue_mix(qvec, tvec, config), asked, distinct=distinct, helpers=workers):
        if hit.side == Side.REPLY and not config.use_replies or hit.id in found:
            continue
        if hit.side == Side.SENTENCE and not config.use_sentences:
            continue
        if len(found) < config.candidates:
            found.append(hit.id)
        elif hit.side == Side.SENTENCE and extra < more:
            found.append(hit.id)
            extra += 1
    terms = tokenizer.query_terms(query, named_days) if _scores_sentences(config) else []
    return _Sides(qvec, tvec, found, ranked, talk_ranked, first, terms, words, cues, evidence)


def _first_rows(
    store: UserStore,
    ranked: Sequence[tuple[int, float]],
    talk_ranked: Sequence[tuple[int, float]],
    named_days: Sequence[date],
    config: RetrievalConfig,
    cues: np.ndarray | None = None,
) -> tuple[set[int], PoolRows]:
    """Phase 2a: the candidates that need no query vector (the lexical sides' and every memory
    of the days the query names) and the pool's rows of them (``_gather`` reads the rest), with
    their cosines to ``cues`` where given (``_pool_cues``)."""
    ids = {i for i, _ in ranked[: config.candidates]} | {i for i, _ in talk_ranked[: config.candidates]}
    if named_days:
        ids |= {r.stored_id for r in store.records(days=named_days)}
    return ids, store.pool(ids, cues)


def _cues(qvec: np.ndarray, tvec: np.ndarray | None) -> np.ndarray:
    """The cues a pool is scored by: the message's vector, then the conversation's if any."""
    return np.stack([qvec, tvec]) if tvec is not None else qvec[None, :]


def _pool_cues(qvec: np.ndarray, tvec: np.ndarray | None, config: RetrievalConfig) -> np.ndarray | None:
    """The cues the pool's rows are read with (the store sends their cosines, not the vectors),
    or None where scoring needs the vectors themselves: the second hop's cue is made from the
    first hits' vectors, and a turn's sentences are scored beside its message and reply."""
    if config.hop_weight > 0 and config.hop_seeds > 0 or _scores_sentences(config):
        return None
    return _cues(qvec, tvec)


def _cue_mix(qvec: np.ndarray, tvec: np.ndarray | None, config: RetrievalConfig) -> np.ndarray:
    """The vector the dense index is searched with: the message's, leaning ``talk_weight``
    towards the conversation's (the message stays the strongest cue: a change of subject
    changes what is found). Scoring mixes the two cosines the same way (``_combine_dense``)."""
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
    hop_ranked: Sequence[tuple[int, float]] = (),
    linked: Sequence[int] = (),
    read: PoolRows | None = None,
) -> tuple[dict[int, MemoryRecord], _Members]:
    """Phase 2: the candidates' records (dense, lexical, the days the query names, the word
    hop's and those reached along links) and the pool: the candidates plus the neighbouring turns
    of candidate turns, whose scores they share. ``read``: the rows a first gathering read (only
    what it lacks is read)."""
    first, rows = sides.first.result()
    more = (set(sides.dense) | {i for i, _ in hop_ranked[: config.candidates]} | set(linked)) - first
    if read is not None:
        rows, more = read, set(more) - set(read.found)
    if more:
        rows = rows.joined(store.pool(more, sides.pool_cues))
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


@dataclass
class _Vectors:
    """The stored vectors of a pool's members: each member's message (or text) vector, and the
    reply vector of each turn that has one."""

    ids: list[int]
    own: np.ndarray
    turns: list[int]  # the members whose reply vector is in ``replies``
    replies: np.ndarray
    # the cues' cosines where the store sent them (``_pool_cues``), as ``_dense_sides`` makes
    # them: (own, replies), each (members, cues)
    cosines: tuple[np.ndarray, np.ndarray] | None = None


def _pool_vectors(store: UserStore, dim: int, members: _Members, config: RetrievalConfig) -> _Vectors:
    """Phase 3a: the exact stored vectors of the pool (the index may be approximate; a turn
    without a reply vector yet has no reply side), or their cosines with the pool's cues where
    the store sent those instead (``_pool_cues``)."""
    ids = members.ids
    empty: np.ndarray = np.zeros((0, dim), dtype=np.float32)
    if not ids:
        return _Vectors(ids, empty, [], empty)
    rows = [members.rows.row[i] for i in ids]
    stored = members.rows.cosines
    if stored is None:
        own, reply = members.rows.own[rows], members.rows.reply[rows]
        present = np.any(reply != 0, axis=1)
    else:
        own_cos, reply_cos = stored[0][rows], stored[1][rows]
        present = ~np.isnan(reply_cos[:, 0])
    keep = [n for n, i in enumerate(ids) if present[n] and i in members.replied] if config.use_replies else []
    if stored is None:
        return _Vectors(ids, own, [ids[n] for n in keep], reply[keep])
    return _Vectors(ids, empty, [ids[n] for n in keep], empty, (own_cos, reply_cos[keep]))


# a cue's cosines with the pool: each member's own vector, and turns' replies
_Side = tuple[dict[int, float], dict[int, float]]


def _dense_sides(vectors: _Vectors, cues: np.ndarray) -> list[_Side]:
    """Phase 3b: for each cue (the rows of ``cues``: the message, then the conversation if any),
    the cosine of every pool member's message (or text), and for turns of its reply."""
    return _sides(vectors, vectors.own @ cues.T, vectors.replies @ cues.T)


def _cue_sides(vectors: _Vectors, cues: np.ndarray) -> list[_Side]:
    """``_dense_sides`` of the pool's cues (``_cues``), as the store sent them where it did
    (``_pool_cues``)."""
    if vectors.cosines is None:
        return _dense_sides(vectors, cues)
    return _sides(vectors, *vectors.cosines)


def _sides(vectors: _Vectors, own_sims: np.ndarray, reply_sims: np.ndarray) -> list[_Side]:
    """Each cue's ``_Side`` from the cosines of the members (rows) with the cues (columns)."""
    return [
        (dict(zip(vectors.ids, own_sims[:, c].tolist())), dict(zip(vectors.turns, reply_sims[:, c].tolist())))
        for c in range(own_sims.shape[1])
    ]


def _combine_dense(side: _Side, config: RetrievalConfig) -> tuple[dict[int, float], dict[int, float]]:
    """A pool member's dense similarity (raw, for the reasons) and its dense score in [0, 1]."""
    raw, mixed = _dense_mixed(side, config)
    return raw, _scale(mixed)


def _dense_mixed(side: _Side, config: RetrievalConfig) -> tuple[dict[int, float], dict[int, float]]:
    """The better of a member's cosines (for the reasons), and their mix (unscaled): the reply's
    cosine weighs ``reply_share`` where the turn has a reply vector."""
    own, reply = side
    raw = {i: max(s, reply.get(i, -1.0)) for i, s in own.items()}
    w = config.reply_share
    return raw, {i: (1 - w) * s + w * reply[i] if i in reply else s for i, s in own.items()}


def _cue_dense(
    sides: list[_Side], config: RetrievalConfig
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """The dense similarity (raw, of the message), the dense score in [0, 1] of the cues' mix
    (the message's cosine and the conversation's, weighed as ``_cue_mix`` weighs them), and the
    conversation's own dense score in [0, 1] (for the cue a hit is credited to)."""
    if len(sides) == 1:
        raw, dense_s = _combine_dense(sides[0], config)
        return raw, dense_s, {}
    raw, message = _dense_mixed(sides[0], config)
    _, talk = _dense_mixed(sides[1], config)
    w = config.talk_weight
    return raw, _scale({i: (1 - w) * message[i] + w * talk[i] for i in message}), _scale(talk)


def _scores_sentences(config: RetrievalConfig) -> bool:
    return config.use_sentences and config.sentence_weight > 0


def _units(
    store: UserStore,
    tokenizer: Tokenizer,
    records: dict[int, MemoryRecord],
    vectors: _Vectors,
    cues: np.ndarray,
    sides: _Sides,
    config: RetrievalConfig,
) -> dict[int, float]:
    """Phase 4a: each candidate turn's best unit, scored as a memory of its own. A turn's units
    are its sentences (``embedders.turn_sentences``, with their stored vectors) and, where its
    message or reply is one sentence, that text whole. A unit's dense similarity is its cosine
    to the cues (mixed as the turn's, ``_cue_mix``), its lexical score BM25 over its own words
    with the store's document frequencies (the message's words, and the conversation's at
    ``talk_lexical_weight``), each scaled over the units of the pool and mixed at
    ``dense_weight``: a question about one clause of a long exchange meets that clause alone,
    on both sides, not the exchange it is diluted in. In [0, 1]."""
    turns = [i for i, r in records.items() if r.kind == Kind.TURN]
    if not turns:
        return {}
    owners, said = store.sentence_vectors(turns)
    mine: dict[int, list[int]] = {}
    for n, owner in enumerate(owners.tolist()):
        mine.setdefault(owner, []).append(n)
    weights = np.asarray([1 - config.talk_weight, config.talk_weight] if len(cues) > 1 else [1.0], dtype=np.float32)
    own = (vectors.own @ cues.T) @ weights
    reply = (vectors.replies @ cues.T) @ weights
    sentence = (said @ cues.T) @ weights if len(said) else np.zeros(0, dtype=np.float32)
    at = {rid: n for n, rid in enumerate(vectors.ids)}
    replied = {rid: n for n, rid in enumerate(vectors.turns)}
    of: list[int] = []  # each unit's turn
    texts: list[str] = []
    cosines: list[float] = []
    for rid in turns:
        rec = records[rid]
        message, answer = turn_sentences(rec.query, rec.response)
        rows = mine.get(rid, [])
        if len(rows) != len(message) + len(answer):  # none made yet: the turn's two texts whole
            message, answer, rows = [], [], []
        units = list(zip(message, (float(sentence[n]) for n in rows[: len(message)])))
        if not message:
            units.append((rec.query, float(own[at[rid]])))
        units += zip(answer, (float(sentence[n]) for n in rows[len(message) :]))
        if not answer and rid in replied:
            units.append((rec.response, float(reply[replied[rid]])))
        for text, cosine in units:
            of.append(rid)
            texts.append(text)
            cosines.append(cosine)
    words = [tokenizer.tokenize(t) for t in texts]
    lexical = _bm25(store, words, sides.terms)
    if sides.talk_terms and config.talk_lexical_weight > 0:
        w = config.talk_lexical_weight
        lexical = (1 - w) * _scaled(lexical) + w * _scaled(_bm25(store, words, sides.talk_terms))
    score = config.dense_weight * _scaled(np.asarray(cosines)) + config.lexical_weight * _scaled(lexical)
    best: dict[int, float] = {}
    for rid, value in zip(of, score.tolist()):
        if value > best.get(rid, -1.0):
            best[rid] = value
    return best


def _scaled(values: np.ndarray) -> np.ndarray:
    """``_scale`` over an array."""
    if not len(values):
        return values
    low, top = float(values.min()), float(values.max())
    if top == low:
        return (values > 0).astype(np.float64)
    return (values - low) / (top - low)


def _bm25(store: UserStore, units: Sequence[list[str]], terms: Sequence[str]) -> np.ndarray:
    """BM25 (k1 1.2, b 0.75, as the lexical side's) of ``terms`` over each unit's words: the
    terms weighed as the store weighs them over its memories, the units' lengths against their
    own mean."""
    scores: np.ndarray = np.zeros(len(units), dtype=np.float64)
    terms = list(dict.fromkeys(terms))
    if not terms or not units:
        return scores
    docs, holding = store.documents_with(terms)
    idf = {t: max(math.log((docs - n + 0.5) / (n + 0.5)), 1e-6) for t, n in zip(terms, holding) if n}
    mean = max(sum(len(u) for u in units) / len(units), 1.0)
    for n, unit in enumerate(units):
        counts = Counter(unit)
        norm = K1 * (1 - B + B * len(unit) / mean)
        scores[n] = sum(w * counts[t] * (K1 + 1) / (counts[t] + norm) for t, w in idf.items() if counts[t])
    return scores


def _base_scores(
    pool: Sequence[int],
    dense_s: dict[int, float],
    lexical: dict[int, float],
    config: RetrievalConfig,
    talk_lexical: dict[int, float] | None = None,
) -> tuple[dict[int, float], dict[int, float]]:
    """Phase 4: each pool member's base score: its dense score and its lexical score (scaled to
    [0, 1] over the pool), mixed; the lexical score of the conversation's words, when there are
    any, takes ``talk_lexical_weight`` of the lexical side. Also what those words give it (their
    share of the lexical side, scaled on their own)."""
    lex_s = _scale({i: lexical.get(i, 0.0) for i in pool})
    from_words: dict[int, float] = {}
    if talk_lexical:
        w = config.talk_lexical_weight
        talk_s = _scale({i: talk_lexical.get(i, 0.0) for i in pool})
        from_words = {i: config.lexical_weight * w * talk_s[i] for i in pool}
        lex_s = {i: (1 - w) * lex_s[i] + w * talk_s[i] for i in pool}
    base = {i: config.dense_weight * dense_s.get(i, 0.0) + config.lexical_weight * lex_s[i] for i in pool}
    return base, from_words


def _second_hop(
    vectors: _Vectors, records: dict[int, MemoryRecord], base: dict[int, float], config: RetrievalConfig
) -> tuple[list[int], dict[int, float]]:
    """Phase 4b: memories that chain. The best ``hop_seeds`` candidates of the first hop seed a
    second cue: the mean of their stored vectors (their people, places, things, as they were
    said), whose cosine to each pool member, scaled to [0, 1], is added at ``hop_weight``. A
    memory that speaks of what a first hit names without naming what the question names (the
    second turn of a multi-hop question) is lifted; the seeds, close to their own mean, keep
    their place. Costs no embedding: the vectors are the pool's, read already."""
    if config.hop_weight <= 0 or config.hop_seeds <= 0 or not vectors.ids:
        return [], {}
    seeds = sorted(records, key=lambda i: (-base[i], -i))[: config.hop_seeds]
    at = {rid: n for n, rid in enumerate(vectors.ids)}
    replies = {rid: n for n, rid in enumerate(vectors.turns)}
    w = config.reply_share if config.use_replies else 0.0
    total = np.zeros(vectors.own.shape[1], dtype=np.float32)
    for rid in seeds:
        total += vectors.own[at[rid]] * ((1 - w) if rid in replies else 1.0)
        if rid in replies:
            total += w * vectors.replies[replies[rid]]
    if not total.any():
        return seeds, {}
    (side,) = _dense_sides(vectors, normalise(total[None, :]))
    _, mixed = _dense_mixed(side, config)
    return seeds, _scale(mixed)


def link_reason(edge: Edge) -> str:
    """Why a memory reached along a link was remembered: the memory that passed it the most, and
    through what ("linked to #12 through 'Mei'")."""
    if edge.kind == ENTITY:
        return f"linked to #{edge.src} through '{edge.label}'"
    if edge.kind == SUMMARY:
        return f"linked to #{edge.src}: that day's summary and what it draws on"
    if edge.kind == CONVERSATION:
        return f"linked to #{edge.src}: the same conversation"
    return f"linked to #{edge.src}"


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
    reasons = []
    if link is not None:
        reasons.append(link_reason(link))
    if cue == "conversation":
        reasons.append("fits the conversation so far")
    elif cue == "second hop":
        reasons.append("linked to another memory found (what it names)")
    elif dense_s >= 0.5:
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
    parts: dict[str, dict[int, float]],  # the part of each base score each cue gave
    policy: ForgettingPolicy,
    now: datetime,
    config: RetrievalConfig,
    k: int,
    via: dict[int, Edge] | None = None,
    side: dict[int, str] | None = None,
) -> list[Hit]:
    """Phase 5: a candidate's score is its base, plus shares of its neighbours' (a conversation
    runs over several turns), plus the bonus of a named day and a small retention term, less the
    archive's penalty for a memory of the second tier. Each of the best ``k`` is credited to the
    cue that gave it the most of its score; ``via``: the link that passed each memory reached
    along one the most activation (said among its reasons)."""
    at = p.members.at
    scored: list[tuple[float, int, float, bool, float, bool]] = []
    best = max(base.values(), default=0.0)
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
        retention = policy.retention(rec, now)
        on_day = rec.day in p.named_days
        score += (config.date_bonus if on_day else 0.0) + config.retention_weight * retention
        if rec.state == State.ARCHIVED:
            weak = min(1.0, (best - base[rid]) / config.archive_margin) if config.graded_archive else 1.0
            score -= (config.archive_penalty or 0.0) * weak
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
        hits.append(Hit(rec, score, dense, lexical, retention, on_day, reasons, cue, link, (side or {}).get(rid, "")))
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
) -> list[Hit]:
    """The best ``k`` memories for ``query`` at ``now``, each with its scores and reasons.
    ``talk``: the conversation before ``query`` (today's turns), oldest first, a second cue.
    ``workers``: where the lexical searches run beside the query's embedding (the bank's pool;
    without one they run in turn). ``tokenizer``: the one ``store``'s lexical documents were made
    with (the bank's)."""
    k = config.k if k is None else k
    if not query.strip() or k <= 0:
        return []
    named_days: list[date] = []
    if config.use_dates:
        named_days = days_in_query(query, now.date())
        named_days += [d for d in conversation_days(query, store.days, now.date()) if d not in named_days]
    sides = _search_sides(store, tokenizer, embedder, query, config, query_vector, named_days, talk, workers)
    scored = _score_pool(store, sides, named_days, config, tokenizer=tokenizer)
    hop_terms = _hop_words(tokenizer, scored, query, config)
    if hop_terms:
        # the first hits' words found memories of their own: they join the pool, scored anew
        hop_ranked = _talk_lexical_side(store, hop_terms, config)
        scored = _score_pool(store, sides, named_days, config, hop_ranked, scored.seeds, tokenizer)
    via: dict[int, Edge] = {}
    if config.link_weight > 0:
        scored, via = _spread_links(store, sides, named_days, config, scored, tokenizer)
    return _rank(scored.pool, scored.base, scored.dense_s, scored.parts, policy, now, config, k, via, scored.side)


def _spread_links(
    store: UserStore,
    sides: _Sides,
    named_days: list[date],
    config: RetrievalConfig,
    scored: _Scored,
    tokenizer: Tokenizer,
) -> tuple[_Scored, dict[int, Edge]]:
    """Phase 4d: spreading activation (``memory/links.py``). The pool's best by their base scores
    pass activation along their links; what it reaches outside the pool joins it (read and scored
    by every cue as the rest: a linked memory is found by what it says too), and each memory's
    activation is added to its score at ``link_weight`` (its part credited to the cue "link"). A
    summary that hangs on superseded turns keeps a share of its score (``SpreadConfig.damp``)."""
    sc = config.spread
    first = {i: scored.base[i] for i in scored.pool.records}
    reached: Spread = spread(lambda ids: store.links(ids, max_share=sc.max_share, limit=sc.fan_out), first, sc)
    if not reached.activation and not reached.damped:
        return scored, {}
    new = [i for i in reached.activation if i not in scored.pool.records]
    if new:
        scored = _score_pool(store, sides, named_days, config, tokenizer=tokenizer, linked=new, read=scored)
    records = scored.pool.records
    lift = {i: config.link_weight * a for i, a in reached.activation.items() if i in records}
    base = {i: b * reached.damped.get(i, 1.0) + lift.get(i, 0.0) for i, b in scored.base.items()}
    parts = {**scored.parts, "link": lift}
    via = {i: e for i, e in reached.via.items() if i in lift}
    return replace(scored, base=base, parts=parts), via


@dataclass
class _Scored:
    """A pool scored: its base scores (each cue's part of them) and the first hits that seed the
    second hops."""

    pool: _Pool
    base: dict[int, float]
    dense_s: dict[int, float]
    parts: dict[str, dict[int, float]]
    seeds: list[int]
    # the side of the search that gave each base score the most: "dense" (meaning) or "lexical" (words)
    side: dict[int, str] = field(default_factory=dict)


def _score_pool(
    store: UserStore,
    sides: _Sides,
    named_days: list[date],
    config: RetrievalConfig,
    hop_ranked: Sequence[tuple[int, float]] = (),
    word_seeds: Sequence[int] = (),
    tokenizer: Tokenizer | None = None,
    linked: Sequence[int] = (),
    read: _Scored | None = None,
) -> _Scored:
    """Phases 2-4: the pool gathered and read, its base scores by every cue. ``hop_ranked``: the
    word hop's matches (``_hop_words``), found from the first hits ``word_seeds``; they join the
    pool and add ``hop_word_weight`` of their lexical score (scaled over the pool)."""
    if sides.lexical_evidence < 1.0:
        # the lexical side weighs what its evidence says for this query, the dense side the rest
        config = replace(config, dense_weight=1.0 - config.lexical_weight * sides.lexical_evidence)
    records, members = _gather(store, sides, config, hop_ranked, linked, read.pool.members.rows if read else None)
    deeper = dict(sides.ranked)
    ids = members.ids
    lexical = {i: deeper[i] for i in ids if i in deeper}
    talk_deeper = dict(sides.talk_ranked)
    talk_lexical = {i: talk_deeper[i] for i in ids if i in talk_deeper}
    cues = _cues(sides.qvec, sides.tvec)
    vectors = _pool_vectors(store, len(sides.qvec), members, config)
    raw, dense_s, talk_dense = _cue_dense(_cue_sides(vectors, cues), config)
    p = _Pool(sides.qvec, named_days, records, members, raw, lexical)
    base, from_words = _base_scores(ids, dense_s, lexical, config, talk_lexical)
    side = {i: "dense" if config.dense_weight * dense_s.get(i, 0.0) >= b / 2 else "lexical" for i, b in base.items()}
    if _scores_sentences(config) and tokenizer is not None:
        sw = config.sentence_weight
        best = _units(store, tokenizer, records, vectors, cues, sides, config)
        base = {i: (1 - sw) * b + sw * best[i] if i in best else b for i, b in base.items()}
    # the conversation's part of a base score: its two sides at their weights, each scaled on its
    # own, so that a hit is credited to the cue that gave it the most
    talk_part = {
        i: config.dense_weight * config.talk_weight * talk_dense.get(i, 0.0) + from_words.get(i, 0.0) for i in ids
    }
    seeds, hop = _second_hop(vectors, records, base, config)
    hop_deeper = dict(hop_ranked)
    # scaled over the memories the hop is for: the seeds match all their own words and would
    # take the top of the scale, so they get no share of it (they were found already)
    word_hop = _scale({i: hop_deeper.get(i, 0.0) for i in ids if i not in word_seeds}) if hop_ranked else {}
    # the message's part: what is left of the first hop's score (the seeds' own lift by the
    # second hops counts for no cue: they were found already)
    parts = {
        "message": {i: b - talk_part[i] for i, b in base.items()},
        "conversation": talk_part,
        "second hop": {
            i: config.hop_weight * hop.get(i, 0.0) + config.hop_word_weight * word_hop.get(i, 0.0)
            for i in {*hop, *word_hop}
            if i not in seeds and i not in word_seeds
        },
    }
    first = base
    base = {
        i: b + config.hop_weight * hop.get(i, 0.0) + config.hop_word_weight * word_hop.get(i, 0.0)
        for i, b in base.items()
    }
    # the word hop's seeds, only when it is on (the best first hits by the first scores)
    top = sorted(records, key=lambda i: (-first[i], -i))[: config.hop_word_seeds] if config.hop_word_weight > 0 else []
    return _Scored(p, base, dense_s, parts, top, side)


def _hop_words(tokenizer: Tokenizer, scored: _Scored, query: str, config: RetrievalConfig) -> list[str]:
    """Phase 4c: the words of the first hits (``hop_word_seeds`` of them, best first) that the
    message does not have, at most ``hop_word_terms``: what they name (people, places, things)
    as a second search, so that a memory that says something about what a first hit named,
    without the question's words, is found too. BM25 weighs the rare among them most."""
    if config.hop_word_weight <= 0 or config.hop_word_seeds <= 0:
        return []
    texts = [scored.pool.records[rid].text for rid in scored.seeds]
    return _words_beside(tokenizer, texts, query)[: config.hop_word_terms]
