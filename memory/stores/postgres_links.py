"""The links between memories in the PostgreSQL database, as ``sqlite_links.py`` keeps them in a
user's SQLite file (what they are: ``memory/links.py``): ``mem_links``, the edges written when
memories are stored, and ``mem_mentions``, the entities each memory names, both scoped by
``owner`` and gone with the memory they touch (foreign keys, ON DELETE CASCADE). An entity's links
are found at the read through ``mem_mentions`` and weighed by its rarity then.

The PostgreSQL store calls these with a cursor of its own transactions."""

from __future__ import annotations

from typing import Sequence

import psycopg

from ..records import State
from .base import GONE, Edge, Link, Mention
from .edges import entity_edges, heaviest
from .pg_db import run_statements

_STATES = {s.value: s for s in State}


def create(cur: psycopg.Cursor) -> None:
    """The two tables (a migration step)."""
    run_statements(
        cur,
        """
    CREATE TABLE mem_links (
        owner TEXT NOT NULL,
        src BIGINT NOT NULL,
        dst BIGINT NOT NULL,
        kind TEXT NOT NULL,
        weight DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (owner, src, dst, kind),
        FOREIGN KEY (owner, src) REFERENCES memories (owner, id) ON DELETE CASCADE,
        FOREIGN KEY (owner, dst) REFERENCES memories (owner, id) ON DELETE CASCADE
    );
    CREATE INDEX mem_links_dst ON mem_links (owner, dst);
    CREATE TABLE mem_mentions (
        owner TEXT NOT NULL,
        memory_id BIGINT NOT NULL,
        entity TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (owner, memory_id, entity),
        FOREIGN KEY (owner, memory_id) REFERENCES memories (owner, id) ON DELETE CASCADE
    );
    CREATE INDEX mem_mentions_entity ON mem_mentions (owner, entity, memory_id)
    """,
    )


def set_links(cur: psycopg.Cursor, owner: str, ids: Sequence[int], kind: str, links: Sequence[Link]) -> None:
    if ids:
        cur.execute(
            "DELETE FROM mem_links WHERE owner = %s AND src = ANY(%s) AND kind = %s",
            (owner, [int(i) for i in ids], kind),
        )
    rows = [link for link in links if link.src != link.dst]
    if not rows:
        return
    cur.execute(
        "INSERT INTO mem_links (owner, src, dst, kind, weight)"
        " SELECT %s, v.src, v.dst, v.kind, v.weight"
        " FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::float8[]) AS v(src, dst, kind, weight)"
        " WHERE EXISTS (SELECT 1 FROM memories m WHERE m.owner = %s AND m.id = v.src)"
        " AND EXISTS (SELECT 1 FROM memories m WHERE m.owner = %s AND m.id = v.dst)"
        " ON CONFLICT (owner, src, dst, kind) DO UPDATE SET weight = greatest(mem_links.weight, EXCLUDED.weight)",
        (
            owner,
            [r.src for r in rows],
            [r.dst for r in rows],
            [r.kind for r in rows],
            [float(r.weight) for r in rows],
            owner,
            owner,
        ),
    )


def set_mentions(cur: psycopg.Cursor, owner: str, items: Sequence[tuple[int, Sequence[Mention]]]) -> None:
    if not items:
        return
    ids = [int(rid) for rid, _ in items]
    cur.execute("DELETE FROM mem_mentions WHERE owner = %s AND memory_id = ANY(%s)", (owner, ids))
    rows = [(int(rid), m) for rid, mentions in items for m in {m.key: m for m in mentions}.values()]
    if rows:
        cur.execute(
            "INSERT INTO mem_mentions (owner, memory_id, entity, kind, text)"
            " SELECT %s, v.id, v.entity, v.kind, v.text"
            " FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) AS v(id, entity, kind, text)"
            " WHERE EXISTS (SELECT 1 FROM memories m WHERE m.owner = %s AND m.id = v.id)"
            " ON CONFLICT DO NOTHING",
            (
                owner,
                [rid for rid, _ in rows],
                [m.key for _, m in rows],
                [m.kind for _, m in rows],
                [m.text for _, m in rows],
                owner,
            ),
        )


def forget(cur: psycopg.Cursor, owner: str, ids: Sequence[int]) -> None:
    """Before memories are deleted (their links and mentions go with them, by the foreign keys):
    a daily summary that drew on one counts it as gone (``GONE``), and is dampened as one whose
    turns were superseded."""
    cur.execute(
        "INSERT INTO mem_links (owner, src, dst, kind, weight)"
        f" SELECT owner, src, src, '{GONE}', count(*) FROM mem_links"
        " WHERE owner = %s AND kind = 'summary' AND dst = ANY(%s) AND NOT src = ANY(%s) GROUP BY owner, src"
        " ON CONFLICT (owner, src, dst, kind) DO UPDATE SET weight = mem_links.weight + EXCLUDED.weight",
        (owner, list(ids), list(ids)),
    )


def read(cur: psycopg.Cursor, owner: str, ids: Sequence[int], max_share: float, limit: int) -> list[Edge]:
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not ids:
        return []
    written = cur.execute(
        "SELECT l.src, l.dst, l.kind, l.weight, m.state FROM mem_links l"
        " JOIN memories m ON m.owner = l.owner AND m.id = l.dst WHERE l.owner = %s AND l.src = ANY(%s)"
        " UNION ALL SELECT l.dst, l.src, l.kind, l.weight, m.state FROM mem_links l"
        " JOIN memories m ON m.owner = l.owner AND m.id = l.src WHERE l.owner = %s AND l.dst = ANY(%s)",
        (owner, ids, owner, ids),
    ).fetchall()
    edges = [Edge(int(s), int(d), kind, float(w), _STATES[state]) for s, d, kind, w, state in written]
    # how many memories the user has stored (the last id given, on the user's row: a count of a
    # large memory's rows takes milliseconds); a rarity needs no more
    row = cur.execute("SELECT last_id FROM mem_users WHERE name = %s", (owner,)).fetchone()
    total = int(row[0]) if row else 0
    cap = int(max(2.0, max_share * total))
    named = cur.execute(
        "SELECT mine.memory_id, mine.entity, mine.text,"
        " (SELECT count(*) FROM (SELECT 1 FROM mem_mentions o"
        " WHERE o.owner = mine.owner AND o.entity = mine.entity LIMIT %s) AS held)"
        " FROM mem_mentions mine WHERE mine.owner = %s AND mine.memory_id = ANY(%s)",
        (cap + 1, owner, ids),
    ).fetchall()
    kept = [(int(rid), entity, text, int(n)) for rid, entity, text, n in named if 2 <= n <= cap]
    if kept:
        # of an entity's holders, those with the lowest ids (why: sqlite_links.read)
        others: dict[str, list[tuple[int, State]]] = {}
        for entity, rid, state in cur.execute(
            "SELECT e.entity, o.memory_id, m.state FROM unnest(%s::text[]) AS e(entity)"
            " CROSS JOIN LATERAL (SELECT h.memory_id FROM mem_mentions h WHERE h.owner = %s"
            " AND h.entity = e.entity ORDER BY h.memory_id LIMIT %s) AS o"
            " JOIN memories m ON m.owner = %s AND m.id = o.memory_id ORDER BY e.entity, o.memory_id",
            (sorted({entity for _, entity, _, _ in kept}), owner, limit + len(ids), owner),
        ).fetchall():
            others.setdefault(entity, []).append((int(rid), _STATES[state]))
        edges += entity_edges(kept, lambda entity: others.get(entity, ()), total, limit, edges)
    return heaviest(edges, limit)


def entity_counts(cur: psycopg.Cursor, owner: str, limit: int) -> list[tuple[Mention, int]]:
    rows = cur.execute(
        "SELECT o.entity, min(o.kind), min(o.text), count(*) AS n FROM mem_mentions o"
        " JOIN memories m ON m.owner = o.owner AND m.id = o.memory_id"
        " WHERE o.owner = %s AND m.state = 'active' GROUP BY o.entity ORDER BY n DESC, o.entity COLLATE \"C\" LIMIT %s",
        (owner, limit),
    ).fetchall()
    return [(Mention(entity, text, kind), int(n)) for entity, kind, text, n in rows]
