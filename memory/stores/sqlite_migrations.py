"""The SQLite store's schema, step by step: a user's file records the steps it has had
(``PRAGMA user_version``) and the store runs the ones it lacks, in order, in one transaction. A
step is never changed once released: a change to the schema is a new step. Each step gets the
store's tokenizer: a step that indexes memories anew makes their tokens with it."""

from __future__ import annotations

import json
import sqlite3

from ..lexical import Tokenizer
from . import sqlite_links
from .references import named_in
from .sqlite_db import run_script


def _m1(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    run_script(
        db,
        """
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
    """,
    )


def _m2(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # neighbour look-ups by (day, position) without scanning every turn; the lexical table holds
    # active memories only, so that a lexical search needs no join to filter out archived ones
    run_script(
        db,
        """
    CREATE INDEX memories_place ON memories(day, position);
    DELETE FROM memories_fts WHERE rowid IN (SELECT id FROM memories WHERE state != 'active');
    """,
    )


def _m3(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # - reply_vector: a turn's second vector, the companion's reply, written after the reply has
    #   streamed (NULL until then; the partial index finds the turns still waiting for one);
    # - archived_at: when the forgetting pass archived a memory (NULL while active);
    # - the archive becomes a second tier that a strong cue can still reach: archived memories go
    #   back into the lexical table (the index takes them from their vectors at its next sync).
    run_script(
        db,
        """
    ALTER TABLE memories ADD COLUMN reply_vector BLOB;
    ALTER TABLE memories ADD COLUMN archived_at TEXT;
    CREATE INDEX memories_reply_pending ON memories(id)
        WHERE kind = 'turn' AND response != '' AND reply_vector IS NULL
    """,
    )
    rows = db.execute("SELECT id, text FROM memories WHERE state != 'active'").fetchall()
    db.executemany(
        "INSERT INTO memories_fts (rowid, tokens) VALUES (?, ?)", [(r[0], tokenizer.fts_document(r[1])) for r in rows]
    )
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vseq'")
    db.execute(
        "UPDATE memories SET vseq = (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'vseq')"
        " WHERE state != 'active'"
    )


def _m4(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # the sentence vectors of long turns: a row per sentence, and the turn's count of them
    # (dropped by _m6)
    run_script(
        db,
        """
    ALTER TABLE memories ADD COLUMN sentences INTEGER;
    CREATE TABLE sentences (
        memory_id INTEGER NOT NULL,
        n INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (memory_id, n)
    ) WITHOUT ROWID;
    CREATE INDEX memories_sentences_pending ON memories(id) WHERE kind = 'turn' AND sentences IS NULL
    """,
    )


def _m5(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # the links between memories and the entities they name (``sqlite_links.py``); those of the
    # memories stored before are written by the bank when it opens the user (``memory/links.py``)
    sqlite_links.create(db)


def _m6(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # sentence vectors are no longer made or searched (whole turns found as much, for less)
    run_script(
        db,
        """
    DROP INDEX memories_sentences_pending;
    ALTER TABLE memories DROP COLUMN sentences;
    DROP TABLE sentences
    """,
    )


def _m7(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # how many memories name each entity, kept as mentions come and go (``sqlite_links.py``)
    sqlite_links.count_entities(db)


def _m8(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # which memories a row's record of its prompt names (``references.REFERENCES``), a row per pair, so
    # that a deletion finds the rows that copied a memory's words without reading every row; the
    # pairs of the rows stored before are read from them here
    run_script(
        db,
        """
    CREATE TABLE refs (memory_id INTEGER NOT NULL, holder INTEGER NOT NULL, PRIMARY KEY (memory_id, holder))
        WITHOUT ROWID;
    CREATE INDEX refs_holder ON refs(holder)
    """,
    )
    write_refs(db, db.execute("SELECT id, extra FROM memories WHERE instr(extra, '\"id\"') > 0"))


def write_refs(db: sqlite3.Connection, rows) -> None:
    """The pairs (named memory, row) of ``rows`` (id, extra as JSON text or a dict)."""
    db.executemany(
        "INSERT OR IGNORE INTO refs (memory_id, holder) VALUES (?, ?)",
        [
            (named, rid)
            for rid, extra in rows
            for named in named_in(json.loads(extra) if isinstance(extra, str) else extra)
        ],
    )


def _m9(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # the active turns rated at least so high (the few worth bringing up, read at a day's first
    # turn) without a look at every active turn's row: that read was most of a big store's first
    # turn of the day. (kind, state) stays: its reads in id order need no sort
    run_script(db, "CREATE INDEX IF NOT EXISTS memories_rated ON memories(kind, state, importance)")


def _m10(db: sqlite3.Connection, tokenizer: Tokenizer) -> None:
    # the second reader's vectors (``base.SECOND_COLUMNS``); the reply worker makes those missing,
    # found by the partial index without a look at every row. Safe to run again (a step's
    # columns may be there in a file whose version was set back: the migration tests do)
    have = {row[1] for row in db.execute("PRAGMA table_info(memories)")}
    for column in ("second_vector", "second_reply_vector"):
        if column not in have:
            db.execute(f"ALTER TABLE memories ADD COLUMN {column} BLOB")
    db.execute(
        "CREATE INDEX IF NOT EXISTS memories_second_pending ON memories(id)"
        " WHERE second_vector IS NULL OR (second_reply_vector IS NULL AND kind = 'turn' AND response != '')"
    )


# each step gets the store's tokenizer: a step that indexes memories anew makes their tokens with it
MIGRATIONS = [_m1, _m2, _m3, _m4, _m5, _m6, _m7, _m8, _m9, _m10]
