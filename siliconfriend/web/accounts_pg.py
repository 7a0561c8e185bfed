"""The web accounts over PostgreSQL: the same ``Accounts`` (sign-up, log-in, sessions, login rate
limits over a ``rate_events`` table, preferences), its tables in the ``accounts`` schema of the shared database, so that a
session opened on one worker is valid on every other and failed logins are counted across all.

The account logic is written once, in ``accounts.py``, against sqlite3's DB-API; ``_Dialect``
presents a pooled PostgreSQL connection through that API: ``?`` placeholders become ``%s``, the
case-insensitive name comparisons of SQLite's ``COLLATE NOCASE`` become ``lower(name) =
lower(...)`` (a unique index on ``lower(name)`` keeps names unique regardless of case),
SQLite-only ``PRAGMA`` statements are skipped, and a unique violation is raised as
``sqlite3.IntegrityError``, which the account logic catches.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

import psycopg

from memory.pg_db import Database, run_statements

from .accounts import Accounts


def _m1(cur: psycopg.Cursor) -> None:
    run_statements(
        cur,
        """
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        pw_hash TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        prefs TEXT NOT NULL DEFAULT '{}'
    );
    CREATE UNIQUE INDEX users_name_nocase ON users (lower(name));
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        name TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX sessions_by_name ON sessions (lower(name));
    CREATE TABLE failures (key TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
    CREATE INDEX failures_by_key ON failures (key, at);
    CREATE TABLE web_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)
    """,
    )


def _m2(cur: psycopg.Cursor) -> None:
    # API keys (siliconfriend/api/keys.py): only the SHA-256 of a key is stored, and its first
    # characters to tell the keys apart in lists
    run_statements(
        cur,
        """
    CREATE TABLE api_keys (
        id BIGSERIAL PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
        label TEXT NOT NULL DEFAULT '',
        created_at DOUBLE PRECISION NOT NULL,
        last_used_at DOUBLE PRECISION,
        revoked_at DOUBLE PRECISION
    );
    CREATE INDEX api_keys_by_name ON api_keys (lower(name))
    """,
    )


def _m3(cur: psycopg.Cursor) -> None:
    # the rate limiter's events (rate_limit.py) replace the failures; a look-alike skeleton per name
    run_statements(
        cur,
        """
    DROP TABLE failures;
    ALTER TABLE users ADD COLUMN skeleton TEXT;
    CREATE INDEX users_by_skeleton ON users (skeleton);
    CREATE TABLE rate_events (key TEXT NOT NULL, kind TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
    CREATE INDEX rate_events_by_key ON rate_events (key, kind, at)
    """,
    )


# one PostgreSQL step for each SQLite step of accounts.py (a test checks that they stay in step)
MIGRATIONS = [_m1, _m2, _m3]
_SERIAL_TABLES = ("api_keys",)  # tables whose new rows' ids the callers read (``lastrowid``)

_NAME_EQ = re.compile(r"\bname = \?")


def translate(statement: str) -> str:
    out = _NAME_EQ.sub("lower(name) = lower(%s)", statement).replace("?", "%s")
    if _returns_id(out):
        out += " RETURNING id"
    return out


def _returns_id(statement: str) -> bool:
    head = statement.lstrip().upper()
    return (
        head.startswith("INSERT INTO")
        and "RETURNING" not in head
        and any(head.startswith(f"INSERT INTO {t.upper()} ") for t in _SERIAL_TABLES)
    )


class _Result:
    def __init__(self, cur: psycopg.Cursor | None = None, *, returns_id: bool = False):
        self.rowcount = cur.rowcount if cur is not None else 0
        self._rows = cur.fetchall() if cur is not None and cur.description is not None else []
        self.lastrowid = self._rows[0][0] if returns_id and self._rows else None

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self):
        return list(self._rows)

    def __iter__(self):
        return iter(self._rows)


class _Dialect:
    """sqlite3-style ``execute`` / ``executemany`` on a cursor (in a transaction) or the pool."""

    def __init__(self, db: Database, cur: psycopg.Cursor | None = None):
        self.db, self.cur = db, cur

    def _run(self, fn):
        try:
            if self.cur is not None:
                return fn(self.cur)
            with self.db.connection() as con:
                with con.cursor() as cur:
                    return fn(cur)
        except psycopg.errors.IntegrityError as exc:
            raise sqlite3.IntegrityError(str(exc)) from None

    def execute(self, statement: str, params: Sequence = ()) -> _Result:
        if statement.lstrip().upper().startswith("PRAGMA"):
            return _Result()
        pg = translate(statement)
        return self._run(
            lambda cur: (cur.execute(pg, tuple(params)), _Result(cur, returns_id=pg.endswith("RETURNING id")))[1]
        )

    def executemany(self, statement: str, rows) -> None:
        self._run(lambda cur: cur.executemany(translate(statement), [tuple(r) for r in rows]))

    def close(self) -> None:
        self.db.close()


class PgRateLimitStore:
    """``RateLimitStore`` (rate_limit.py) in the ``rate_events`` table of the accounts schema,
    so that failed logins and wrong API keys are counted across every worker."""

    def __init__(self, db: Database):
        self.db = db

    def add(self, keys: Iterable[str], kind: str, at: float) -> None:
        with self.db.transaction() as cur:
            cur.executemany(
                "INSERT INTO rate_events (key, kind, at) VALUES (%s, %s, %s)", [(k, kind, at) for k in keys]
            )

    def events(self, key: str, kind: str, since: float) -> list[float]:
        rows = self.db.fetchall(
            "SELECT at FROM rate_events WHERE key = %s AND kind = %s AND at >= %s ORDER BY at", (key, kind, since)
        )
        return [r[0] for r in rows]

    def clear(self, keys: Iterable[str], kind: str) -> None:
        with self.db.transaction() as cur:
            cur.executemany("DELETE FROM rate_events WHERE key = %s AND kind = %s", [(k, kind) for k in keys])

    def prune(self, before: float) -> None:
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM rate_events WHERE at < %s", (before,))

    def forget_prefix(self, prefix: str) -> None:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM rate_events WHERE key LIKE %s ESCAPE '\\'", (escaped + "%",))


def open_accounts(settings) -> Accounts:
    """The web accounts the settings name: ``accounts.db`` in the home, or the database of
    ``database_url``."""
    if settings.database_url:
        return PgAccounts(settings.database_url, signup_open=settings.signup_open)
    return Accounts(settings.home / "accounts.db", signup_open=settings.signup_open)


class PgAccounts(Accounts):
    """``Accounts`` in the database of ``url`` (schema ``accounts``)."""

    def __init__(self, url: str, **kw):
        self.url = url
        super().__init__(url, **kw)

    def _connect(self) -> _Dialect:
        return _Dialect(Database(self.url, vectors=False, schema="accounts", max_size=4))

    def _migrate(self) -> None:
        self._db.db.migrate("accounts", MIGRATIONS)
        with self._tx() as db:
            self._fill_skeletons(db)

    def _rate_store(self) -> PgRateLimitStore:
        return PgRateLimitStore(self._db.db)

    @contextmanager
    def _tx(self) -> Iterator[_Dialect]:
        with self._db.db.transaction() as cur:
            yield _Dialect(self._db.db, cur)

    def close(self) -> None:
        self._db.close()

    def browser_secret(self) -> str:
        """The key that encrypts the session token in the browser, the same for every worker (a
        browser whose requests reach another worker stays logged in)."""
        import secrets

        with self._db.db.transaction() as cur:
            cur.execute(
                "INSERT INTO web_secrets (name, value) VALUES ('browser', %s) ON CONFLICT (name) DO NOTHING",
                (secrets.token_urlsafe(32),),
            )
            return cur.execute("SELECT value FROM web_secrets WHERE name = 'browser'").fetchone()[0]
