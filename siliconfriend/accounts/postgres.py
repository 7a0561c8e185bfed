"""The accounts' repository (``store.AccountStore``) in the ``accounts`` schema of the shared
PostgreSQL database, so that a session opened on one worker is valid on every other and failed
logins are counted across all. Plain SQL in PostgreSQL's dialect: names are unique regardless of
case by a unique index on ``lower(name)`` and every name comparison is ``lower(name) =
lower(%s)``; the browser key is a row of ``web_secrets``."""

from __future__ import annotations

import json
from typing import Callable, Iterable

import psycopg

from memory.stores.pg_db import Database, one, redact, run_statements

from .store import ApiKeyInfo, KeyLookup, NameTaken, SessionRow, TooManyKeys, UserRow


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
    # API keys (keys.py): only the SHA-256 of a key is stored, and its first
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


# in step with sqlite.MIGRATIONS, one step for one step (a test checks the count)
MIGRATIONS = [_m1, _m2, _m3]


class PgAccountStore:
    def __init__(self, url: str):
        self.where = redact(url)
        self._db = Database(url, vectors=False, schema="accounts", max_size=4)
        self._db.migrate("accounts", MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    # -- users --------------------------------------------------------------------------------
    def user(self, name: str) -> UserRow | None:
        row = self._db.fetchone(
            "SELECT name, pw_hash, created_at, prefs, skeleton FROM users WHERE lower(name) = lower(%s)", (name,)
        )
        return UserRow(row[0], row[1], row[2], json.loads(row[3]), row[4]) if row else None

    def users(self) -> list[str]:
        return [r[0] for r in self._db.fetchall("SELECT name FROM users ORDER BY name")]

    def add_user(self, row: UserRow) -> None:
        try:
            with self._db.transaction() as cur:
                if cur.execute("SELECT 1 FROM users WHERE skeleton = %s", (row.skeleton,)).fetchone():
                    raise NameTaken(row.name)
                cur.execute(
                    "INSERT INTO users (name, pw_hash, created_at, prefs, skeleton) VALUES (%s, %s, %s, %s, %s)",
                    (row.name, row.pw_hash, row.created_at, json.dumps(row.prefs, ensure_ascii=False), row.skeleton),
                )
        except psycopg.errors.UniqueViolation:
            raise NameTaken(row.name) from None

    def set_password_hash(self, name: str, pw_hash: str) -> None:
        self._db.execute("UPDATE users SET pw_hash = %s WHERE lower(name) = lower(%s)", (pw_hash, name))

    def merge_prefs(self, name: str, changes: dict) -> dict | None:
        with self._db.transaction() as cur:
            row = cur.execute("SELECT prefs FROM users WHERE lower(name) = lower(%s) FOR UPDATE", (name,)).fetchone()
            if row is None:
                return None
            merged = {**json.loads(row[0]), **changes}
            cur.execute(
                "UPDATE users SET prefs = %s WHERE lower(name) = lower(%s)",
                (json.dumps(merged, ensure_ascii=False), name),
            )
        return merged

    def names_without_skeleton(self) -> list[str]:
        return [r[0] for r in self._db.fetchall("SELECT name FROM users WHERE skeleton IS NULL")]

    def set_skeleton(self, name: str, skeleton: str) -> None:
        self._db.execute("UPDATE users SET skeleton = %s WHERE lower(name) = lower(%s)", (skeleton, name))

    def delete_user(self, name: str) -> bool:
        with self._db.transaction() as cur:
            n = cur.execute("DELETE FROM users WHERE lower(name) = lower(%s)", (name,)).rowcount
            cur.execute("DELETE FROM sessions WHERE lower(name) = lower(%s)", (name,))
            cur.execute("DELETE FROM api_keys WHERE lower(name) = lower(%s)", (name,))
        return n > 0

    # -- sessions -----------------------------------------------------------------------------
    def add_session(self, row: SessionRow, *, expired_before: float) -> None:
        with self._db.transaction() as cur:
            cur.execute("DELETE FROM sessions WHERE expires_at < %s", (expired_before,))
            cur.execute(
                "INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (%s, %s, %s, %s)",
                (row.token_hash, row.name, row.created_at, row.expires_at),
            )

    def session(self, token_hash: str) -> SessionRow | None:
        row = self._db.fetchone(
            "SELECT token_hash, name, created_at, expires_at FROM sessions WHERE token_hash = %s", (token_hash,)
        )
        return SessionRow(*row) if row else None

    def extend_session(self, token_hash: str, expires_at: float) -> None:
        self._db.execute("UPDATE sessions SET expires_at = %s WHERE token_hash = %s", (expires_at, token_hash))

    def delete_session(self, token_hash: str) -> None:
        self._db.execute("DELETE FROM sessions WHERE token_hash = %s", (token_hash,))

    # -- copying ------------------------------------------------------------------------------
    def user_rows(self) -> list[UserRow]:
        rows = self._db.fetchall("SELECT name, pw_hash, created_at, prefs, skeleton FROM users ORDER BY name")
        return [UserRow(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    def session_rows(self) -> list[SessionRow]:
        rows = self._db.fetchall("SELECT token_hash, name, created_at, expires_at FROM sessions")
        return [SessionRow(*r) for r in rows]

    def copy_in(self, users: list[UserRow], sessions: list[SessionRow]) -> None:
        with self._db.transaction() as cur:
            cur.executemany(
                "INSERT INTO users (name, pw_hash, created_at, prefs, skeleton) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(u.name, u.pw_hash, u.created_at, json.dumps(u.prefs, ensure_ascii=False), u.skeleton) for u in users],
            )
            cur.executemany(
                "INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(s.token_hash, s.name, s.created_at, s.expires_at) for s in sessions],
            )

    # -- API keys -----------------------------------------------------------------------------
    def add_api_key(self, key_hash: str, prefix: str, name: str, label: str, at: float, *, max_live: int) -> int:
        with self._db.transaction() as cur:
            live = one(
                cur.execute(
                    "SELECT COUNT(*) FROM api_keys WHERE lower(name) = lower(%s) AND revoked_at IS NULL", (name,)
                ).fetchone()
            )[0]
            if live >= max_live:
                raise TooManyKeys(name)
            row = one(
                cur.execute(
                    "INSERT INTO api_keys (key_hash, prefix, name, label, created_at) VALUES (%s, %s, %s, %s, %s)"
                    " RETURNING id",
                    (key_hash, prefix, name, label, at),
                ).fetchone()
            )
        return int(row[0])

    def api_keys(self, name: str) -> list[ApiKeyInfo]:
        rows = self._db.fetchall(
            "SELECT id, prefix, label, created_at, last_used_at, revoked_at FROM api_keys"
            " WHERE lower(name) = lower(%s) ORDER BY id",
            (name,),
        )
        return [ApiKeyInfo(*r) for r in rows]

    def api_key(self, key_hash: str) -> KeyLookup | None:
        row = self._db.fetchone(
            "SELECT id, name, revoked_at, last_used_at FROM api_keys WHERE key_hash = %s", (key_hash,)
        )
        return KeyLookup(*row) if row else None

    def touch_api_key(self, key_id: int, at: float) -> None:
        self._db.execute("UPDATE api_keys SET last_used_at = %s WHERE id = %s", (at, key_id))

    def revoke_api_key(self, key_id: int, name: str, at: float) -> bool:
        with self._db.transaction() as cur:
            mine = "id = %s AND lower(name) = lower(%s)"
            if cur.execute(f"SELECT 1 FROM api_keys WHERE {mine}", (key_id, name)).fetchone() is None:
                return False
            cur.execute(f"UPDATE api_keys SET revoked_at = %s WHERE {mine} AND revoked_at IS NULL", (at, key_id, name))
        return True

    # -- rate events --------------------------------------------------------------------------
    def add_events(self, keys: Iterable[str], kind: str, at: float) -> None:
        with self._db.transaction() as cur:
            cur.executemany(
                "INSERT INTO rate_events (key, kind, at) VALUES (%s, %s, %s)", [(k, kind, at) for k in keys]
            )

    def events(self, key: str, kind: str, since: float) -> list[float]:
        rows = self._db.fetchall(
            "SELECT at FROM rate_events WHERE key = %s AND kind = %s AND at >= %s ORDER BY at", (key, kind, since)
        )
        return [r[0] for r in rows]

    def clear_events(self, keys: Iterable[str], kind: str) -> None:
        with self._db.transaction() as cur:
            cur.executemany("DELETE FROM rate_events WHERE key = %s AND kind = %s", [(k, kind) for k in keys])

    def prune_events(self, before: float) -> None:
        self._db.execute("DELETE FROM rate_events WHERE at < %s", (before,))

    def forget_events_prefix(self, prefix: str) -> None:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        self._db.execute("DELETE FROM rate_events WHERE key LIKE %s ESCAPE '\\'", (escaped + "%",))

    # -- the browser key ----------------------------------------------------------------------
    def browser_secret(self, make: Callable[[], str]) -> str:
        """A row of ``web_secrets``: the first worker's key wins."""
        with self._db.transaction() as cur:
            cur.execute(
                "INSERT INTO web_secrets (name, value) VALUES ('browser', %s) ON CONFLICT (name) DO NOTHING", (make(),)
            )
            return one(cur.execute("SELECT value FROM web_secrets WHERE name = 'browser'").fetchone())[0]
