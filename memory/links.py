"""Memory as a network: the links between one user's memories, written when they are stored, and
the activation that spreads along them at read time.

The links (``UserStore.write_links``; each store keeps them in a table of its own):

- **entities**: what a memory names (``memory/entities.py``: people, pets, places, named things,
  the days it refers to). Two memories that name the same thing are linked through it, weighed by
  how rare it is among the user's memories (``entities.rarity``): the user's own name links
  nothing. Only each memory's entities are stored; the pairs are found when read.
- **summary**: a daily summary to the turns it draws on (a sentence of it shares two words or
  more with the turn, as ``drawn_turns`` matches them; the rehearsal reinforces the same turns).
- **conversation**: a turn to the turns of its conversation (the same day) up to
  ``CONVERSATION_SPAN`` places before it, weighed by 1 / distance: a conversation runs over several
  turns, and what a turn answers may have been said three turns before. The turn next to it is
  retrieval's neighbour already (``RetrievalConfig.previous_weight``).

Spreading activation (``spread``): a cue's first hits pass a share of their score along their
links, one hop and then, from the memories the first hop reached most, a second, decaying;
bounded in work (a few seeds, a few edges each). A memory that has left active memory (superseded
by an edit, archived) passes nothing; a daily summary whose turns have been superseded or deleted
hangs on what is no longer held true or no longer there, and is dampened itself by the share of
them gone (the design notes' negative propagation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .entities import entities
from .lexical import Tokenizer
from .records import Kind, MemoryRecord, State
from .stores.base import GONE, Edge, Link, Mention, UserStore

ENTITY, SUMMARY, CONVERSATION = "entity", "summary", "conversation"
CONVERSATION_SPAN = 3
# the version of what is written: a store whose ``links`` meta is older gets its links written
# anew when the bank opens it (``backfill``)
LINKS_VERSION = "1"
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")


def mentions(rec: MemoryRecord, tokenizer: Tokenizer) -> list[Mention]:
    """The entities of a memory: of a turn, its message and reply; the days it refers to,
    resolved against its day."""
    day = rec.day if rec.kind == Kind.TURN else None
    return [Mention(e.key, e.text, e.kind) for e in entities(rec.text, tokenizer, day)]


def drawn_turns(summary: str, turns: Sequence[MemoryRecord], tokenizer: Tokenizer) -> list[MemoryRecord]:
    """The turns a summary draws on: each sentence of it matched, by the words they share, with the
    turn it most resembles; a turn that gives a sentence at least two of its words is drawn on."""
    words = [set(tokenizer.tokenize(t.text)) for t in turns]
    drawn: dict[int, MemoryRecord] = {}
    for sentence in _SENTENCE_END.split(summary):
        tokens = set(tokenizer.tokenize(sentence))
        if len(tokens) < 2 or not turns:
            continue
        shared = [len(tokens & w) for w in words]
        best = max(range(len(turns)), key=lambda i: shared[i])
        if shared[best] >= 2:
            drawn.setdefault(turns[best].stored_id, turns[best])
    return list(drawn.values())


def conversation_links(new: Sequence[MemoryRecord], day_turns: Sequence[MemoryRecord]) -> list[Link]:
    """Each new turn to the turns of its day up to ``CONVERSATION_SPAN`` places before it."""
    at = {t.position: t.stored_id for t in day_turns if t.kind == Kind.TURN}
    out: list[Link] = []
    for rec in new:
        for d in range(1, CONVERSATION_SPAN + 1):
            other = at.get(rec.position - d)
            if other is not None:
                out.append(Link(rec.stored_id, other, CONVERSATION, 1.0 / d))
    return out


def write_turns(store: UserStore, stored: Sequence[MemoryRecord], tokenizer: Tokenizer) -> None:
    """The links of turns just stored: their entities and their conversations."""
    links: list[Link] = []
    for day in sorted({rec.day for rec in stored}):
        turns = store.records(kind=Kind.TURN, day=day, extra=False)
        links += conversation_links([rec for rec in stored if rec.day == day], turns)
    named = [(rec.stored_id, mentions(rec, tokenizer)) for rec in stored]
    store.write_links(named, [rec.stored_id for rec in stored], CONVERSATION, links)


def write_summary(store: UserStore, summary: MemoryRecord, tokenizer: Tokenizer) -> None:
    """The links of a daily summary just stored or replaced: its entities, and the turns of its
    day that it draws on (those of a replaced text go)."""
    named = [(summary.stored_id, mentions(summary, tokenizer))]
    if summary.kind != Kind.DAILY_EVENTS:
        store.write_links(named)
        return
    drawn = drawn_turns(summary.text, store.records(kind=Kind.TURN, day=summary.day, extra=False), tokenizer)
    edges = [Link(summary.stored_id, t.stored_id, SUMMARY, 1.0) for t in drawn]
    store.write_links(named, [summary.stored_id], SUMMARY, edges)
    store.write_links([], [summary.stored_id], GONE)  # a new text draws on the turns there are


def backfill(store: UserStore, tokenizer: Tokenizer, *, again: bool = False) -> None:
    """Every memory's links written (a store made before there were any): once per store, marked
    in its ``links`` meta; ``again``: whatever the meta says (memories written around the bank)."""
    if store.meta().get("links") == LINKS_VERSION and not again:
        return
    records = store.records(extra=False)
    turns = [r for r in records if r.kind == Kind.TURN]
    for start in range(0, len(turns), 512):
        store.write_links([(r.stored_id, mentions(r, tokenizer)) for r in turns[start : start + 512]])
    by_day: dict = {}
    for t in turns:
        by_day.setdefault(t.day, []).append(t)
    edges = [link for day_turns in by_day.values() for link in conversation_links(day_turns, day_turns)]
    store.write_links([], [t.stored_id for t in turns], CONVERSATION, edges)
    for rec in records:
        if rec.kind.is_daily:
            write_summary(store, rec, tokenizer)
    store.set_meta("links", LINKS_VERSION)


@dataclass(frozen=True)
class SpreadConfig:
    """How activation spreads: the first hits that pass it (``seeds``), the share of a seed's
    score each kind of link passes (times the link's weight), how much of it the second hop
    passes on (``decay``, from the ``hop_seeds`` memories the first hop reached most), how many
    edges a memory passes along at most (``fan_out``), how many memories from outside the pool join
    it at most (``join``, the most activated: each is read and scored by every cue as a pool member,
    and costs as much, so spreading adds at most this many to a pool of a few hundred), an entity's
    greatest share of the user's memories for it to link (``entities.MAX_SHARE``), and what a
    summary that hangs only on superseded or deleted turns keeps of its score (``damp``)."""

    seeds: int = 5
    entity_share: float = 0.6
    summary_share: float = 0.6
    conversation_share: float = 0.3
    decay: float = 0.5
    hop_seeds: int = 3
    fan_out: int = 24
    join: int = 32
    max_share: float = 0.05
    damp: float = 0.5

    def share(self, kind: str) -> float:
        return {ENTITY: self.entity_share, SUMMARY: self.summary_share, CONVERSATION: self.conversation_share}.get(
            kind, 0.0
        )


@dataclass
class Spread:
    """What spreading gave: each reached memory's activation in [0, 1] (noisy-or of what each
    link passed it), the link that passed it the most (the seed, the kind, the entity's words),
    and the factor each dampened memory's score is multiplied by."""

    activation: dict[int, float] = field(default_factory=dict)
    via: dict[int, Edge] = field(default_factory=dict)
    damped: dict[int, float] = field(default_factory=dict)

    def _pass(self, edge: Edge, amount: float, best: dict[int, float]) -> None:
        if amount <= 0:
            return
        self.activation[edge.dst] = 1 - (1 - self.activation.get(edge.dst, 0.0)) * (1 - min(amount, 1.0))
        if amount > best.get(edge.dst, 0.0):
            best[edge.dst] = amount
            self.via[edge.dst] = edge


def spread(edges_of: Callable[[list[int]], list[Edge]], scores: dict[int, float], config: SpreadConfig) -> Spread:
    """Activation from the first hits (``scores``: the pool's base scores; its best ``seeds`` pass
    it) along ``edges_of``'s links (``UserStore.links``, read twice at most: the seeds', then the
    second hop's). A seed reached again gets nothing back. A memory that is not active passes
    nothing, and receives nothing (it is not retrieved)."""
    out = Spread()
    seeds = sorted(scores, key=lambda i: (-scores[i], i))[: config.seeds]
    if not seeds or config.seeds <= 0:
        return out
    best: dict[int, float] = {}
    active: set[int] = set()
    summary_sources: dict[int, list[State]] = {}
    deleted: dict[int, float] = {}
    for e in edges_of(seeds):
        if e.kind == GONE:
            deleted[e.src] = e.weight
            continue
        if e.kind == SUMMARY:
            summary_sources.setdefault(e.src, []).append(e.state)
        if e.dst in seeds or e.state == State.SUPERSEDED:
            continue
        if e.state == State.ACTIVE:
            active.add(e.dst)
        out._pass(e, config.share(e.kind) * e.weight * scores[e.src], best)
    for rid in summary_sources.keys() | deleted.keys():
        states = summary_sources.get(rid, [])
        lost = deleted.get(rid, 0.0)
        gone = (sum(s == State.SUPERSEDED for s in states) + lost) / (len(states) + lost)
        if gone:
            out.damped[rid] = 1 - config.damp * gone
    if config.decay > 0 and config.hop_seeds > 0:
        second = sorted((i for i in out.activation if i in active), key=lambda i: (-out.activation[i], i))
        second = second[: config.hop_seeds]
        first = dict(out.activation)
        for e in edges_of(second) if second else []:
            if e.kind == GONE or e.dst in seeds or e.dst in second or e.state == State.SUPERSEDED:
                continue
            out._pass(e, config.decay * config.share(e.kind) * e.weight * first[e.src], best)
    return out
