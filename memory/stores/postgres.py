"""Every user's memories in one PostgreSQL database with pgvector: the shared store that several
app workers use at once. The store interface of ``stores/base.py``, like the SQLite store, so that
the bank's retrieval, forgetting, imports and exports run unchanged over it.

* Scoping: every statement names its user (``owner = %s``) in the SQL itself; a store object
  holds nothing but its user's name. The one thing a worker keeps is the lexical postings it has
  read (``PostingsCache``), checked against the user's row at every search, so that nothing kept
  goes stale when another worker writes, deletes or re-creates that user. Memory ids are each
  user's own (1, 2, ...), as in SQLite.
* Writes: one transaction each, which first locks the user's row (``mem_users``), so that two
  workers writing one user's turns at once give them distinct ids and places and keep the
  counts consistent.
* Rows: a memory's fields and vectors in ``memories``; the fields each recall rewrites
  (strength, last recall, recall count) in ``mem_recall``, a narrow table beside it, so that a
  reinforcement rewrites a few dozen bytes in place instead of the memory's row with both vectors
  and their index entries.
* Dense search: ``embedding <#> q`` (inner product on normalised vectors, like FAISS) over the
  user's memories of both tiers and over turns' reply vectors (``reply_embedding``). A user with fewer than ``HNSW_MIN`` memories is
  searched exactly through the btree on owner; from ``HNSW_MIN`` on, that user gets partial HNSW
  indexes of their own (``WHERE owner = '...'``), built concurrently in the background, so that
  one user's search never walks another user's graph and never loses hits to a filter. A chat
  turn of such a user does not wait for the graph: its own vector waits in ``pending_embedding``
  (searched exactly, read by every read) until the reply worker's update or the store's
  indexing thread puts it in ``embedding``; ``settle`` waits for that.
* Lexical search: BM25 over a postings table (``lex_postings``: owner, term, memory, term
  frequency, document length; the primary key holds them all, for index-only scans) with the
  per-user document count and token total kept on the user's row, scored with numpy from the
  postings the worker keeps. Terms are the tokens of the stores' ``memory.lexical.Tokenizer`` (jieba words for
  Chinese, stemmed English words, the days a turn refers to: ``documents.lexical_document``), so the scores equal SQLite FTS5's
  ``bm25()`` (``memory/bm25.py``) on the same text: the two stores rank alike.

Its parts: the schema's steps (``pg_migrations.py``), the postings a worker keeps and BM25 over
them (``pg_postings.py``), the big users' HNSW graphs (``pg_hnsw.py``), the links
(``postgres_links.py``); this module is the store itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Sequence

import numpy as np
import psycopg
from psycopg import sql

from ..lexical import Tokenizer
from ..records import Kind, MemoryRecord, State
from . import pg_migrations, postgres_links
from .base import SECOND_COLUMNS, VECTOR, VECTOR_COLUMNS, Edge, Link, Mention, Neighbour, PoolRows, SearchHit, Side
from .documents import term_counts
from .pg_db import Database, one
from .pg_hnsw import HNSW_EF_SEARCH, HNSW_MIN, HnswIndexes
from .pg_postings import NO_POSTINGS, PostingsCache, bm25_top, unpack
from .record_reads import RecordReads
from .references import named_in, without_references
from .rows import MEMORY_COLUMNS, blob_vectors, record_from_row

log = logging.getLogger(__name__)

_SPLIT_AT = 32  # candidates from which ``pool`` reads two halves at once
_READ_AHEAD_S = 2.0  # how long vectors read with a pool's rows stand for a fresh read of them
# the latest turns of a day whose vectors come with a read of that day's turns: the chat turn's
# conversation cue takes the latest six (``core.companion.TALK_TURNS``)
_READ_AHEAD_TURNS = 8
WARM_POSTINGS_FROM = 10_000  # memories from which a worker reads a user's postings whole at open


def _read_as(column: str, *, extra: bool = True) -> str:
    """A memory column as a read selects it: ``extra`` as its JSON text, which the record parses
    when its extra fields are first used (``records.ExtraFields``), not the driver at every read;
    or nothing, where the read leaves them out (``records(extra=False)``)."""
    if column != "extra":
        return column
    return f"{column}::text AS {column}" if extra else f"NULL AS {column}"


_COLUMNS = ", ".join(_read_as(c) for c in MEMORY_COLUMNS)
_COLUMNS_BUT_EXTRA = ", ".join(_read_as(c, extra=False) for c in MEMORY_COLUMNS)
# a memory's row: its own fields and its recall fields (unqualified names resolve through USING)
_MEMORY_ROWS = "memories JOIN mem_recall USING (owner, id)"
# where each of ``VECTOR_COLUMNS`` is kept
_STORED = dict(zip(VECTOR_COLUMNS, ("embedding", "reply_embedding")))
# a memory's own vector as a read sees it: in the graph's column, or still waiting to join it
_OWN = "COALESCE(embedding, pending_embedding)"
_READ_VECTOR = {"embedding": _OWN, "reply_embedding": "reply_embedding"}
# what ``pool`` reads of a candidate's neighbour besides its vectors
_NEIGHBOUR_COLUMNS = ("id", "response", "day", "position")


def as_array(value) -> np.ndarray | None:
    """A fetched pgvector value as float32 (the adapters give arrays or ``Vector`` objects)."""
    if value is None:
        return None
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def _vector_values(vectors: np.ndarray | None, n: int) -> list[np.ndarray | None]:
    """The values a write of ``n`` rows' vectors sends (None: each cleared)."""
    return [None] * n if vectors is None else [np.asarray(v, dtype=np.float32) for v in vectors]


def as_vector_value(value) -> np.ndarray | None:
    """A vector to store, from an array or the SQLite store's float32 bytes."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(value), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


class PgUserStore(RecordReads):
    """All memories of one user in the shared database: the ``base.UserStore`` port and the
    engine's ``base.Upkeep`` (``OpenStore``)."""

    def __init__(self, stores: "PostgresStores", user: str, dim: int):
        self.stores = stores
        self.db = stores.db
        self.user = user
        self.dim = dim
        # the vectors of a day's latest turns read with its rows (``records``), kept for the
        # ``vectors`` that follows on the same thread: (when, this store's write count then, id:
        # vectors)
        self._read_ahead = threading.local()
        self._writes = 0
        self._joining: set[Future] = set()  # own vectors being moved into the graph
        self._joining_lock = threading.Lock()
        with self.db.transaction() as cur:
            docs, tokens = self._lock_user(cur)
        if docs >= WARM_POSTINGS_FROM and tokens <= stores.postings.most * 3 // 4:  # room left for others
            # a big user's postings read whole in the background, as the SQLite store builds
            # its lexical table in memory: a search then fetches only what is new, and the
            # first searches of a worker do not read a common word's thousands of postings
            stores.searches.submit(self._warm_postings)
        # vectors a worker stopped before it had moved them (at most a few turns)
        waiting = self.db.fetchall(
            "SELECT id FROM memories WHERE owner = %s AND pending_embedding IS NOT NULL", (user,)
        )
        if waiting:
            self._join_graph([r[0] for r in waiting])

    # -- plumbing -----------------------------------------------------------------------------
    def _lock_user(self, cur: psycopg.Cursor) -> tuple[int, int]:
        """Create the user's row if missing and lock it until the transaction ends; returns the
        lexical (document count, token total)."""
        docs, tokens = one(
            cur.execute(
                "INSERT INTO mem_users (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name"
                " RETURNING lex_docs, lex_tokens",
                (self.user,),
            ).fetchone()
        )
        return docs, tokens

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Cursor]:
        """A write's transaction (what was read ahead before it is read again after it)."""
        self._writes += 1
        with self.db.transaction() as cur:
            yield cur

    def close(self, *, save: bool = True) -> None:
        """Nothing to close or save: the pool belongs to the ``PostgresStores``."""

    def sync(self) -> None:
        self.stores.maybe_build_hnsw(self.user, self.dim)

    def flush(self) -> None:
        """Nothing is kept in the process."""

    def tidy(self) -> None:
        """Nothing: the server checkpoints its own log."""

    def settle(self) -> None:
        """Until the own vectors the indexing thread moves into the user's HNSW graph are there
        (a turn's with a reply goes in with the reply's vector)."""
        with self._joining_lock:
            joining = list(self._joining)
        for future in joining:
            future.result()

    def _join_graph(self, ids: Sequence[int]) -> None:
        """Move the waiting own vectors of ``ids`` into the graph's column, in the background."""
        future = self.stores.indexing.submit(self._move_pending, [int(i) for i in ids])
        with self._joining_lock:
            self._joining.add(future)
        future.add_done_callback(self._joined)

    def _joined(self, future: Future) -> None:
        with self._joining_lock:
            self._joining.discard(future)

    def _move_pending(self, ids: list[int]) -> None:
        try:
            # a row rewritten meanwhile (a new vector, a deletion) has nothing waiting any more
            self.db.execute(
                "UPDATE memories SET embedding = pending_embedding, pending_embedding = NULL"
                " WHERE owner = %s AND id = ANY(%s) AND pending_embedding IS NOT NULL",
                (self.user, ids),
            )
        except Exception as exc:  # noqa: BLE001 - still searched where it waits; moved at the next open
            log.warning("own vectors of %s left waiting for the graph: %s", self.user, exc)

    def meta(self) -> dict[str, str]:
        return dict(self.db.fetchall("SELECT key, value FROM mem_meta WHERE owner = %s", (self.user,)))

    def set_meta(self, key: str, value: str) -> None:
        with self._writing() as cur:
            self._lock_user(cur)
            cur.execute(
                "INSERT INTO mem_meta (owner, key, value) VALUES (%s, %s, %s) ON CONFLICT (owner, key)"
                " DO UPDATE SET value = EXCLUDED.value",
                (self.user, key, value),
            )

    def _index_text(self, cur: psycopg.Cursor, rid: int, kind: Kind, text: str, day: date) -> tuple[int, int]:
        """Postings of a memory; returns (1 document, its token count) for the counters."""
        tf, dl = term_counts(self.stores.tokenizer, kind, text, day)
        if tf:
            cur.executemany(
                "INSERT INTO lex_postings (owner, term, memory_id, tf, dl) VALUES (%s, %s, %s, %s, %s)",
                [(self.user, term, rid, n, dl) for term, n in tf.items()],
            )
        cur.execute("UPDATE memories SET lex_len = %s WHERE owner = %s AND id = %s", (dl, self.user, rid))
        return 1, dl

    def _unindex(self, cur: psycopg.Cursor, ids: Sequence[int]) -> tuple[int, int]:
        """Postings of memories removed (deleted, or their text replaced); (-documents, -tokens)."""
        row = one(
            cur.execute(
                "SELECT count(*), COALESCE(sum(lex_len), 0) FROM memories WHERE owner = %s AND id = ANY(%s)",
                (self.user, list(ids)),
            ).fetchone()
        )
        cur.execute("DELETE FROM lex_postings WHERE owner = %s AND memory_id = ANY(%s)", (self.user, list(ids)))
        cur.execute("UPDATE mem_users SET lex_epoch = lex_epoch + 1 WHERE name = %s", (self.user,))
        return -int(row[0]), -int(row[1])

    def _count(self, cur: psycopg.Cursor, docs: int, tokens: int) -> None:
        if docs or tokens:
            cur.execute(
                "UPDATE mem_users SET lex_docs = lex_docs + %s, lex_tokens = lex_tokens + %s WHERE name = %s",
                (docs, tokens, self.user),
            )

    # -- writes -------------------------------------------------------------------------------
    def insert(
        self, records: Sequence[MemoryRecord], vectors: np.ndarray | None, *, keep_ids: bool = False
    ) -> list[MemoryRecord]:
        """Store new memories; ids are the user's own (1, 2, ...; never reused, like SQLite's
        AUTOINCREMENT). ``keep_ids``: the records' ids and places are kept (copying a store)."""
        out: list[MemoryRecord] = []
        if not records:
            return out
        counts = [term_counts(self.stores.tokenizer, rec.kind, rec.text, rec.day) for rec in records]
        if len(records) == 1 and not keep_ids:
            return [self._insert_one(records[0], None if vectors is None else vectors[0], *counts[0])]
        tokens = sum(dl for _, dl in counts)
        with self._writing() as cur:
            # the user's row made or locked (ids and positions are settled under that lock), its
            # ids taken and its lexical counts grown, in one statement
            if keep_ids:
                ids = [r.stored_id for r in records]
                cur.execute(
                    "INSERT INTO mem_users AS u (name, last_id, lex_docs, lex_tokens, lex_epoch) VALUES (%s, %s, %s, %s, 1)"
                    " ON CONFLICT (name) DO UPDATE SET last_id = GREATEST(u.last_id, EXCLUDED.last_id),"
                    " lex_docs = u.lex_docs + EXCLUDED.lex_docs, lex_tokens = u.lex_tokens + EXCLUDED.lex_tokens,"
                    " lex_epoch = u.lex_epoch + 1",
                    (self.user, max(ids), len(records), tokens),
                )
            else:
                last = one(
                    cur.execute(
                        "INSERT INTO mem_users AS u (name, last_id, lex_docs, lex_tokens) VALUES (%s, %s, %s, %s)"
                        " ON CONFLICT (name) DO UPDATE SET last_id = u.last_id + EXCLUDED.last_id,"
                        " lex_docs = u.lex_docs + EXCLUDED.lex_docs, lex_tokens = u.lex_tokens + EXCLUDED.lex_tokens"
                        " RETURNING last_id",
                        (self.user, len(records), len(records), tokens),
                    ).fetchone()
                )[0]
                ids = list(range(last - len(records) + 1, last + 1))
            free: dict[date, int] = {}
            rows: list[tuple] = []
            recall: list[tuple] = []
            postings: list[tuple] = []
            refs: list[tuple] = []
            for i, rec in enumerate(records):
                vec = None if vectors is None else np.asarray(vectors[i], dtype=np.float32)
                if rec.kind == Kind.TURN and not keep_ids:
                    if rec.day not in free:
                        free[rec.day] = int(
                            one(
                                cur.execute(
                                    "SELECT COALESCE(MAX(position) + 1, 0) FROM memories"
                                    " WHERE owner = %s AND kind = 'turn' AND day = %s",
                                    (self.user, rec.day),
                                ).fetchone()
                            )[0]
                        )
                    rec = rec.with_(position=max(rec.position, free[rec.day]))
                    free[rec.day] = rec.position + 1
                tf, dl = counts[i]
                rid = ids[i]
                rows.append(
                    (
                        self.user,
                        rid,
                        rec.kind.value,
                        rec.text,
                        rec.query,
                        rec.response,
                        rec.day,
                        rec.position,
                        rec.created_at.isoformat(),
                        rec.importance,
                        bool(rec.pinned),
                        rec.state.value,
                        vec,
                        dl,
                        json.dumps(rec.extra, ensure_ascii=False),
                        rec.archived_at.isoformat() if rec.archived_at else None,
                    )
                )
                recall.append(
                    (
                        self.user,
                        rid,
                        rec.strength,
                        rec.last_recall.isoformat() if rec.last_recall else None,
                        rec.recall_count,
                    )
                )
                postings += [(self.user, term, rid, n, dl) for term, n in tf.items()]
                refs += [(self.user, named, rid) for named in named_in(rec.extra)]
                out.append(rec.with_(id=rid))
            # all rows in one pipelined batch, then the recall fields and the postings each in one
            # COPY (a round trip per row is what makes a bulk write slow); vectors go in binary
            # (%b), not as text
            cur.executemany(
                "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at,"
                " importance, pinned, state, embedding, lex_len, extra, archived_at)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%b,%s,%s,%s)",
                rows,
            )
            with cur.copy("COPY mem_recall (owner, id, strength, last_recall, recall_count) FROM STDIN") as copy:
                for row in recall:
                    copy.write_row(row)
            if postings:
                with cur.copy("COPY lex_postings (owner, term, memory_id, tf, dl) FROM STDIN") as copy:
                    for row in postings:
                        copy.write_row(row)
            if refs:
                cur.executemany("INSERT INTO mem_refs (owner, memory_id, holder) VALUES (%s, %s, %s)", refs)
        return out

    def _insert_one(self, rec: MemoryRecord, vector: np.ndarray | None, tf: dict[str, int], dl: int) -> MemoryRecord:
        """One new memory (a chat turn) in one round trip: every statement of the transaction
        sent at once (a pipeline), its id and place worked out by the database. The first
        statement locks the user's row, and each statement after it sees what was committed
        before that lock (READ COMMITTED takes a snapshot per statement): a turn's place is the
        day's next free one even when another worker has just written that day."""
        self._writes += 1
        vec = None if vector is None else np.asarray(vector, dtype=np.float32)
        # a user searched through an HNSW graph: the vector joins the graph after the turn, so
        # that the turn does not wait for the graph's insertion (a walk of the graph and its
        # neighbours' links rewritten, the most of an insert's time). Until then it waits in
        # ``pending_embedding``, which every read and the dense search see. A turn with a reply
        # gets its reply's vector from the reply worker, whose update rewrites the row and so
        # puts both vectors in their graphs (``set_vectors``): the own vector's insertion costs
        # nothing more there. Any other memory's is moved by the store's indexing thread.
        deferred = vec is not None and self.stores.uses_hnsw(self.user)
        column = "pending_embedding" if deferred else "embedding"
        # a turn goes after the day's turns (its ``position`` is what the bank found free)
        position = (
            "GREATEST(%(position)s, (SELECT COALESCE(MAX(position) + 1, 0) FROM memories"
            " WHERE owner = %(u)s AND kind = 'turn' AND day = %(day)s))"
            if rec.kind == Kind.TURN
            else "%(position)s"
        )
        new_id = "(SELECT last_id FROM mem_users WHERE name = %(u)s)"
        params = {
            "u": self.user,
            "kind": rec.kind.value,
            "text": rec.text,
            "query": rec.query,
            "response": rec.response,
            "day": rec.day,
            "position": rec.position,
            "created_at": rec.created_at.isoformat(),
            "importance": rec.importance,
            "pinned": bool(rec.pinned),
            "state": rec.state.value,
            "vec": vec,
            "dl": dl,
            "extra": json.dumps(rec.extra, ensure_ascii=False),
            "archived_at": rec.archived_at.isoformat() if rec.archived_at else None,
            "strength": rec.strength,
            "last_recall": rec.last_recall.isoformat() if rec.last_recall else None,
            "recall_count": rec.recall_count,
            "terms": list(tf),
            "tfs": list(tf.values()),
            "named": named_in(rec.extra),
        }
        with self.db.connection() as con, con.pipeline(), con.cursor() as cur, con.cursor() as placed:
            with con.transaction():
                # the user's row made or locked, an id taken and the lexical counts grown
                cur.execute(
                    "INSERT INTO mem_users AS u (name, last_id, lex_docs, lex_tokens) VALUES (%(u)s, 1, 1, %(dl)s)"
                    " ON CONFLICT (name) DO UPDATE SET last_id = u.last_id + 1, lex_docs = u.lex_docs + 1,"
                    " lex_tokens = u.lex_tokens + EXCLUDED.lex_tokens",
                    params,
                )
                placed.execute(
                    "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at,"
                    f" importance, pinned, state, {column}, lex_len, extra, archived_at)"
                    f" VALUES (%(u)s, {new_id}, %(kind)s, %(text)s, %(query)s, %(response)s, %(day)s, {position},"
                    " %(created_at)s, %(importance)s, %(pinned)s, %(state)s, %(vec)b, %(dl)s, %(extra)s, %(archived_at)s)"
                    " RETURNING id, position",
                    params,
                )
                cur.execute(
                    "INSERT INTO mem_recall (owner, id, strength, last_recall, recall_count)"
                    f" VALUES (%(u)s, {new_id}, %(strength)s, %(last_recall)s, %(recall_count)s)",
                    params,
                )
                if tf:
                    cur.execute(
                        f"INSERT INTO lex_postings (owner, term, memory_id, tf, dl) SELECT %(u)s, t.term, {new_id}, t.tf,"
                        " %(dl)s FROM unnest(%(terms)s::text[], %(tfs)s::int[]) AS t(term, tf)",
                        params,
                    )
                if params["named"]:
                    cur.execute(
                        f"INSERT INTO mem_refs (owner, memory_id, holder) SELECT %(u)s, r, {new_id}"
                        " FROM unnest(%(named)s::bigint[]) AS r",
                        params,
                    )
            rid, pos = one(placed.fetchone())
        if deferred and not (rec.kind == Kind.TURN and rec.response != ""):  # see ``replies_pending``
            self._join_graph([rid])
        return rec.with_(id=int(rid), position=int(pos))

    def replace_text(self, rid: int, text: str, vector: np.ndarray | None, **fields) -> None:
        """New text (and vector) for a memory: an edited summary, a regenerated reply."""
        sets = sql.SQL("").join(sql.SQL(", {} = %s").format(sql.Identifier(_STORED.get(k, k))) for k in fields)
        # extra comes as JSON text, which a jsonb column takes; a vector field as bytes or an array
        values = [as_vector_value(v) if k in _STORED else v for k, v in fields.items()]
        with self._writing() as cur:
            self._lock_user(cur)
            row = cur.execute(
                "SELECT kind, day FROM memories WHERE owner = %s AND id = %s", (self.user, rid)
            ).fetchone()
            if row is None:
                return
            docs, tokens = self._unindex(cur, [rid])
            vec = None if vector is None else np.asarray(vector, dtype=np.float32)
            cur.execute(
                sql.SQL(
                    # new words: the second reader's vectors are of the old ones (the reply worker makes them again)
                    "UPDATE memories SET text = %s, embedding = %s, pending_embedding = NULL,"
                    " second_vector = CASE WHEN text = %s THEN second_vector END,"
                    " second_reply_vector = CASE WHEN text = %s THEN second_reply_vector END{}"
                    " WHERE owner = %s AND id = %s"
                ).format(sets),
                (text, vec, text, text, *values, self.user, rid),
            )
            if "extra" in fields:  # the memories it names are those of its new extra fields
                cur.execute("DELETE FROM mem_refs WHERE owner = %s AND holder = %s", (self.user, rid))
                named = named_in(json.loads(fields["extra"]))
                if named:
                    cur.executemany(
                        "INSERT INTO mem_refs (owner, memory_id, holder) VALUES (%s, %s, %s)",
                        [(self.user, n, rid) for n in named],
                    )
            d, t = self._index_text(cur, rid, Kind(row[0]), text, row[1])
            self._count(cur, docs + d, tokens + t)

    def update_forgetting(
        self, records: Iterable[MemoryRecord], *, read: Mapping[int, MemoryRecord] | None = None
    ) -> list[int]:
        """Strength / recall fields after reinforcement: one statement over the narrow recall
        table, sent with the user's lock and the commit in one round trip (a pipeline); with
        ``read``, only where the recall count is still the one read (``UserStore``)."""
        records = sorted(records, key=lambda r: r.stored_id)
        if not records:
            return []
        ids = [r.stored_id for r in records]
        params = (
            ids,
            [r.strength for r in records],
            [r.last_recall.isoformat() if r.last_recall else None for r in records],
            [r.recall_count for r in records],
            [read[i].recall_count if read is not None and i in read else None for i in ids],
            self.user,
        )
        with self.db.connection() as con, con.pipeline(), con.cursor() as cur, con.cursor() as done:
            with con.transaction():
                # the user's lock, as every write takes it (nothing fetched: the pipeline goes on)
                cur.execute(
                    "INSERT INTO mem_users (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name",
                    (self.user,),
                )
                done.execute(
                    "UPDATE mem_recall r SET strength = v.strength, last_recall = v.last_recall, recall_count = v.n"
                    " FROM unnest(%s::bigint[], %s::float8[], %s::text[], %s::int[], %s::int[])"
                    " AS v(id, strength, last_recall, n, seen)"
                    " WHERE r.owner = %s AND r.id = v.id AND (v.seen IS NULL OR r.recall_count = v.seen) RETURNING r.id",
                    params,
                )
            # read once the commit is sent with the rest (one round trip)
            written = {int(row[0]) for row in done.fetchall()}
        return [i for i in ids if i not in written]

    def set_state(self, ids: Sequence[int], state: State, when: datetime | None = None) -> int:
        """Archive (``when``: the time of the forgetting pass) or restore memories. Both tiers
        keep their postings and vectors; only retrieval tells them apart."""
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        archived_at = when.isoformat() if (when and state == State.ARCHIVED) else None
        with self._writing() as cur:
            self._lock_user(cur)
            return cur.execute(
                "UPDATE memories SET state = %s, archived_at = %s WHERE owner = %s AND id = ANY(%s) AND state != %s",
                (state.value, archived_at, self.user, ids, state.value),
            ).rowcount

    def set_pinned(self, rid: int, pinned: bool) -> bool:
        with self._writing() as cur:
            self._lock_user(cur)
            return (
                cur.execute(
                    "UPDATE memories SET pinned = %s WHERE owner = %s AND id = %s", (bool(pinned), self.user, rid)
                ).rowcount
                > 0
            )

    def delete(self, ids: Sequence[int]) -> int:
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        with self._writing() as cur:
            self._lock_user(cur)
            docs, tokens = self._unindex(cur, ids)
            postgres_links.forget(cur, self.user, ids)
            n = cur.execute("DELETE FROM memories WHERE owner = %s AND id = ANY(%s)", (self.user, ids)).rowcount
            self._count(cur, docs, tokens)
            self._drop_references(cur, ids)
            return n

    def _drop_references(self, cur: psycopg.Cursor, ids: Sequence[int]) -> None:
        """Every row naming one of ``ids`` at ``REFERENCES`` (found by ``mem_refs``) rewritten without them."""
        gone = sorted({int(i) for i in ids})
        rows = cur.execute(
            "SELECT id, extra::text FROM memories WHERE owner = %s AND id IN"
            " (SELECT holder FROM mem_refs WHERE owner = %s AND memory_id = ANY(%s)) ORDER BY id",
            (self.user, self.user, gone),
        ).fetchall()
        for rid, text in rows:
            if (rewritten := without_references(text, set(gone))) is not None:
                cur.execute(
                    "UPDATE memories SET extra = %s::jsonb WHERE owner = %s AND id = %s", (rewritten, self.user, rid)
                )
        cur.execute("DELETE FROM mem_refs WHERE owner = %s AND memory_id = ANY(%s)", (self.user, gone))

    def naming(self, ids: Sequence[int]) -> list[int]:
        """The memories whose lists at ``REFERENCES`` name one of ``ids``, in id order (what
        ``mem_refs`` keeps as rows are written; off the port: the tests look inside with it)."""
        rows = self.db.fetchall(
            "SELECT DISTINCT holder FROM mem_refs WHERE owner = %s AND memory_id = ANY(%s) ORDER BY holder",
            (self.user, sorted({int(i) for i in ids})),
        )
        return [int(r[0]) for r in rows]

    def erase(self) -> None:
        """Nothing the app can reach: PostgreSQL's dead row versions are its own until its
        autovacuum reclaims them, and its write-ahead log is the server's (docs/deploy.md)."""

    # -- links (``postgres_links.py``; a deleted memory's go with it, by their foreign keys) ----
    def write_links(
        self,
        mentions: Sequence[tuple[int, Sequence[Mention]]],
        ids: Sequence[int] = (),
        kind: str = "",
        links: Sequence[Link] = (),
    ) -> None:
        if mentions or ids or links:
            with self._writing() as cur:
                postgres_links.set_mentions(cur, self.user, mentions)
                postgres_links.set_links(cur, self.user, ids, kind, links)

    def links(self, ids: Sequence[int], *, max_share: float, limit: int) -> list[Edge]:
        with self.db.transaction() as cur:
            return postgres_links.read(cur, self.user, ids, max_share, limit)

    def entity_counts(self, limit: int = 50) -> list[tuple[Mention, int]]:
        with self.db.transaction() as cur:
            return postgres_links.entity_counts(cur, self.user, limit)

    def set_vectors(self, ids: Sequence[int], vectors: np.ndarray | None, *, column: str = VECTOR) -> None:
        """Stored vectors: ``column`` "vector" (the memory's own) or "reply_vector" (a turn's reply),
        or one of the second reader's (``SECOND_COLUMNS``); ``vectors`` None: cleared."""
        if column not in VECTOR_COLUMNS + SECOND_COLUMNS:
            raise ValueError(f"no vector column {column!r}")
        with self._writing() as cur:
            self._lock_user(cur)
            if column in SECOND_COLUMNS:  # bytes beside the row, outside the graph
                blobs = [None] * len(ids) if vectors is None else [np.asarray(v, np.float32).tobytes() for v in vectors]
                cur.executemany(
                    sql.SQL("UPDATE memories SET {} = %s WHERE owner = %s AND id = %s").format(sql.Identifier(column)),
                    [(b, self.user, int(rid)) for rid, b in zip(ids, blobs)],
                )
                return
            # a new own vector replaces one waiting for the graph; a reply's row is rewritten
            # anyway, and takes a waiting own vector into the graph with it
            also = (
                "pending_embedding = NULL"
                if column == "vector"
                else "embedding = COALESCE(pending_embedding, embedding), pending_embedding = NULL"
            )
            cur.executemany(
                sql.SQL("UPDATE memories SET {} = %s, {} WHERE owner = %s AND id = %s").format(
                    sql.Identifier(_STORED[column]), sql.SQL(also)
                ),
                [(v, self.user, int(rid)) for rid, v in zip(ids, _vector_values(vectors, len(ids)))],
            )

    def replies_pending(self, limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, reply) of turns whose reply has no vector yet, oldest first."""
        return [
            (r[0], r[1])
            for r in self.db.fetchall(
                "SELECT id, response FROM memories WHERE owner = %s AND kind = 'turn' AND response != ''"
                " AND reply_embedding IS NULL ORDER BY id LIMIT %s",
                (self.user, int(limit)),
            )
        ]

    def second_pending(self, limit: int = 10_000) -> list[int]:
        return [
            r[0]
            for r in self.db.fetchall(
                "SELECT id FROM memories WHERE owner = %s AND (second_vector IS NULL"
                " OR (second_reply_vector IS NULL AND kind = 'turn' AND response != '')) ORDER BY id LIMIT %s",
                (self.user, int(limit)),
            )
        ]

    def second_vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        rows = self.db.fetchall(
            "SELECT id, second_vector, second_reply_vector FROM memories WHERE owner = %s AND id = ANY(%s)",
            (self.user, wanted),
        )
        return blob_vectors([int(i) for i in ids], rows)

    # -- reads (``record_reads.RecordReads``: get, get_many, records, count) -------------------
    ORDER = 'day, kind COLLATE "C", position, id'
    ORDER_NEWEST = 'day DESC, kind COLLATE "C", position DESC, id DESC'

    def _select(
        self, where: str, params: Sequence, order: str = "", limit: int | None = None, offset: int = 0, *, extra=True
    ) -> list[MemoryRecord]:
        columns = _COLUMNS if extra else _COLUMNS_BUT_EXTRA
        query = f"SELECT {columns} FROM {_MEMORY_ROWS} WHERE owner = %s AND ({where}) ORDER BY {order or self.ORDER}"
        if limit is not None:
            query += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        return [record_from_row(self.user, r) for r in self.db.fetchall(query, (self.user, *params))]

    def _column(self, select: str, where: str, params: Sequence, order: str = "") -> list:
        query = f"SELECT {select} FROM memories WHERE owner = %s AND ({where})" + (
            f" ORDER BY {order}" if order else ""
        )
        return [r[0] for r in self.db.fetchall(query, (self.user, *params))]

    def _is(self, column: str, value: object) -> tuple[str, list]:
        if column == "kind":
            # written out, so that the planner sees a summary's kind is not a turn's and reads the
            # summaries' own index (migration 9); a kind's value is a plain word
            return f"kind = '{Kind(value).value}'", []
        return f"{column} = %s", [value]

    def _one_of(self, column: str, values: Sequence) -> tuple[str, list]:
        return f"{column} = ANY(%s)", [list(values)]

    def _at_least(self, column: str, value: float) -> tuple[str, list]:
        return f"{column} >= %s", [value]

    def extra_at(self, ids: Sequence[int], path: Sequence[str]) -> dict[int, str]:
        ids = list(dict.fromkeys(int(i) for i in ids))
        if not ids:
            return {}
        rows = self.db.fetchall(
            "SELECT id, extra #>> %s, jsonb_typeof(extra #> %s) FROM memories WHERE owner = %s AND id = ANY(%s)",
            (list(path), list(path), self.user, ids),
        )
        return {int(r[0]): r[1] for r in rows if r[2] == "string"}

    def _days_turns(self, where: str, params: Sequence, order: str, *, extra: bool) -> list[MemoryRecord]:
        columns = _COLUMNS if extra else _COLUMNS_BUT_EXTRA
        # one day's turns (a chat turn reads today's): the vectors of the latest come with the
        # rows read anyway, for the conversation's cue, which asks for them next on this thread
        # (``vectors``: a round trip fewer before the reply). Only the latest: the whole day's
        # made a long day's turns slower and slower (docs/benchmarks-journal.md, "A long day's turns")
        latest = "row_number() OVER (ORDER BY position DESC, id DESC) <= %s"
        rows = self.db.fetchall(
            f"SELECT {columns}, CASE WHEN {latest} THEN vector_send({_OWN}) END,"
            f" CASE WHEN {latest} THEN vector_send(reply_embedding) END, {latest} FROM {_MEMORY_ROWS}"
            f" WHERE owner = %s AND ({where}) ORDER BY {order}",
            (*[_READ_AHEAD_TURNS] * 3, self.user, *params),
            binary=True,
        )
        ahead = {int(r[0]): (r[-3], r[-2]) for r in rows if r[-1]}
        self._read_ahead.kept = (time.monotonic(), self._writes, ahead)
        return [record_from_row(self.user, r[:-3]) for r in rows]

    def _halves(self, read: Callable[[list[int]], list[tuple]], ids: list[int]) -> list[tuple]:
        """``read`` of ``ids``, in two halves at once from ``_SPLIT_AT`` ids on, each on a
        connection of its own (each row is a look-up in the heap: one backend reads them one
        after the other)."""
        if len(ids) < _SPLIT_AT:
            return read(ids)
        other = self.stores.searches.submit(read, ids[len(ids) // 2 :])
        return read(ids[: len(ids) // 2]) + other.result()

    def _pool_rows(self, ids: list[int], cues: np.ndarray) -> list[tuple]:
        """The rows of ``ids`` (side 0: every column) and of the turns at the places beside each
        turn among them (side 1: their places and reply, NULL for the rest: no record is made
        of them, and a NULL costs nothing to send), one statement, each row ending with its own
        vector's inner product with each cue, then its reply vector's (not the vectors: they are
        most of what a pool read would send)."""
        place = ", ".join(f"m.{c}" if c in _NEIGHBOUR_COLUMNS else "NULL" for c in MEMORY_COLUMNS)
        names = [f"c{k}" for k in range(len(cues))]
        params: dict[str, Any] = {"u": self.user, "ids": ids}
        params |= {name: np.asarray(cue, dtype=np.float32) for name, cue in zip(names, cues)}

        def products(own: str, reply: str) -> str:
            return ", ".join([*(f"-({own} <#> %({c})s)" for c in names), *(f"-({reply} <#> %({c})s)" for c in names)])

        return self.db.fetchall(
            f"WITH c AS (SELECT {_COLUMNS}, {_OWN} AS v, reply_embedding AS rv"
            f" FROM {_MEMORY_ROWS} WHERE owner = %(u)s AND id = ANY(%(ids)s)),"
            " p AS (SELECT DISTINCT day, position + d AS position FROM c, (VALUES (-1), (1)) AS v(d) WHERE kind = 'turn')"
            f" SELECT 0 AS side, {_COLUMNS}, {products('v', 'rv')} FROM c UNION ALL"
            f" SELECT 1, {place}, {products('COALESCE(m.embedding, m.pending_embedding)', 'm.reply_embedding')}"
            " FROM p JOIN memories m ON m.owner = %(u)s AND m.day = p.day"
            " AND m.position = p.position AND m.kind = 'turn'",
            params,
            binary=True,
        )

    def vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """From what ``records`` of one day's turns read just before on this thread when it holds
        every one of ``ids`` (the same moment's rows and vectors, and no write through this store
        since), else read."""
        kept, self._read_ahead.kept = getattr(self._read_ahead, "kept", None), None
        if kept is not None and kept[1] == self._writes and time.monotonic() - kept[0] < _READ_AHEAD_S:
            sent = kept[2]
            if all(int(i) in sent for i in ids):
                own, reply = (self._from_sent([sent[int(rid)][k] for rid in ids]) for k in (0, 1))
                return own, reply
        own, reply = self._vectors(ids, ("embedding", "reply_embedding"))
        return own, reply

    def pool(self, ids: Iterable[int], cues: Callable[[], np.ndarray]) -> PoolRows:
        """In one statement (or two halves at once), the server sending each row's cosines
        (pgvector's inner product) instead of its vectors; the neighbours' recall state is not
        joined in."""
        ids = list(dict.fromkeys(int(i) for i in ids))
        self._read_ahead.kept = None
        cue = cues()
        c = len(cue)
        if not ids:
            empty: np.ndarray = np.zeros((0, c), dtype=np.float32)
            return PoolRows({}, [], {}, (empty, empty))
        rows = self._halves(lambda part: self._pool_rows(part, cue), ids)
        n = len(MEMORY_COLUMNS)
        found = sorted(
            (record_from_row(self.user, r[1 : n + 1]) for r in rows if r[0] == 0),
            key=lambda r: (r.day, r.kind.value, r.position, r.stored_id),
        )
        # a place may be beside both halves, or be a candidate too
        places = {r[1]: r for r in rows if r[0] == 1}
        rid, response, day, position = (1 + MEMORY_COLUMNS.index(c) for c in _NEIGHBOUR_COLUMNS)
        beside = [
            Neighbour(r[rid], r[day], r[position], bool(r[response].strip()))
            for r in sorted(places.values(), key=lambda r: (r[day], r[position], r[rid]))
        ]
        every = list(dict.fromkeys([*(r.stored_id for r in found), *(b.id for b in beside)]))
        sims = {r[1]: r[n + 1 :] for r in rows}
        both = np.asarray([sims[rid] for rid in every], dtype=np.float64).reshape(len(every), 2 * c)
        # a memory without its own vector is as far from every cue as a zero vector
        own_cos = np.nan_to_num(both[:, :c].astype(np.float32), nan=0.0)
        return PoolRows(
            {r.stored_id: r for r in found},
            beside,
            {rid: i for i, rid in enumerate(every)},
            (own_cos, both[:, c:].astype(np.float32)),
        )

    def _from_sent(self, sent: Sequence[bytes | None]) -> np.ndarray:
        """Vectors sent as pgvector's binary form (``vector_send``) into the rows of one array,
        read by numpy at once; a missing one stays zeros."""
        size = 4 + 4 * self.dim
        zero = bytes(size)
        joined = b"".join(d if d is not None and len(d) == size else zero for d in sent)
        whole = np.frombuffer(joined, ">f4").reshape(len(sent), self.dim + 1)
        return np.ascontiguousarray(whole[:, 1:], dtype=np.float32)

    def _vectors(self, ids: Sequence[int], columns: Sequence[str]) -> list[np.ndarray]:
        """Stored vectors of ``columns`` in the order of ``ids`` (zeros where a row has none),
        each sent as pgvector's binary form (``vector_send``: dimension, then big-endian floats)
        and read with numpy, not made into a Python object per vector."""
        wanted = [int(rid) for rid in ids]
        if not wanted:
            return [self._from_sent([]) for _ in columns]
        sent = sql.SQL(", ").join(sql.SQL(f"vector_send({_READ_VECTOR[c]})") for c in columns)
        rows = self.db.fetchall(
            sql.SQL("SELECT id, {} FROM memories WHERE owner = %s AND id = ANY(%s)").format(sent),
            (self.user, list(dict.fromkeys(wanted))),
            binary=True,
        )
        by_id = {int(row[0]): row[1:] for row in rows}
        return [
            self._from_sent([by_id[rid][k] if rid in by_id else None for rid in wanted]) for k in range(len(columns))
        ]

    def lexical(self, terms: Sequence[str], limit: int) -> list[SearchHit]:
        """The score SQLite's ``bm25()`` gives, from the postings of ``terms``.

        The postings (an index-only scan of the primary key, which holds each posting's term
        frequency and document length) are scored here, with numpy: summing hundreds of
        thousands of postings per memory costs PostgreSQL's executor far more than the same
        arithmetic on arrays (a conversation's latest lines name 50 to 80 terms, common words
        among them). A worker keeps the postings it has read (``PostingsCache``) and then reads
        only the ones added since."""
        terms = list(dict.fromkeys(terms))
        if not terms or limit <= 0:
            return []
        got = self.stores.postings.read(self.user, terms, self._fetch_postings)
        if got is None:
            return []
        (docs, tokens), arrays = got
        if not any(len(a) for a in arrays):
            return []
        term: np.ndarray = np.repeat(np.arange(len(arrays)), [len(a) for a in arrays])  # each posting's term
        return bm25_top(term, np.concatenate(arrays), len(terms), docs, tokens, limit)

    def documents_with(self, terms: Sequence[str]) -> tuple[int, list[int]]:
        """From the postings ``lexical`` reads (and the worker keeps): a posting per memory and term."""
        wanted = list(dict.fromkeys(terms))
        got = self.stores.postings.read(self.user, wanted, self._fetch_postings) if wanted else None
        if got is None:
            row = self.db.fetchone("SELECT lex_docs FROM mem_users WHERE name = %s", (self.user,))
            return (int(row[0]) if row is not None else 0), [0] * len(terms)
        (docs, _tokens), arrays = got
        held = {t: len(a) for t, a in zip(wanted, arrays)}
        return int(docs), [held[t] for t in terms]

    def _warm_postings(self) -> None:
        try:
            rows = self.db.fetchall(
                "WITH u AS (SELECT last_id, lex_epoch, created_at FROM mem_users WHERE name = %(u)s)"
                " SELECT NULL::text, u.last_id, u.lex_epoch, u.created_at, NULL::bytea FROM u UNION ALL"
                " SELECT p.term, NULL, NULL, NULL, string_agg(int8send(p.memory_id) || int4send(p.tf)"
                " || int4send(p.dl), ''::bytea) FROM lex_postings p, u WHERE p.owner = %(u)s"
                " AND p.memory_id <= u.last_id GROUP BY p.term",
                {"u": self.user},
                binary=True,
            )
        except Exception as exc:  # noqa: BLE001 - searches read what they need themselves
            log.info("postings of %s not read ahead: %s", self.user, exc)
            return
        head = next((r for r in rows if r[0] is None), None)
        if head is None:
            return
        terms = {r[0]: unpack(r[4]) for r in rows if r[0] is not None}
        self.stores.postings.fill(self.user, (head[3], int(head[2])), int(head[1]), terms)

    def _fetch_postings(
        self, wanted: Sequence[tuple[str, int]]
    ) -> tuple[tuple, int, tuple[float, float], list[np.ndarray]] | None:
        """The user's row and the postings of each (term, above id) in ``wanted`` up to its
        ``last_id``, in one statement (one moment of the user, one round trip): (the version of
        the user's postings, ``last_id``, (document count, token total), each term's postings),
        None without a row. A term's postings come packed into one bytea (memory id int8, tf
        int4, dl int4, big-endian), a value per term instead of a row per posting."""
        rows = self.db.fetchall(
            "WITH u AS (SELECT last_id, lex_docs, lex_tokens, lex_epoch, created_at FROM mem_users WHERE name = %(u)s)"
            " SELECT 0::int4, last_id, lex_docs, lex_tokens, lex_epoch, created_at, NULL::bytea FROM u UNION ALL"
            " SELECT t.i::int4, NULL, NULL, NULL, NULL, NULL,"
            " string_agg(int8send(p.memory_id) || int4send(p.tf) || int4send(p.dl), ''::bytea)"
            " FROM u CROSS JOIN unnest(%(terms)s::text[], %(lows)s::bigint[]) WITH ORDINALITY AS t(term, low, i)"
            " JOIN lex_postings p ON p.owner = %(u)s AND p.term = t.term AND p.memory_id > t.low"
            " AND p.memory_id <= u.last_id GROUP BY t.i",
            {"u": self.user, "terms": [t for t, _ in wanted], "lows": [low for _, low in wanted]},
            binary=True,
        )
        head = next((r for r in rows if r[0] == 0), None)
        if head is None:
            return None
        packed = {int(r[0]): r[6] for r in rows if r[0] != 0}
        arrays = [unpack(packed[i]) if i in packed else NO_POSTINGS for i in range(1, len(wanted) + 1)]
        return (head[5], int(head[4])), int(head[1]), (float(head[2]), float(head[3])), arrays

    # -- dense --------------------------------------------------------------------------------
    def dense(
        self, query: np.ndarray, k: int, *, distinct: int | None = None, helpers: Executor | None = None
    ) -> list[SearchHit]:
        """The ``k`` vectors closest to ``query`` over every memory of the user (both tiers):
        their own vectors and turns' reply vectors. Exact, or through the user's partial HNSW
        indexes once they have them (the user's name is a literal in the SQL so that the indexes'
        predicate matches, and sorting is ruled out so that the planner takes them).

        ``distinct`` (see ``UserStore.dense``): the walk of the own and reply graphs returns its
        hits at most ``distinct`` deep. Each hit a graph scan returns is a row fetched from the
        table (a page read each, most of a search's time after the walk); the walk itself, with
        the same ``ef_search``, is the same, and so are the hits it returns first, in the same
        order. The exact searches (no graph) read ``k``: a sort of another length may order
        equal distances otherwise."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        graphs = self.stores.uses_hnsw(self.user)
        params = {"q": q, "k": int(k), "deep": int(min(k, distinct)) if distinct is not None and graphs else int(k)}
        # own vectors in the graph's column and those still waiting to join it (exact, through
        # the partial index that holds only them); the reply vectors through their own index
        own = sql.SQL(" UNION ALL ").join(
            [self._dense_part("embedding", Side.OWN, limit="deep"), self._dense_part("pending_embedding", Side.OWN)]
        )
        reply = self._dense_part("reply_embedding", Side.REPLY, limit="deep")
        if graphs:
            # the two graphs searched at once, each on a connection of its own (one backend
            # walks one graph: one after the other, a search costs the sum of the two walks);
            # each with its settings and the search sent together (a pipeline: one round trip).
            # No connection is held while waiting for the other search, so that threads waiting
            # on each other cannot take the whole pool.
            other = self.stores.searches.submit(self._graph_search, reply, params)
            rows = self._graph_search(own, params) + other.result()
        else:
            rows = self.db.fetchall(sql.SQL(" UNION ALL ").join([own, reply]), params)
        out = [SearchHit(int(r[0]), Side(r[1]), float(r[2])) for r in rows]
        out.sort(key=lambda h: -h.score)
        return out[:k]

    def _dense_part(self, column: str, side: Side, limit: str = "k") -> sql.Composed:
        part = "(SELECT id, {side}, -({col}::vector({dim}) <#> %(q)s) AS s FROM memories WHERE owner = {owner}"
        part += " AND {col} IS NOT NULL ORDER BY {col}::vector({dim}) <#> %(q)s LIMIT %({limit})s)"
        return sql.SQL(part).format(
            limit=sql.SQL(limit),
            side=sql.Literal(side.value),
            col=sql.Identifier(column),
            dim=sql.Literal(int(self.dim)),
            owner=sql.Literal(self.user),
        )

    def _graph_search(self, statement: sql.Composed, params: dict) -> list[tuple]:
        """``statement`` on a connection of the graph searches (see ``PostgresStores.graphs``),
        with a longer candidate list for the graph where more hits are asked for."""
        with self.stores.graphs.connection() as con:
            if int(params["k"]) <= HNSW_EF_SEARCH:
                return con.execute(statement, params).fetchall()
            with con.pipeline(), con.transaction():
                con.execute(f"SET LOCAL hnsw.ef_search = {int(params['k'])}")
                return con.execute(statement, params).fetchall()


class PostgresStores(HnswIndexes):
    """Every user's memories in one PostgreSQL database (``url``): the ``base.Stores`` interface,
    and the partial HNSW indexes of its big users."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        hnsw_min: int = HNSW_MIN,
        build_hnsw_in_background: bool = True,
        tokenizer: Tokenizer | None = None,
        wait_for_flush: bool = False,
    ):
        self.tokenizer = tokenizer or Tokenizer()
        # by default memories are written as the SQLite store writes them (WAL, synchronous=NORMAL):
        # a commit does not wait for the disk's flush (which takes longer than the rest of a turn's
        # storing), and a crash of the server or its machine may lose the last moments' writes,
        # never corrupt them. ``wait_for_flush`` keeps the server's own setting instead
        self.db = Database(url, max_size=pool_size, wait_for_flush=wait_for_flush)
        # the graph searches' own connections, which keep the settings they need (the graph's
        # candidate list, and no sort, so that the planner takes the graph): a search is then
        # one statement, not a transaction that sets them first and a commit after
        self.graphs = Database(
            url,
            max_size=4,
            wait_for_flush=wait_for_flush,
            settings={"hnsw.ef_search": str(HNSW_EF_SEARCH), "enable_sort": "off"},
        )
        try:
            self.db.migrate("memory", pg_migrations.steps(self.tokenizer))
        except BaseException:
            self.db.close()
            self.graphs.close()
            raise
        HnswIndexes.__init__(self, self.db, hnsw_min, build_hnsw_in_background)
        self.postings = PostingsCache()
        # the second HNSW graph's search, beside the first (``PgUserStore.dense``)
        self.searches = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sf-pg-dense")
        # chat turns' own vectors moved into their user's HNSW graph (``PgUserStore._insert_one``)
        self.indexing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sf-pg-graph")

    def open(self, user: str, *, dim: int, vectors_id: str) -> PgUserStore:
        return PgUserStore(self, user, dim)

    def users(self) -> list[str]:
        return [
            r[0]
            for r in self.db.fetchall(
                "SELECT u.name FROM mem_users u WHERE EXISTS (SELECT 1 FROM mem_meta m WHERE m.owner = u.name)"
                ' OR EXISTS (SELECT 1 FROM memories m WHERE m.owner = u.name) ORDER BY u.name COLLATE "C"'
            )
        ]

    def has_user(self, user: str) -> bool:
        return self.db.fetchone("SELECT 1 FROM mem_users WHERE name = %s", (user,)) is not None

    def delete_user(self, user: str) -> None:
        """Every memory of ``user`` (rows, postings, meta, their HNSW index), gone for good."""
        self.postings.forget(user)
        self.forget_hnsw(user)
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM mem_users WHERE name = %s", (user,))

    def exclusive(self, user: str, purpose: str) -> ContextManager:
        """An advisory lock, held across every worker."""
        return self.db.advisory_lock(f"siliconfriend:{purpose}:{user}")

    def close(self) -> None:
        self.indexing.shutdown(wait=True)
        self.searches.shutdown(wait=True)
        self.db.close()
        self.graphs.close()
