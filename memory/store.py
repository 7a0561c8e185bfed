"""The SQLite store of one user's memories: the source of truth.

One database file per user (``users/<id>/memory.db`` under the home), so that no query can reach
another user's rows. WAL journal, a busy timeout so that two processes can write the same home,
ordered migrations, and every write in one transaction (a crash mid-write leaves the old state).
Vectors are stored with their rows, so the FAISS index is a cache that is rebuilt without
re-embedding. ``vseq`` numbers every change to what the index holds (insert, state change,
re-embedding, delete) so that an index can catch up with changes made by another process.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from datetime import date, datetime
from pathlib import Path
from typing import ContextManager, Iterable, Iterator, Sequence

import numpy as np

from .lexical import fts_document
from .records import Kind, MemoryRecord, State
from .sqlite_db import connect, immediate_transaction, run_script

_COLUMNS = ("id, kind, text, query, response, day, position, created_at, strength, last_recall, "
            "recall_count, importance, pinned, state, extra")


def _m1(db: sqlite3.Connection) -> None:
    run_script(db, """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        query TEXT NOT NULL DEFAULT '',
        response TEXT NOT NULL DEFAULT '',
        day TEXT NOT NULL,
        position INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        strength REAL NOT NULL DEFAULT 1.0,
        last_recall TEXT,
        recall_count INTEGER NOT NULL DEFAULT 0,
        importance REAL NOT NULL DEFAULT 0,
        pinned INTEGER NOT NULL DEFAULT 0,
        state TEXT NOT NULL DEFAULT 'active',
        vector BLOB,
        vseq INTEGER NOT NULL DEFAULT 0,
        extra TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX memories_day ON memories(day, kind);
    CREATE INDEX memories_vseq ON memories(vseq);
    CREATE INDEX memories_kind_state ON memories(kind, state);
    CREATE TABLE tombstones (id INTEGER PRIMARY KEY, vseq INTEGER NOT NULL);
    CREATE VIRTUAL TABLE memories_fts USING fts5(tokens);
    INSERT INTO meta VALUES ('vseq', '0');
    """)


def _m2(db: sqlite3.Connection) -> None:
    # neighbour look-ups by (day, position) without scanning every turn; the lexical table holds
    # active memories only, so that a lexical search needs no join to filter out archived ones
    run_script(db, """
    CREATE INDEX memories_place ON memories(day, position);
    DELETE FROM memories_fts WHERE rowid IN (SELECT id FROM memories WHERE state != 'active');
    """)


MIGRATIONS = [_m1, _m2]


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _row_to_record(user: str, row: sqlite3.Row) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"], user=user, kind=Kind(row["kind"]), text=row["text"], query=row["query"],
        response=row["response"], day=date.fromisoformat(row["day"]), position=row["position"],
        created_at=datetime.fromisoformat(row["created_at"]), strength=row["strength"],
        last_recall=_dt(row["last_recall"]), recall_count=row["recall_count"],
        importance=row["importance"], pinned=bool(row["pinned"]), state=State(row["state"]),
        extra=json.loads(row["extra"] or "{}"),
    )


class UserStore:
    """All memories of one user, in one SQLite file."""

    def __init__(self, path: Path, user: str):
        self.path = Path(path)
        self.user = user
        self._db = connect(self.path, "synchronous=NORMAL")
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._migrate()

    # -- plumbing -----------------------------------------------------------------------------
    def _migrate(self) -> None:
        if self._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
            return   # up to date: no write lock taken at every login
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for i, step in enumerate(MIGRATIONS[version:], start=version + 1):
                step(db)
                db.execute(f"PRAGMA user_version={i}")
            if version == 0:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('user', ?)", (self.user,))

    def transaction(self) -> ContextManager[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; rolled back on any error."""
        return immediate_transaction(self._db, self._lock)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _bump(self, db: sqlite3.Connection) -> int:
        db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vseq'")
        return int(db.execute("SELECT value FROM meta WHERE key = 'vseq'").fetchone()[0])

    def vseq(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'vseq'").fetchone()[0])

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- writes -------------------------------------------------------------------------------
    def insert(self, records: Sequence[MemoryRecord], vectors: np.ndarray | None, *,
               keep_ids: bool = False) -> list[MemoryRecord]:
        """``keep_ids``: the records' ids and places are kept (copying a store)."""
        out: list[MemoryRecord] = []
        with self.transaction() as db:
            seq = self._bump(db)
            for i, rec in enumerate(records):
                blob = None if vectors is None else np.asarray(vectors[i], dtype=np.float32).tobytes()
                if rec.kind == Kind.TURN and not keep_ids:
                    # the position is settled inside the write transaction, so that two processes
                    # adding turns to the same day never give two of them one place
                    free = db.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM memories"
                                      " WHERE kind = 'turn' AND day = ?", (rec.day.isoformat(),)).fetchone()[0]
                    rec = rec.with_(position=max(rec.position, int(free)))
                cur = db.execute(
                    "INSERT INTO memories (id, kind, text, query, response, day, position, created_at,"
                    " strength, last_recall, recall_count, importance, pinned, state, vector, vseq, extra)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (rec.id if keep_ids else None, rec.kind.value, rec.text, rec.query, rec.response, rec.day.isoformat(),
                     rec.position, rec.created_at.isoformat(), rec.strength,
                     rec.last_recall.isoformat() if rec.last_recall else None, rec.recall_count,
                     rec.importance, int(rec.pinned), rec.state.value, blob, seq,
                     json.dumps(rec.extra, ensure_ascii=False)))
                rid = cur.lastrowid
                if rec.state == State.ACTIVE:
                    db.execute("INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)",
                               (rid, fts_document(rec.text)))
                out.append(rec.with_(id=rid))
        return out

    def replace_text(self, rid: int, text: str, vector: np.ndarray | None, **fields) -> None:
        """New text (and vector) for a memory: an edited summary, a regenerated reply."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            seq = self._bump(db)
            blob = None if vector is None else np.asarray(vector, dtype=np.float32).tobytes()
            db.execute(f"UPDATE memories SET text = ?, vector = ?, vseq = ?{', ' + sets if sets else ''}"
                       " WHERE id = ?", (text, blob, seq, *fields.values(), rid))
            db.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
            row = db.execute("SELECT state FROM memories WHERE id = ?", (rid,)).fetchone()
            if row and row[0] == State.ACTIVE.value:
                db.execute("INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)", (rid, fts_document(text)))

    def update_forgetting(self, records: Iterable[MemoryRecord]) -> None:
        """Strength / recall fields after reinforcement (the index is not affected)."""
        rows = [(r.strength, r.last_recall.isoformat() if r.last_recall else None, r.recall_count, r.id)
                for r in records]
        if rows:
            with self.transaction() as db:
                db.executemany("UPDATE memories SET strength = ?, last_recall = ?, recall_count = ?"
                               " WHERE id = ?", rows)

    def set_state(self, ids: Sequence[int], state: State) -> int:
        if not ids:
            return 0
        with self.transaction() as db:
            seq = self._bump(db)
            n = 0
            for rid in ids:
                changed = db.execute("UPDATE memories SET state = ?, vseq = ? WHERE id = ? AND state != ?",
                                     (state.value, seq, rid, state.value)).rowcount
                if not changed:
                    continue
                n += changed
                db.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
                if state == State.ACTIVE:   # the lexical table holds active memories only
                    text = db.execute("SELECT text FROM memories WHERE id = ?", (rid,)).fetchone()[0]
                    db.execute("INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)",
                               (rid, fts_document(text)))
            return n

    def set_pinned(self, rid: int, pinned: bool) -> bool:
        with self.transaction() as db:
            return db.execute("UPDATE memories SET pinned = ? WHERE id = ?", (int(pinned), rid)).rowcount > 0

    def delete(self, ids: Sequence[int]) -> int:
        if not ids:
            return 0
        with self.transaction() as db:
            seq = self._bump(db)
            n = 0
            for rid in ids:
                n += db.execute("DELETE FROM memories WHERE id = ?", (rid,)).rowcount
                db.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
                db.execute("INSERT OR REPLACE INTO tombstones VALUES (?, ?)", (rid, seq))
            return n

    def set_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        with self.transaction() as db:
            seq = self._bump(db)
            db.executemany("UPDATE memories SET vector = ?, vseq = ? WHERE id = ?",
                           [(np.asarray(v, dtype=np.float32).tobytes(), seq, rid)
                            for rid, v in zip(ids, vectors)])

    # -- reads --------------------------------------------------------------------------------
    def _select(self, where: str = "1", params: Sequence = (), order: str = "day, kind, position, id",
                limit: int | None = None, offset: int = 0) -> list[MemoryRecord]:
        sql = f"SELECT {_COLUMNS} FROM memories WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        with self._lock:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        return [_row_to_record(self.user, r) for r in rows]

    def get(self, rid: int) -> MemoryRecord | None:
        found = self._select("id = ?", (rid,))
        return found[0] if found else None

    def get_many(self, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        ids = list(dict.fromkeys(int(i) for i in ids))
        out: dict[int, MemoryRecord] = {}
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for rec in self._select(f"id IN ({','.join('?' * len(part))})", part):
                out[rec.id] = rec
        return out

    def records(self, *, kind: Kind | None = None, state: State | None = None, day: date | None = None,
                days: Sequence[date] | None = None, limit: int | None = None, offset: int = 0,
                newest_first: bool = False) -> list[MemoryRecord]:
        clauses, params = [], []
        if kind is not None:
            clauses.append("kind = ?"); params.append(kind.value)
        if state is not None:
            clauses.append("state = ?"); params.append(state.value)
        if day is not None:
            days = [day]
        if days is not None:
            clauses.append(f"day IN ({','.join('?' * len(days))})"); params += [d.isoformat() for d in days]
        order = "day DESC, kind, position DESC, id DESC" if newest_first else "day, kind, position, id"
        return self._select(" AND ".join(clauses) or "1", params, order, limit, offset)

    def count(self, *, kind: Kind | None = None, state: State | None = None) -> int:
        clauses, params = [], []
        if kind is not None:
            clauses.append("kind = ?"); params.append(kind.value)
        if state is not None:
            clauses.append("state = ?"); params.append(state.value)
        with self._lock:
            return self._db.execute(f"SELECT COUNT(*) FROM memories WHERE {' AND '.join(clauses) or '1'}",
                                    params).fetchone()[0]

    def days(self) -> list[date]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT day FROM memories WHERE kind = 'turn' ORDER BY day").fetchall()
        return [date.fromisoformat(r[0]) for r in rows]

    def next_position(self, day: date) -> int:
        with self._lock:
            row = self._db.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM memories"
                                   " WHERE kind = 'turn' AND day = ?", (day.isoformat(),)).fetchone()
        return int(row[0])

    def vectors(self, ids: Sequence[int], dim: int) -> np.ndarray:
        """Stored vectors in the order of ``ids`` (zeros where a row has none)."""
        out = np.zeros((len(ids), dim), dtype=np.float32)
        pos = {rid: i for i, rid in enumerate(ids)}
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            with self._lock:
                rows = self._db.execute(f"SELECT id, vector FROM memories WHERE id IN ({','.join('?' * len(part))})",
                                        part).fetchall()
            for rid, blob in rows:
                if blob is not None and len(blob) == dim * 4:
                    out[pos[rid]] = np.frombuffer(blob, dtype=np.float32)
        return out

    def active_vectors_since(self, seq: int) -> tuple[list[int], list[int], list[bytes | None], int]:
        """Changes to the index since ``seq``: (ids to drop, ids to (re)add, their vectors, now)."""
        with self._lock:
            now = self.vseq()
            changed = self._db.execute("SELECT id, state, vector FROM memories WHERE vseq > ?", (seq,)).fetchall()
            gone = [r[0] for r in self._db.execute("SELECT id FROM tombstones WHERE vseq > ?", (seq,))]
        drop = gone + [r[0] for r in changed]
        add = [(r[0], r[2]) for r in changed if r[1] == State.ACTIVE.value and r[2] is not None]
        return drop, [a[0] for a in add], [a[1] for a in add], now

    def all_meta(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT key, value FROM meta WHERE key NOT IN ('user', 'vseq')").fetchall())

    def iter_rows(self, batch: int = 1000) -> Iterator[list[tuple[MemoryRecord, np.ndarray | None]]]:
        """Every memory with its stored vector, in id order (copying a store)."""
        last = 0
        while True:
            with self._lock:
                rows = self._db.execute(f"SELECT {_COLUMNS}, vector FROM memories WHERE id > ? ORDER BY id LIMIT ?",
                                        (last, batch)).fetchall()
            if not rows:
                return
            last = rows[-1]["id"]
            yield [(_row_to_record(self.user, r),
                    None if r["vector"] is None else np.frombuffer(r["vector"], dtype=np.float32)) for r in rows]

    def iter_texts(self, batch: int = 256) -> Iterator[list[tuple[int, Kind, str, str | None]]]:
        """Every memory's (id, kind, text, the user's message of a turn), in batches."""
        last = 0
        while True:
            with self._lock:
                rows = self._db.execute("SELECT id, kind, text, query FROM memories WHERE id > ? ORDER BY id LIMIT ?",
                                        (last, batch)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(r[0], Kind(r[1]), r[2], r[3]) for r in rows]

    def turns_at(self, places: Sequence[tuple[date, int]]) -> list[MemoryRecord]:
        """Active turns at the given (day, position) places: the neighbours of retrieved turns."""
        out: list[MemoryRecord] = []
        places = list(dict.fromkeys(places))
        for start in range(0, len(places), 300):
            part = places[start:start + 300]
            # one index look-up per place (a row-value IN list would make SQLite scan every turn)
            where = " OR ".join("(day = ? AND position = ?)" for _ in part)
            params = [v for d, p in part for v in (d.isoformat(), p)]
            out += self._select(f"+kind = 'turn' AND ({where})", params)
        return [r for r in out if r.state == State.ACTIVE]

    def lexical_for(self, match: str, ids: Sequence[int]) -> dict[int, float]:
        """BM25 scores (higher is better) of the given memories for an FTS5 expression."""
        ids = list(ids)
        if not ids:
            return {}
        with self._lock:
            rows = self._db.execute(
                f"SELECT rowid, -bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ?"
                f" AND rowid IN ({','.join('?' * len(ids))})", (match, *ids)).fetchall()
        return {r[0]: float(r[1]) for r in rows}

    def lexical(self, match: str, limit: int) -> list[tuple[int, float]]:
        """(id, bm25 score, higher is better) of active memories matching an FTS5 expression
        (the lexical table holds active memories only)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, -bm25(memories_fts) FROM memories_fts"
                " WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT ?", (match, limit)).fetchall()
        return [(r[0], float(r[1])) for r in rows]
