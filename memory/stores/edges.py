"""How both engines read the links of the memories asked about (``UserStore.links``): the
heaviest edges of each, and an entity's edges made at the read from the memories' mentions."""

from __future__ import annotations

from typing import Callable, Sequence

from ..entities import rarity
from ..records import State
from .base import GONE, Edge


def heaviest(edges: list[Edge], limit: int) -> list[Edge]:
    """At most ``limit`` edges of each memory asked about, the heaviest first; between two memories,
    of each kind, the heaviest edge only (two entities they share: the rarer). Ties by id. A
    summary's ``GONE`` count is not a link to anyone: it comes along, once, outside the limit."""
    best: dict[tuple[int, int, str], Edge] = {}
    gone: dict[int, Edge] = {}
    for e in edges:
        if e.kind == GONE:
            gone[e.src] = e
            continue
        key = (e.src, e.dst, e.kind)
        if key not in best or e.weight > best[key].weight:
            best[key] = e
    out: list[Edge] = []
    per: dict[int, int] = {}
    for e in sorted(best.values(), key=lambda e: (-e.weight, e.src, e.dst, e.kind)):
        if per.get(e.src, 0) < limit:
            per[e.src] = per.get(e.src, 0) + 1
            out.append(e)
    return out + [gone[i] for i in sorted(gone)]


def entity_edges(
    named: Sequence[tuple[int, str, str, int]],
    holders: Callable[[str], Sequence[tuple[int, State]]],
    total: int,
    limit: int,
    written: Sequence[Edge] = (),
) -> list[Edge]:
    """An entity's links as a store reads them: from each memory asked about that names it
    (``named``: its id, the entity's key and words, how many memories name it) to every other
    memory that does (``holders(key)``: their ids and states), weighed by its rarity among the
    user's ``total`` memories (none where it is 0).

    Only the edges that can be among a memory's ``limit`` heaviest (``heaviest``, with its
    ``written`` edges) are needed, so the entities are read from the rarest (the heaviest edges)
    down, and an entity's holders only while a memory that names it has fewer than ``limit`` edges
    heavier than it: past that its edges could not be kept (a memory names ten entities or more,
    and a common one's holders are read for nothing). What ``heaviest`` keeps is the same as from
    every entity's edges."""
    weight: dict[str, float] = {}
    names: dict[str, list[tuple[int, str]]] = {}
    for rid, entity, text, n in named:
        w = rarity(n, total)
        if w > 0:
            weight[entity] = w
            names.setdefault(entity, []).append((rid, text))
    kept: dict[int, dict[tuple[int, str], float]] = {}  # a memory's heaviest edge to each other
    for e in written:
        mine = kept.setdefault(e.src, {})
        mine[(e.dst, e.kind)] = max(e.weight, mine.get((e.dst, e.kind), e.weight))
    edges: list[Edge] = []
    for entity in sorted(weight, key=lambda k: (-weight[k], k)):
        w = weight[entity]
        if all(sum(x > w for x in kept.get(rid, {}).values()) >= limit for rid, _ in names[entity]):
            continue
        for other, state in holders(entity):
            for rid, text in names[entity]:
                if other != rid:
                    edges.append(Edge(rid, other, "entity", w, state, text))
                    mine = kept.setdefault(rid, {})
                    mine[(other, "entity")] = max(w, mine.get((other, "entity"), w))
    return edges
