"""The links between one user's memories in their SQLite file (``memory/links.py`` says what they
are): ``links``, the edges written when memories are stored (a daily summary to its turns, a
conversation's turns to each other), ``mentions``, the entities each memory names, and
``entities``, how many memories name each (kept by triggers on ``mentions``). An entity's links
are not stored pair by pair: a read finds the other memories that name it through ``mentions``,
and weighs it by how rare it is among the user's memories then (``memory.entities.rarity``), so
that what becomes common stops linking.

The SQLite store calls these with its connection, inside its own transactions."""

from __future__ import annotations

import sqlite3
from typing import Sequence

from ..records import State
from .base import GONE, Edge, Link, Mention
from .edges import entity_edges, heaviest
from .sqlite_db import run_script

_STATES = {s.value: s for s in State}


def create(db: sqlite3.Connection) -> None:
    """The two tables (a migration step)."""
    run_script(
        db,
        """
    CREATE TABLE links (
        src INTEGER NOT NULL,
        dst INTEGER NOT NULL,
        kind TEXT NOT NULL,
        weight REAL NOT NULL,
        PRIMARY KEY (src, dst, kind)
    ) WITHOUT ROWID;
    CREATE INDEX links_dst ON links(dst);
    CREATE TABLE mentions (
        memory_id INTEGER NOT NULL,
        entity TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (memory_id, entity)
    ) WITHOUT ROWID;
    CREATE INDEX mentions_entity ON mentions(entity, memory_id)
    """,
    )


def count_entities(db: sqlite3.Connection) -> None:
    """How many memories name each entity, kept by the database as mentions come and go (a
    migration step): a read weighs an entity by it, where counting an index's entries took a
    common entity's thousands each time."""
    db.execute("CREATE TABLE entities (entity TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
    db.execute("INSERT INTO entities (entity, n) SELECT entity, count(*) FROM mentions GROUP BY entity")
    db.execute(
        "CREATE TRIGGER mentions_counted AFTER INSERT ON mentions BEGIN"
        " INSERT INTO entities (entity, n) VALUES (new.entity, 1) ON CONFLICT (entity) DO UPDATE SET n = n + 1;"
        " END"
    )
    db.execute(
        "CREATE TRIGGER mentions_uncounted AFTER DELETE ON mentions BEGIN"
        " UPDATE entities SET n = n - 1 WHERE entity = old.entity;"
        " DELETE FROM entities WHERE entity = old.entity AND n <= 0;"
        " END"
    )


def set_links(db: sqlite3.Connection, ids: Sequence[int], kind: str, links: Sequence[Link]) -> None:
    db.executemany("DELETE FROM links WHERE src = ? AND kind = ?", [(int(i), kind) for i in ids])
    rows = [(link.src, link.dst, link.kind, float(link.weight)) for link in links if link.src != link.dst]
    db.executemany(
        "INSERT INTO links (src, dst, kind, weight) SELECT ?1, ?2, ?3, ?4"
        " WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?1) AND EXISTS (SELECT 1 FROM memories WHERE id = ?2)"
        " ON CONFLICT (src, dst, kind) DO UPDATE SET weight = max(weight, excluded.weight)",
        rows,
    )


def set_mentions(db: sqlite3.Connection, items: Sequence[tuple[int, Sequence[Mention]]]) -> None:
    for rid, mentions in items:
        db.execute("DELETE FROM mentions WHERE memory_id = ?", (rid,))
        db.executemany(
            "INSERT OR IGNORE INTO mentions (memory_id, entity, kind, text) VALUES (?, ?, ?, ?)",
            [(rid, m.key, m.kind, m.text) for m in mentions],
        )


def forget(db: sqlite3.Connection, ids: Sequence[int]) -> None:
    """A deleted memory's links and mentions go with it; a daily summary that drew on it counts
    it as gone (``GONE``), and is dampened as one whose turns were superseded."""
    rows = [(int(i),) for i in ids]
    db.executemany(
        f"INSERT INTO links (src, dst, kind, weight) SELECT src, src, '{GONE}', count(*) FROM links"
        f" WHERE kind = 'summary' AND dst = ? GROUP BY src"
        f" ON CONFLICT (src, dst, kind) DO UPDATE SET weight = weight + excluded.weight",
        rows,
    )
    db.executemany("DELETE FROM links WHERE src = ?", rows)
    db.executemany("DELETE FROM links WHERE dst = ?", rows)
    db.executemany("DELETE FROM mentions WHERE memory_id = ?", rows)


def read(db: sqlite3.Connection, ids: Sequence[int], max_share: float, limit: int) -> list[Edge]:
    ids = list(dict.fromkeys(int(i) for i in ids))
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    written = db.execute(
        f"SELECT l.src, l.dst, l.kind, l.weight, m.state FROM links l JOIN memories m ON m.id = l.dst"
        f" WHERE l.src IN ({marks})"
        f" UNION ALL SELECT l.dst, l.src, l.kind, l.weight, m.state FROM links l JOIN memories m ON m.id = l.src"
        f" WHERE l.dst IN ({marks})",
        [*ids, *ids],
    ).fetchall()
    edges = [Edge(int(s), int(d), kind, float(w), _STATES[state]) for s, d, kind, w, state in written]
    # how many memories the user has stored (ids are theirs, in order: one look-up, where a count
    # of a large memory's rows takes milliseconds); a rarity needs no more
    total = int(db.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0])
    cap = int(max(2.0, max_share * total))
    # each entity of the memories asked about, with how many memories name it; those named by
    # more than ``cap`` are left out before their memories are read (a common one has thousands)
    named = db.execute(
        f"SELECT mine.memory_id, mine.entity, mine.text, coalesce(c.n, 0) FROM mentions mine"
        f" LEFT JOIN entities c ON c.entity = mine.entity WHERE mine.memory_id IN ({marks})",
        ids,
    ).fetchall()
    kept = [(int(rid), entity, text, n) for rid, entity, text, n in named if 2 <= n <= cap]
    if kept:
        # of an entity's holders, those with the lowest ids: each memory keeps its ``limit``
        # heaviest edges, ties by the lowest id, and all of one entity's edges weigh the same, so
        # a holder past the first ``limit`` others is never kept (a common entity has thousands)
        most = limit + len(ids)

        def holders(entity: str) -> list[tuple[int, State]]:
            return [
                (int(rid), _STATES[state])
                for rid, state in db.execute(
                    "SELECT o.memory_id, m.state FROM mentions o JOIN memories m ON m.id = o.memory_id"
                    " WHERE o.entity = ? ORDER BY o.memory_id LIMIT ?",
                    (entity, most),
                ).fetchall()
            ]

        edges += entity_edges(kept, holders, total, limit, edges)
    return heaviest(edges, limit)


def entity_counts(db: sqlite3.Connection, limit: int) -> list[tuple[Mention, int]]:
    rows = db.execute(
        "SELECT o.entity, min(o.kind), min(o.text), count(*) AS n FROM mentions o JOIN memories m ON m.id = o.memory_id"
        " WHERE m.state = 'active' GROUP BY o.entity ORDER BY n DESC, o.entity LIMIT ?",
        (limit,),
    ).fetchall()
    return [(Mention(entity, text, kind), int(n)) for entity, kind, text, n in rows]
