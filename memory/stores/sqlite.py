"""The SQLite store: a home folder with one SQLite file and one FAISS index per user.

One database file per user (``users/<key>/memory.db`` under the home, the truth), so that no query
can reach another user's rows, and beside it ``index.faiss`` (``memory/index.py``, a cache). WAL journal, a busy timeout so that two processes can write the same home,
ordered migrations, and every write in one transaction (a crash mid-write leaves the old state).
Vectors are stored with their rows, so the FAISS index is a cache that is rebuilt without
re-embedding. ``vseq`` numbers every change to what the index holds (insert, state change,
re-embedding, delete) so that an index can catch up with changes made by another process.

A dialogue turn has two vectors: its user's message (``vector``, made before the reply, by the
retrieval of that very message) and the companion's reply (``reply_vector``, made after the reply
has streamed, off the turn's clock; NULL until then). The FAISS index holds both, the reply's
under ``id + REPLY_ID_OFFSET`` (which never leaves this module: searches return typed hits). Archived memories are a second tier: they stay in the lexical table and
the index, and retrieval lets them back only on a strong cue (see ``memory/retrieval.py``).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sqlite3
import threading
from concurrent.futures import Executor
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Callable, ContextManager, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..lexical import Tokenizer
from ..lexical_index import LexicalCache, searchable
from ..records import Kind, MemoryRecord, State
from . import sqlite_links
from .base import (
    SECOND_COLUMNS,
    VECTOR,
    VECTOR_COLUMNS,
    Edge,
    Link,
    Mention,
    Neighbour,
    PoolRows,
    SearchHit,
    Side,
    user_key,
)
from .documents import lexical_document
from .record_reads import RecordReads
from .references import without_references
from .rows import MEMORY_COLUMNS, blob_vectors, record_from_row
from .sqlite_db import connect, immediate_transaction
from .sqlite_index import UserIndex
from .sqlite_migrations import MIGRATIONS, write_refs

_COLUMNS = ", ".join(MEMORY_COLUMNS)
# the same, for a read that leaves the extra fields out (``records(extra=False)``)
_COLUMNS_BUT_EXTRA = ", ".join("NULL AS extra" if c == "extra" else c for c in MEMORY_COLUMNS)

# the index id of a turn's reply vector: its memory id plus this (memory ids stay far below it)
REPLY_ID_OFFSET = 1 << 40
# from this many memories on, lexical searches are answered from posting lists in memory
# (``memory/lexical_index.py``, the same scores as FTS5's), where FTS5's per-row scoring grows slow
LEXICAL_INDEX_MIN = 10_000
# the places of ``_turns_at``'s look-up come in lists of a multiple of this many (see there)
_PLACES_STEP = 50
# The write-ahead log is moved into the database (a checkpoint) by the bank's reply worker, after
# a turn (``tidy``), every TIDY_WRITES write transactions (about 20 turns: as often as SQLite's
# default of 1,000 pages). A commit that checkpoints does it inside the turn that commits, and the
# first after opening a large user costs far more (docs/benchmarks-journal.md, "The SQLite turn's
# tail"); commits do so
# only past WAL_BACKSTOP_PAGES, where no worker tidies (a store written without a bank's worker).
TIDY_WRITES = 60
WAL_BACKSTOP_PAGES = 10_000


def stored_user(db_path: Path) -> str | None:
    """The user name kept in the store at ``db_path``, read without opening it for writing (None
    where the file holds no name)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'user'").fetchone()
    finally:
        con.close()
    return row[0] if row else None


def _cosines(own: np.ndarray, reply: np.ndarray, cues: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``PoolRows.cosines`` from the vectors: each row's inner product with each cue (NaN for a
    reply vector that is not there: a row of zeros)."""
    replies = reply @ cues.T
    replies[~np.any(reply != 0, axis=1)] = np.nan
    return own @ cues.T, replies


def _match(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression that ORs ``terms`` (each quoted)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


class SqliteUserStore(RecordReads):
    """All memories of one user, in one SQLite file, and the FAISS index beside it (opened at
    its first use, once the vectors are known to be the embedder's): the ``base.UserStore`` port
    and the engine's ``base.Upkeep`` (``OpenStore``)."""

    def __init__(self, path: Path, user: str, *, dim: int, vectors_id: str, tokenizer: Tokenizer):
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.user = user
        self.dim = dim
        self.vectors_id = vectors_id
        # secure_delete: what a deletion or a rewrite frees is overwritten with zeros, so that a
        # deleted memory's words are not left in the file's free space
        self._db = connect(
            self.path, "synchronous=NORMAL", f"wal_autocheckpoint={WAL_BACKSTOP_PAGES}", "secure_delete=ON"
        )
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._writes = 0  # write transactions since the last checkpoint of ``tidy``
        self._index: UserIndex | None = None
        self._lexical: LexicalCache | None = None
        self._migrate()

    # -- plumbing -----------------------------------------------------------------------------
    def _migrate(self) -> None:
        if self._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
            return  # up to date: no write lock taken at every login
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for i, step in enumerate(MIGRATIONS[version:], start=version + 1):
                step(db, self.tokenizer)
                db.execute(f"PRAGMA user_version={i}")
            if version == 0:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('user', ?)", (self.user,))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; rolled back on any error."""
        with immediate_transaction(self._db, self._lock) as db:
            yield db
            self._writes += 1

    def tidy(self) -> None:
        """The write-ahead log moved into the database once TIDY_WRITES transactions have
        written to it: a passive checkpoint (it waits for no reader or writer) on a connection of
        its own, so that a turn's reads and writes never wait for it. A file deleted meanwhile
        (the user's) is not made again."""
        with self._lock:
            if self._writes < TIDY_WRITES:
                return
            self._writes = 0
        checkpoints = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=30.0)
        try:
            checkpoints.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            checkpoints.close()

    def close(self, *, save: bool = True) -> None:
        """Close the file. An evicted user's index is not saved (``save`` false): what changed
        since its last save is replayed from the store when the user comes back (a few rows),
        whereas saving a user's whole index at every eviction costs a file write per turn on a
        busy server."""
        try:
            if save and self._index is not None:
                self._index.flush()
        finally:
            with self._lock:
                try:
                    # the write-ahead log into the database and emptied, so that a stopped server
                    # leaves one file (a busy log, another process's, is left to that process)
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    pass
                self._db.close()

    # -- the dense index ----------------------------------------------------------------------
    @property
    def index(self) -> UserIndex:
        """The FAISS index of this user (rebuilt from the stored vectors if its file is missing,
        corrupt or made for another embedder)."""
        with self._lock:
            if self._index is None:
                self._index = UserIndex(self, self.path.with_name("index.faiss"), self.dim, self.vectors_id)
            return self._index

    def dense(
        self, query: np.ndarray, k: int, *, distinct: int | None = None, helpers: Executor | None = None
    ) -> list[SearchHit]:
        # one index holds every side: its k best are read whatever ``distinct`` allows
        return [
            SearchHit(vid - REPLY_ID_OFFSET, Side.REPLY, score)
            if vid >= REPLY_ID_OFFSET
            else SearchHit(vid, Side.OWN, score)
            for vid, score in self.index.search(query, k, helpers=helpers)
        ]

    def sync(self) -> None:
        self.index.sync()

    def flush(self) -> None:
        if self._index is not None:
            self._index.flush()

    def _bump(self, db: sqlite3.Connection) -> int:
        db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vseq'")
        return int(db.execute("SELECT value FROM meta WHERE key = 'vseq'").fetchone()[0])

    def vseq(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'vseq'").fetchone()[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- writes -------------------------------------------------------------------------------
    def insert(
        self, records: Sequence[MemoryRecord], vectors: np.ndarray | None, *, keep_ids: bool = False
    ) -> list[MemoryRecord]:
        """``keep_ids``: the records' ids and places are kept (copying a store)."""
        out: list[MemoryRecord] = []
        with self.transaction() as db:
            seq = self._bump(db)
            for i, rec in enumerate(records):
                blob = None if vectors is None else np.asarray(vectors[i], dtype=np.float32).tobytes()
                if rec.kind == Kind.TURN and not keep_ids:
                    # the position is settled inside the write transaction, so that two processes
                    # adding turns to the same day never give two of them one place
                    free = db.execute(
                        "SELECT COALESCE(MAX(position) + 1, 0) FROM memories WHERE kind = 'turn' AND day = ?",
                        (rec.day.isoformat(),),
                    ).fetchone()[0]
                    rec = rec.with_(position=max(rec.position, int(free)))
                cur = db.execute(
                    "INSERT INTO memories (id, kind, text, query, response, day, position, created_at,"
                    " strength, last_recall, recall_count, importance, pinned, state, vector, vseq, extra, archived_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        rec.id if keep_ids else None,
                        rec.kind.value,
                        rec.text,
                        rec.query,
                        rec.response,
                        rec.day.isoformat(),
                        rec.position,
                        rec.created_at.isoformat(),
                        rec.strength,
                        rec.last_recall.isoformat() if rec.last_recall else None,
                        rec.recall_count,
                        rec.importance,
                        int(rec.pinned),
                        rec.state.value,
                        blob,
                        seq,
                        json.dumps(rec.extra, ensure_ascii=False),
                        rec.archived_at.isoformat() if rec.archived_at else None,
                    ),
                )
                rid = cur.lastrowid
                db.execute(
                    "INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)",
                    (rid, lexical_document(self.tokenizer, rec.kind, rec.text, rec.day)),
                )
                write_refs(db, [(rid, rec.extra)])
                out.append(rec.with_(id=rid))
        return out

    def replace_text(self, rid: int, text: str, vector: np.ndarray | None, **fields) -> None:
        """New text (and vector) for a memory: an edited summary, a regenerated reply."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            seq = self._bump(db)
            blob = None if vector is None else np.asarray(vector, dtype=np.float32).tobytes()
            db.execute(
                # new words: the second reader's vectors are of the old ones (the reply worker makes them again)
                "UPDATE memories SET text = ?, vector = ?, vseq = ?,"
                " second_vector = CASE WHEN text = ? THEN second_vector END,"
                " second_reply_vector = CASE WHEN text = ? THEN second_reply_vector END"
                f"{', ' + sets if sets else ''} WHERE id = ?",
                (text, blob, seq, text, text, *fields.values(), rid),
            )
            db.execute("DELETE FROM memories_fts WHERE rowid = ?", (rid,))
            if "extra" in fields:  # the memories it names are those of its new extra fields
                db.execute("DELETE FROM refs WHERE holder = ?", (rid,))
                write_refs(db, [(rid, fields["extra"])])
            row = db.execute("SELECT kind, day FROM memories WHERE id = ?", (rid,)).fetchone()
            if row:
                document = lexical_document(self.tokenizer, Kind(row[0]), text, date.fromisoformat(row[1]))
                db.execute("INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)", (rid, document))

    def update_forgetting(
        self, records: Iterable[MemoryRecord], *, read: Mapping[int, MemoryRecord] | None = None
    ) -> list[int]:
        """Strength / recall fields after reinforcement (the index is not affected); with
        ``read``, only where the recall count is still the one read (``UserStore``)."""
        rows = [
            (
                r.strength,
                r.last_recall.isoformat() if r.last_recall else None,
                r.recall_count,
                r.stored_id,
                read[r.stored_id].recall_count if read is not None and r.stored_id in read else None,
            )
            for r in records
        ]
        left: list[int] = []
        if rows:
            with self.transaction() as db:
                for row in rows:
                    done = db.execute(
                        "UPDATE memories SET strength = ?, last_recall = ?, recall_count = ?"
                        " WHERE id = ? AND (?5 IS NULL OR recall_count = ?5)",
                        row,
                    ).rowcount
                    if not done:
                        left.append(row[3])
        return left

    def set_state(self, ids: Sequence[int], state: State, when: datetime | None = None) -> int:
        """Archive (``when``: the time of the forgetting pass) or restore memories. Both tiers
        stay in the lexical table and the index; only retrieval tells them apart."""
        if not ids:
            return 0
        archived_at = when.isoformat() if (when and state == State.ARCHIVED) else None
        with self.transaction() as db:
            seq = self._bump(db)
            return sum(
                db.execute(
                    "UPDATE memories SET state = ?, archived_at = ?, vseq = ? WHERE id = ? AND state != ?",
                    (state.value, archived_at, seq, rid, state.value),
                ).rowcount
                for rid in ids
            )

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
                db.execute("DELETE FROM refs WHERE holder = ?", (rid,))
            sqlite_links.forget(db, ids)
            self._drop_references(db, ids)
            return n

    def _drop_references(self, db: sqlite3.Connection, ids: Sequence[int]) -> None:
        """Every row naming one of ``ids`` at ``REFERENCES`` (found by ``refs``) rewritten without them."""
        gone = sorted({int(i) for i in ids})
        for holder in self._naming(db, gone):
            row = db.execute("SELECT extra FROM memories WHERE id = ?", (holder,)).fetchone()
            if row is not None and (text := without_references(row[0], set(gone))) is not None:
                db.execute("UPDATE memories SET extra = ? WHERE id = ?", (text, holder))
        db.executemany("DELETE FROM refs WHERE memory_id = ?", [(i,) for i in gone])

    def naming(self, ids: Sequence[int]) -> list[int]:
        """The memories whose lists at ``REFERENCES`` name one of ``ids``, in id order (what ``refs``
        keeps as rows are written; off the port: the tests look inside with it)."""
        with self._lock:
            return self._naming(self._db, sorted({int(i) for i in ids}))

    def _naming(self, db: sqlite3.Connection, ids: Sequence[int]) -> list[int]:
        holders: set[int] = set()
        for at in range(0, len(ids), self.IN_PART):  # a purge may name thousands
            part = ids[at : at + self.IN_PART]
            marks = ",".join("?" * len(part))
            holders.update(
                r[0] for r in db.execute(f"SELECT DISTINCT holder FROM refs WHERE memory_id IN ({marks})", part)
            )
        return sorted(holders)

    def erase(self) -> None:
        """The lexical table's segments merged into one (FTS5 keeps a deleted row's terms in its
        older segments until they are merged), then the write-ahead log, which holds the pages as
        they were, moved into the database and emptied. With ``secure_delete`` the pages freed
        on the way are zeros."""
        with self.transaction() as db:
            db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- links (``sqlite_links.py``) ------------------------------------------------------------
    def write_links(
        self,
        mentions: Sequence[tuple[int, Sequence[Mention]]],
        ids: Sequence[int] = (),
        kind: str = "",
        links: Sequence[Link] = (),
    ) -> None:
        if mentions or ids or links:
            with self.transaction() as db:
                sqlite_links.set_mentions(db, mentions)
                sqlite_links.set_links(db, ids, kind, links)

    def links(self, ids: Sequence[int], *, max_share: float, limit: int) -> list[Edge]:
        with self._lock:
            return sqlite_links.read(self._db, ids, max_share, limit)

    def entity_counts(self, limit: int = 50) -> list[tuple[Mention, int]]:
        with self._lock:
            return sqlite_links.entity_counts(self._db, limit)

    def set_vectors(self, ids: Sequence[int], vectors: np.ndarray | None, *, column: str = VECTOR) -> None:
        """Stored vectors for memories: ``column`` "vector" (the memory's own) or "reply_vector"
        (a turn's reply), or one of the second reader's (``SECOND_COLUMNS``); ``vectors`` None:
        cleared."""
        if column not in VECTOR_COLUMNS + SECOND_COLUMNS:
            raise ValueError(f"no vector column {column!r}")
        blobs = [None] * len(ids) if vectors is None else [np.asarray(v, dtype=np.float32).tobytes() for v in vectors]
        with self.transaction() as db:
            if column in SECOND_COLUMNS:  # not indexed: the index has nothing to catch up on
                db.executemany(f"UPDATE memories SET {column} = ? WHERE id = ?", zip(blobs, ids))
                return
            seq = self._bump(db)
            db.executemany(
                f"UPDATE memories SET {column} = ?, vseq = ? WHERE id = ?",
                [(blob, seq, rid) for rid, blob in zip(ids, blobs)],
            )

    def replies_pending(self, limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, reply) of turns whose reply has no vector yet, oldest first."""
        with self._lock:
            # named: without statistics SQLite picks the (kind, state) index and reads every turn,
            # where the partial index holds only the waiting ones
            rows = self._db.execute(
                "SELECT id, response FROM memories INDEXED BY memories_reply_pending"
                " WHERE kind = 'turn' AND response != '' AND reply_vector IS NULL ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def second_pending(self, limit: int = 10_000) -> list[int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM memories INDEXED BY memories_second_pending WHERE second_vector IS NULL"
                " OR (second_reply_vector IS NULL AND kind = 'turn' AND response != '') ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        return [r[0] for r in rows]

    def second_vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return blob_vectors(
            ids, self._rows_in("SELECT id, second_vector, second_reply_vector FROM memories WHERE id IN ({ids})", ids)
        )

    # -- reads (``record_reads.RecordReads``: get, get_many, records, count) -------------------
    IN_PART = 500  # SQLite takes at most 32,766 parameters a statement; a few hundred read fast

    def _select(
        self, where: str, params: Sequence, order: str = "", limit: int | None = None, offset: int = 0, *, extra=True
    ) -> list[MemoryRecord]:
        sql = f"SELECT {_COLUMNS if extra else _COLUMNS_BUT_EXTRA} FROM memories WHERE {where} ORDER BY {order or self.ORDER}"
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        with self._lock:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        return [record_from_row(self.user, r) for r in rows]

    def _column(self, select: str, where: str, params: Sequence, order: str = "") -> list:
        sql = f"SELECT {select} FROM memories WHERE {where}" + (f" ORDER BY {order}" if order else "")
        with self._lock:
            return [r[0] for r in self._db.execute(sql, tuple(params)).fetchall()]

    def _is(self, column: str, value: object) -> tuple[str, list]:
        return f"{column} = ?", [value]

    def _at_least(self, column: str, value: float) -> tuple[str, list]:
        return f"{column} >= ?", [value]

    def _one_of(self, column: str, values: Sequence) -> tuple[str, list]:
        # a day is stored as its ISO text
        return f"{column} IN ({','.join('?' * len(values))})", [
            v.isoformat() if isinstance(v, date) else v for v in values
        ]

    def extra_at(self, ids: Sequence[int], path: Sequence[str]) -> dict[int, str]:
        where = "$" + "".join(f".{json.dumps(key, ensure_ascii=False)}" for key in path)
        rows = self._rows_in(  # ?1: the path, then the ids
            "SELECT id, json_extract(extra, ?1) FROM memories WHERE id IN ({ids}) AND json_type(extra, ?1) = 'text'",
            list(dict.fromkeys(int(i) for i in ids)),
            (where,),
        )
        return {int(r[0]): r[1] for r in rows}

    def vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        dim = self.dim
        own: np.ndarray = np.zeros((len(ids), dim), dtype=np.float32)
        reply: np.ndarray = np.zeros((len(ids), dim), dtype=np.float32)
        pos = {rid: i for i, rid in enumerate(ids)}
        for rid, *blobs in self._rows_in("SELECT id, vector, reply_vector FROM memories WHERE id IN ({ids})", ids):
            for out, blob in zip((own, reply), blobs):
                if blob is not None and len(blob) == dim * 4:
                    out[pos[rid]] = np.frombuffer(blob, dtype=np.float32)
        return own, reply

    def index_vectors_since(
        self, seq: int, top: int | None = None
    ) -> tuple[list[int], list[int], list[bytes], int, int | None]:
        """Changes to the index since ``seq`` (-1: everything): (index ids to drop, index ids to
        (re)add, their vectors, now, the new ``top``). Every memory that is not deleted is in the
        index, archived ones too (the second tier); a turn's reply vector under
        ``id + REPLY_ID_OFFSET``.

        ``top``: the highest memory id whose vectors the index has held (None: not known). A memory
        above it, such as the turn just stored, has nothing in the index to drop: an inverted
        file removes ids by testing every vector of every list, once per catch-up that drops any
        (about half a millisecond at 190k vectors: docs/benchmarks-journal.md, "The 100k turn, fifth
        part"), however few the ids. The
        new top is the highest id among the changes read, so every memory whose vectors the index
        has ever held is at or below it."""
        with self._lock:
            now = self.vseq()
            changed = self._db.execute(
                "SELECT id, vector, reply_vector FROM memories WHERE vseq > ?", (seq,)
            ).fetchall()
            gone = [r[0] for r in self._db.execute("SELECT id FROM tombstones WHERE vseq > ?", (seq,))]
        drop: list[int] = []
        if seq >= 0:  # a rebuild starts from nothing
            for rid in gone + [r[0] for r in changed]:
                if top is not None and rid > top:
                    continue  # never in the index
                drop += [rid, rid + REPLY_ID_OFFSET]
        ids: list[int] = []
        blobs: list[bytes] = []
        for rid, vector, reply in changed:
            for i, blob in ((rid, vector), (rid + REPLY_ID_OFFSET, reply)):
                if blob is not None:
                    ids.append(i)
                    blobs.append(blob)
        if seq < 0:
            top = max((r[0] for r in changed), default=0)
        elif top is not None:
            top = max([top, *(r[0] for r in changed)])
        return drop, ids, blobs, now, top

    def meta(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT key, value FROM meta WHERE key NOT IN ('user', 'vseq')").fetchall())

    @staticmethod
    def _places(places: Iterable[tuple[date, int]]) -> Iterator[tuple[str, list]]:
        """(condition, parameters) of look-ups of turns by their (day, position) places, 300 a
        statement."""
        distinct = list(dict.fromkeys(places))
        for start in range(0, len(distinct), 300):
            part = distinct[start : start + 300]
            # one index look-up per place (a row-value IN list would make SQLite scan every turn);
            # the list is filled up to a multiple of _PLACES_STEP with a place no row has (no day
            # is empty), so that the statement's text recurs and SQLite's plan for its long OR,
            # which costs more to make than the look-ups, comes from the connection's cache
            params = [v for d, p in part for v in (d.isoformat(), p)] + ["", -1] * (-len(part) % _PLACES_STEP)
            yield " OR ".join("(day = ? AND position = ?)" for _ in range(len(params) // 2)), params

    def _rows(self, sql: str, params: Sequence) -> list[tuple]:
        """Rows as plain tuples (cheaper to unpack than the connection's named rows)."""
        with self._lock:
            cur = self._db.cursor()
            cur.row_factory = None
            return cur.execute(sql, tuple(params)).fetchall()

    def _rows_in(self, sql: str, ids: Sequence[int], first: Sequence = ()) -> list[tuple]:
        """``_rows`` of ``sql`` whose ``{ids}`` is the list of ``ids``' parameters, ``IN_PART`` ids a
        statement, the statements' rows one after the other. ``first``: parameters before the
        ids' (the same in every statement)."""
        rows: list[tuple] = []
        for start in range(0, len(ids), self.IN_PART):
            part = list(ids[start : start + self.IN_PART])
            rows += self._rows(sql.format(ids=",".join("?" * len(part))), [*first, *part])
        return rows

    def pool(self, ids: Iterable[int], cues: Callable[[], np.ndarray]) -> PoolRows:
        """The vectors are read in the same statements as the rows, the neighbours' rows without
        their texts but the reply's (they are never shown: no record is made of them); the
        cosines are numpy's, worked out once the rows are read."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        found: dict[int, MemoryRecord] = {}
        blobs: dict[int, tuple[bytes | None, bytes | None]] = {}
        n = len(MEMORY_COLUMNS)
        for values in self._rows_in(
            f"SELECT {_COLUMNS}, vector, reply_vector FROM memories WHERE id IN ({{ids}}) ORDER BY {self.ORDER}",
            wanted,
        ):
            rec = record_from_row(self.user, values[:n])
            found[rec.stored_id] = rec
            blobs[rec.stored_id] = (values[n], values[n + 1])
        places = {(r.day, r.position + d) for r in found.values() if r.kind == Kind.TURN for d in (-1, 1)}
        beside: list[Neighbour] = []
        for where, params in self._places(sorted(places)):
            for rid, day, position, response, vector, reply in self._rows(
                "SELECT id, day, position, response, vector, reply_vector FROM memories"
                f" WHERE +kind = 'turn' AND ({where}) ORDER BY {self.ORDER}",
                params,
            ):
                beside.append(Neighbour(rid, date.fromisoformat(day), position, bool(response.strip())))
                blobs.setdefault(rid, (vector, reply))
        dim = self.dim
        own: np.ndarray = np.zeros((len(blobs), dim), dtype=np.float32)
        replies: np.ndarray = np.zeros((len(blobs), dim), dtype=np.float32)
        row: dict[int, int] = {}
        for i, (rid, (vector, reply)) in enumerate(blobs.items()):
            row[rid] = i
            if vector is not None and len(vector) == dim * 4:
                own[i] = np.frombuffer(vector, dtype=np.float32)
            if reply is not None and len(reply) == dim * 4:
                replies[i] = np.frombuffer(reply, dtype=np.float32)
        return PoolRows(found, beside, row, _cosines(own, replies, cues()))

    def lexical(self, terms: Sequence[str], limit: int) -> list[SearchHit]:
        if not terms:
            return []
        index = self._lexical_index() if searchable(terms) else None
        if index is not None:
            return [SearchHit(rid, Side.WORDS, score) for rid, score in index.search(terms, limit)]
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, -bm25(memories_fts) FROM memories_fts"
                " WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT ?",
                (_match(terms), limit),
            ).fetchall()
        return [SearchHit(r[0], Side.WORDS, float(r[1])) for r in rows]

    def documents_with(self, terms: Sequence[str]) -> tuple[int, list[int]]:
        index = self._lexical_index() if searchable(terms) else None
        if index is not None:
            return index.documents_with(terms)
        with self._lock:
            rows = int(self._db.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0])
            return rows, [
                int(
                    self._db.execute(
                        "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH ?", (_match([t]),)
                    ).fetchone()[0]
                )
                for t in terms
            ]

    # -- the lexical table in memory (large memories) -------------------------------------------
    def _lexical_index(self):
        if self._lexical is None:
            with self._lock:
                top = self._db.execute("SELECT MAX(id) FROM memories").fetchone()[0] or 0
            if top < LEXICAL_INDEX_MIN:
                return None
            with self._lock:
                if self._lexical is None:
                    self._lexical = LexicalCache(self._lexical_rows, self._lexical_changes, self.vseq)
        return self._lexical.ready()

    def _lexical_rows(self) -> tuple[int, list[tuple[int, str]]]:
        """(vseq, every row of the lexical table), read on a connection of its own so that the
        store's turns go on meanwhile."""
        seq = self.vseq()
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT rowid, tokens FROM memories_fts").fetchall()
        finally:
            con.close()
        return seq, rows

    def _lexical_changes(self, since: int) -> tuple[int, list[int], list[tuple[int, str]]]:
        """(vseq, the memories changed or deleted since ``since``, the rows of them still in the
        lexical table)."""
        with self._lock:
            now = self.vseq()
            changed = [
                r[0]
                for r in self._db.execute(
                    "SELECT id FROM memories WHERE vseq > ? UNION SELECT id FROM tombstones WHERE vseq > ?",
                    (since, since),
                )
            ]
            rows: list[tuple[int, str]] = []
            for start in range(0, len(changed), 500):
                part = changed[start : start + 500]
                rows += self._db.execute(
                    f"SELECT rowid, tokens FROM memories_fts WHERE rowid IN ({','.join('?' * len(part))})", part
                ).fetchall()
        return now, changed, rows

    def settle(self) -> None:
        """Until the lexical table's build in memory, if one is under way, is done."""
        if self._lexical is not None:
            self._lexical.wait()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class SqliteStores:
    """Every user's memories under one home folder: ``users/<key>/memory.db`` and ``index.faiss``."""

    def __init__(self, home: Path | str, *, tokenizer: Tokenizer | None = None):
        self.home = Path(home)
        self.tokenizer = tokenizer or Tokenizer()
        (self.home / "users").mkdir(parents=True, exist_ok=True)

    def user_dir(self, user: str) -> Path:
        return self.home / "users" / user_key(user)

    def open(self, user: str, *, dim: int, vectors_id: str) -> SqliteUserStore:
        return SqliteUserStore(
            self.user_dir(user) / "memory.db", user, dim=dim, vectors_id=vectors_id, tokenizer=self.tokenizer
        )

    def users(self) -> list[str]:
        names = []
        for folder in sorted((self.home / "users").iterdir()):
            db = folder / "memory.db"
            name = stored_user(db) if db.exists() else None
            if name:
                names.append(name)
        return names

    def has_user(self, user: str) -> bool:
        return (self.user_dir(user) / "memory.db").exists()

    def delete_user(self, user: str) -> None:
        shutil.rmtree(self.user_dir(user), ignore_errors=True)

    def exclusive(self, user: str, purpose: str) -> ContextManager:
        """A lock file in the user's folder."""
        return _file_lock(self.user_dir(user) / f".{purpose}.lock")

    def close(self) -> None:
        """Nothing is held beyond the users' stores, which the bank closes."""
