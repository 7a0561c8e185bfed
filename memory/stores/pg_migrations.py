"""The PostgreSQL store's schema, step by step (``pg_db.Database.migrate`` runs the steps a database
lacks, in order, each in its own transaction). A step is never changed once released: a change to
the schema is a new step."""

from __future__ import annotations

import functools
from typing import Callable

import psycopg

from ..lexical import Tokenizer
from ..records import Kind
from . import postgres_links
from .documents import term_counts
from .pg_db import run_statements


def _m1(cur: psycopg.Cursor) -> None:
    run_statements(
        cur,
        """
    CREATE TABLE mem_users (
        name TEXT PRIMARY KEY,
        last_id BIGINT NOT NULL DEFAULT 0,
        lex_docs BIGINT NOT NULL DEFAULT 0,
        lex_tokens BIGINT NOT NULL DEFAULT 0,
        created_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE TABLE mem_meta (
        owner TEXT NOT NULL REFERENCES mem_users(name) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (owner, key)
    );
    CREATE TABLE memories (
        owner TEXT NOT NULL REFERENCES mem_users(name) ON DELETE CASCADE,
        id BIGINT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        query TEXT NOT NULL DEFAULT '',
        response TEXT NOT NULL DEFAULT '',
        day DATE NOT NULL,
        position INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        strength DOUBLE PRECISION NOT NULL DEFAULT 1.0,
        last_recall TEXT,
        recall_count INTEGER NOT NULL DEFAULT 0,
        importance DOUBLE PRECISION NOT NULL DEFAULT 0,
        pinned BOOLEAN NOT NULL DEFAULT false,
        state TEXT NOT NULL DEFAULT 'active',
        embedding vector,
        lex_len INTEGER NOT NULL DEFAULT 0,
        extra JSONB NOT NULL DEFAULT '{}',
        PRIMARY KEY (owner, id)
    );
    CREATE INDEX memories_owner_day ON memories (owner, day, kind);
    CREATE INDEX memories_owner_place ON memories (owner, day, position);
    CREATE INDEX memories_owner_state ON memories (owner, state, kind);
    CREATE TABLE lex_postings (
        owner TEXT NOT NULL,
        term TEXT NOT NULL,
        memory_id BIGINT NOT NULL,
        tf INTEGER NOT NULL,
        dl INTEGER NOT NULL,
        PRIMARY KEY (owner, term, memory_id),
        FOREIGN KEY (owner, memory_id) REFERENCES memories (owner, id) ON DELETE CASCADE
    );
    CREATE INDEX lex_postings_memory ON lex_postings (owner, memory_id)
    """,
    )


def _m2(cur: psycopg.Cursor, tokenizer: Tokenizer | None = None) -> None:
    tokenizer = tokenizer or Tokenizer()  # the stores' (a default one where a step runs on its own)
    # a turn's second vector (its reply, written after the reply has
    # streamed), when a memory was archived, and the archive as a second tier that stays in the
    # lexical postings (so archived memories get postings and count in the BM25 statistics)
    run_statements(
        cur,
        """
    ALTER TABLE memories ADD COLUMN reply_embedding vector;
    ALTER TABLE memories ADD COLUMN archived_at TEXT;
    CREATE INDEX memories_reply_pending ON memories (owner, id)
        WHERE kind = 'turn' AND response != '' AND reply_embedding IS NULL
    """,
    )
    rows = cur.execute("SELECT owner, id, kind, text, day FROM memories WHERE state != 'active'").fetchall()
    for owner, rid, kind, text, day in rows:
        tf, dl = term_counts(tokenizer, Kind(kind), text, day)
        cur.executemany(
            "INSERT INTO lex_postings (owner, term, memory_id, tf, dl) VALUES (%s, %s, %s, %s, %s)",
            [(owner, term, rid, n, dl) for term, n in tf.items()],
        )
        cur.execute("UPDATE memories SET lex_len = %s WHERE owner = %s AND id = %s", (dl, owner, rid))
        cur.execute(
            "UPDATE mem_users SET lex_docs = lex_docs + 1, lex_tokens = lex_tokens + %s WHERE name = %s", (dl, owner)
        )


def _m3(cur: psycopg.Cursor) -> None:
    # vectors kept in the row instead of out of line in the TOAST table, where PostgreSQL puts
    # pgvector's values (STORAGE EXTERNAL) once a row passes ~2 kB, which a turn with two 1.5 kB
    # vectors always does: an exact search or a pool's vectors then read one heap page per row
    # instead of a TOAST look-up per vector (docs/benchmarks-journal.md, "PostgreSQL").
    # STORAGE MAIN keeps them in the row, and a toast_tuple_target of a whole page (8160, the most
    # allowed) lets a row grow to that before anything is moved out (MAIN values last, and only
    # for rows that would not fit otherwise). Vectors stored before are rewritten into their rows.
    run_statements(
        cur,
        """
    ALTER TABLE memories SET (toast_tuple_target = 8160);
    ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN, ALTER COLUMN reply_embedding SET STORAGE MAIN;
    UPDATE memories SET embedding = embedding::real[]::vector, reply_embedding = reply_embedding::real[]::vector
        WHERE embedding IS NOT NULL OR reply_embedding IS NOT NULL
    """,
    )


def _m4(cur: psycopg.Cursor) -> None:
    # a term's postings read from the primary key alone (an index-only scan): with tf and dl in the
    # index, a common word's thousands of postings no longer cost a heap page each
    run_statements(
        cur,
        """
    ALTER TABLE lex_postings DROP CONSTRAINT IF EXISTS lex_postings_pkey;
    ALTER TABLE lex_postings ADD PRIMARY KEY (owner, term, memory_id) INCLUDE (tf, dl)
    """,
    )


def _m5(cur: psycopg.Cursor) -> None:
    # the version of a user's postings that a worker's cache of them checks (see PostingsCache):
    # bumped whenever postings go (a deletion, a replaced text) or come in below the newest id
    cur.execute("ALTER TABLE mem_users ADD COLUMN IF NOT EXISTS lex_epoch BIGINT NOT NULL DEFAULT 0")


def _m6(cur: psycopg.Cursor) -> None:
    # the fields a recall rewrites (strength, last recall, recall count) in a narrow table of their
    # own: a reinforcement then rewrites a row of a few dozen bytes, which stays on its page (a HOT
    # update, fillfactor 80 leaves the room) and touches no index, instead of a memory's row, which
    # holds both vectors (~3 kB), moves to another page and adds entries to both HNSW graphs and
    # every btree of ``memories``. The values of existing memories move over.
    run_statements(
        cur,
        """
    CREATE TABLE mem_recall (
        owner TEXT NOT NULL,
        id BIGINT NOT NULL,
        strength DOUBLE PRECISION NOT NULL DEFAULT 1.0,
        last_recall TEXT,
        recall_count INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, id),
        FOREIGN KEY (owner, id) REFERENCES memories (owner, id) ON DELETE CASCADE
    ) WITH (fillfactor = 80);
    INSERT INTO mem_recall (owner, id, strength, last_recall, recall_count)
        SELECT owner, id, strength, last_recall, recall_count FROM memories;
    ALTER TABLE memories DROP COLUMN strength, DROP COLUMN last_recall, DROP COLUMN recall_count;
    ANALYZE mem_recall
    """,
    )


def _m7(cur: psycopg.Cursor) -> None:
    # a chat turn's own vector as it waits to join the user's HNSW graph (see
    # ``PgUserStore._insert_one``): kept in the row like the others, searched exactly through a
    # partial index that holds only the waiting ones (a few at most). The statistics are made
    # again so that the planner knows the new column is nearly always empty (without them it
    # guesses the opposite, and scans every row of the table for the waiting ones).
    run_statements(
        cur,
        """
    ALTER TABLE memories ADD COLUMN pending_embedding vector;
    ALTER TABLE memories ALTER COLUMN pending_embedding SET STORAGE MAIN;
    CREATE INDEX memories_pending ON memories (owner, id) WHERE pending_embedding IS NOT NULL;
    ANALYZE memories
    """,
    )


def _m8(cur: psycopg.Cursor) -> None:
    # the sentence vectors of long turns, a row each (dropped by _m11)
    run_statements(
        cur,
        """
    ALTER TABLE memories ADD COLUMN sentences INTEGER;
    CREATE TABLE mem_sentences (
        owner TEXT NOT NULL,
        memory_id BIGINT NOT NULL,
        n INTEGER NOT NULL,
        embedding vector NOT NULL,
        PRIMARY KEY (owner, memory_id, n),
        FOREIGN KEY (owner, memory_id) REFERENCES memories (owner, id) ON DELETE CASCADE
    );
    ALTER TABLE mem_sentences ALTER COLUMN embedding SET STORAGE MAIN;
    CREATE INDEX memories_sentences_pending ON memories (owner, id) WHERE kind = 'turn' AND sentences IS NULL
    """,
    )


def _m9(cur: psycopg.Cursor) -> None:
    # a user's summaries by kind (the global ones have no day): a chat turn reads the two global
    # summaries for its prompt, each a walk of the user's whole (owner, state, kind) index before
    # (a user's turns are most of their rows); a turn's row is not in it
    cur.execute(
        "CREATE INDEX IF NOT EXISTS memories_owner_summaries ON memories (owner, kind, day) WHERE kind <> 'turn'"
    )


def _m10(cur: psycopg.Cursor) -> None:
    # the links between memories and the entities they name (``postgres_links.py``); those of the
    # memories stored before are written by the bank when it opens the user (``memory/links.py``)
    postgres_links.create(cur)


def _m11(cur: psycopg.Cursor) -> None:
    # sentence vectors are no longer made or searched (whole turns found as much, for less)
    run_statements(
        cur,
        """
    DROP TABLE mem_sentences;
    DROP INDEX memories_sentences_pending;
    ALTER TABLE memories DROP COLUMN sentences
    """,
    )


def _m12(cur: psycopg.Cursor) -> None:
    # which memories a row's record of its prompt names (``references.REFERENCES``), a row per pair, so
    # that a deletion finds the rows that copied a memory's words without reading every row of
    # the user; a row's pairs go with it (the foreign key); those of the rows stored before are
    # read from them here
    run_statements(
        cur,
        """
    CREATE TABLE mem_refs (
        owner TEXT NOT NULL,
        memory_id BIGINT NOT NULL,
        holder BIGINT NOT NULL,
        PRIMARY KEY (owner, memory_id, holder),
        FOREIGN KEY (owner, holder) REFERENCES memories (owner, id) ON DELETE CASCADE
    );
    CREATE INDEX mem_refs_holder ON mem_refs (owner, holder);
    INSERT INTO mem_refs (owner, memory_id, holder)
        SELECT DISTINCT m.owner, (e ->> 'id')::bigint, m.id
        FROM memories m, unnest(ARRAY['used', 'today']) AS k(key),
            jsonb_array_elements(CASE jsonb_typeof(m.extra -> k.key) WHEN 'array' THEN m.extra -> k.key
                ELSE '[]'::jsonb END) AS e
        WHERE jsonb_typeof(e) = 'object' AND (e ->> 'id') ~ '^-?[0-9]{1,18}$'
    """,
    )


def _m13(cur: psycopg.Cursor) -> None:
    # a user's active turns rated at least so high (the few worth bringing up, read at a day's
    # first turn), found in the index instead of a visit to each of the user's active turns
    cur.execute("CREATE INDEX IF NOT EXISTS memories_owner_rated ON memories (owner, kind, state, importance)")


def _m14(cur: psycopg.Cursor) -> None:
    # the second reader's vectors (``base.SECOND_COLUMNS``) as float32 bytes: read for a pool's
    # members only, never searched, so no vector type or index; the reply worker makes those
    # missing, found by the partial index without a look at every row
    run_statements(
        cur,
        """
    ALTER TABLE memories ADD COLUMN IF NOT EXISTS second_vector bytea;
    ALTER TABLE memories ADD COLUMN IF NOT EXISTS second_reply_vector bytea;
    CREATE INDEX IF NOT EXISTS memories_second_pending ON memories (owner, id)
        WHERE second_vector IS NULL OR (second_reply_vector IS NULL AND kind = 'turn' AND response != '')
    """,
    )


MIGRATIONS = [_m1, _m2, _m3, _m4, _m5, _m6, _m7, _m8, _m9, _m10, _m11, _m12, _m13, _m14]


def steps(tokenizer: Tokenizer) -> list[Callable[[psycopg.Cursor], None]]:
    """The steps, the one that writes postings making their terms with ``tokenizer`` (the
    stores')."""
    return [functools.partial(_m2, tokenizer=tokenizer) if s is _m2 else s for s in MIGRATIONS]
