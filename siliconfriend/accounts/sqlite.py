"""The accounts' repository (``store.AccountStore``) in one SQLite file, ``accounts.db`` in the
home: ``users`` (names unique regardless of case by ``COLLATE NOCASE``), ``sessions``,
``api_keys`` and ``rate_events``. One connection, one lock; writes in ``BEGIN IMMEDIATE``
transactions, so that several processes can share the file."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Callable, Iterable

from memory.stores.sqlite_db import connect, immediate_transaction, run_script

from .store import ApiKeyInfo, KeyLookup, NameTaken, SessionRow, TooManyKeys, UserRow

# in step with postgres.MIGRATIONS, one step for one step (a test checks the count)
MIGRATIONS = [
    """
    CREATE TABLE users (
        name TEXT PRIMARY KEY COLLATE NOCASE,
        pw_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        prefs TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        name TEXT NOT NULL COLLATE NOCASE REFERENCES users(name) ON DELETE CASCADE,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    CREATE INDEX sessions_by_name ON sessions(name);
    CREATE TABLE failures (key TEXT NOT NULL, at REAL NOT NULL);
    CREATE INDEX failures_by_key ON failures(key, at);
    """,
    # 2: API keys (keys.py): only the SHA-256 of a key is stored, and its first characters to tell
    # the keys apart in lists
    """
    CREATE TABLE api_keys (
        id INTEGER PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT NOT NULL COLLATE NOCASE REFERENCES users(name) ON DELETE CASCADE,
        label TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        last_used_at REAL,
        revoked_at REAL
    );
    CREATE INDEX api_keys_by_name ON api_keys(name);
    """,
    # 3: the rate limiter's events (rate_limit.py) replace the failures; a look-alike skeleton per
    # name. (IF NOT EXISTS: the events table was once made at every opening, outside the steps.)
    """
    DROP TABLE failures;
    ALTER TABLE users ADD COLUMN skeleton TEXT;
    CREATE INDEX users_by_skeleton ON users(skeleton);
    CREATE TABLE IF NOT EXISTS rate_events (key TEXT NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL);
    CREATE INDEX IF NOT EXISTS rate_events_by_key ON rate_events(key, kind, at);
    """,
]

BROWSER_SECRET_FILE = ".web_secret"  # beside the database: the home folder


class SQLiteAccountStore:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.where = str(self.path)
        self._lock = threading.RLock()
        # secure_delete: deleted accounts leave no bytes behind
        self._db = connect(self.path, "foreign_keys=ON", "secure_delete=ON")
        self._migrate()

    def _migrate(self) -> None:
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if (
                version == 2
                and not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'api_keys'").fetchone()
            ):
                # a database whose second step was the skeletons (today's third) and had no API keys
                run_script(db, MIGRATIONS[1])
                version = 3
                db.execute(f"PRAGMA user_version = {version}")
            for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                run_script(db, script)
                db.execute(f"PRAGMA user_version = {i}")

    def _tx(self):
        return immediate_transaction(self._db, self._lock)

    def _one(self, sql: str, params: tuple = ()) -> tuple | None:
        with self._lock:
            return self._db.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- users --------------------------------------------------------------------------------
    def user(self, name: str) -> UserRow | None:
        row = self._one("SELECT name, pw_hash, created_at, prefs, skeleton FROM users WHERE name = ?", (name,))
        return UserRow(row[0], row[1], row[2], json.loads(row[3]), row[4]) if row else None

    def users(self) -> list[str]:
        return [r[0] for r in self._all("SELECT name FROM users ORDER BY name")]

    def add_user(self, row: UserRow) -> None:
        try:
            with self._tx() as db:
                if db.execute("SELECT 1 FROM users WHERE skeleton = ?", (row.skeleton,)).fetchone():
                    raise NameTaken(row.name)
                db.execute(
                    "INSERT INTO users (name, pw_hash, created_at, prefs, skeleton) VALUES (?, ?, ?, ?, ?)",
                    (row.name, row.pw_hash, row.created_at, json.dumps(row.prefs, ensure_ascii=False), row.skeleton),
                )
        except sqlite3.IntegrityError:
            raise NameTaken(row.name) from None

    def set_password_hash(self, name: str, pw_hash: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE users SET pw_hash = ? WHERE name = ?", (pw_hash, name))

    def merge_prefs(self, name: str, changes: dict) -> dict | None:
        with self._tx() as db:
            row = db.execute("SELECT prefs FROM users WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            merged = {**json.loads(row[0]), **changes}
            db.execute("UPDATE users SET prefs = ? WHERE name = ?", (json.dumps(merged, ensure_ascii=False), name))
        return merged

    def names_without_skeleton(self) -> list[str]:
        return [r[0] for r in self._all("SELECT name FROM users WHERE skeleton IS NULL")]

    def set_skeleton(self, name: str, skeleton: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE users SET skeleton = ? WHERE name = ?", (skeleton, name))

    def delete_user(self, name: str) -> bool:
        with self._tx() as db:
            n = db.execute("DELETE FROM users WHERE name = ?", (name,)).rowcount
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))
            db.execute("DELETE FROM api_keys WHERE name = ?", (name,))
        with self._lock:  # the deleted rows out of the write-ahead log too
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n > 0

    # -- sessions -----------------------------------------------------------------------------
    def add_session(self, row: SessionRow, *, expired_before: float) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", (expired_before,))
            db.execute(
                "INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                (row.token_hash, row.name, row.created_at, row.expires_at),
            )

    def session(self, token_hash: str) -> SessionRow | None:
        row = self._one(
            "SELECT token_hash, name, created_at, expires_at FROM sessions WHERE token_hash = ?", (token_hash,)
        )
        return SessionRow(*row) if row else None

    def extend_session(self, token_hash: str, expires_at: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE sessions SET expires_at = ? WHERE token_hash = ?", (expires_at, token_hash))

    def delete_session(self, token_hash: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))

    # -- copying ------------------------------------------------------------------------------
    def user_rows(self) -> list[UserRow]:
        rows = self._all("SELECT name, pw_hash, created_at, prefs, skeleton FROM users ORDER BY name")
        return [UserRow(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    def session_rows(self) -> list[SessionRow]:
        return [SessionRow(*r) for r in self._all("SELECT token_hash, name, created_at, expires_at FROM sessions")]

    def copy_in(self, users: list[UserRow], sessions: list[SessionRow]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT INTO users (name, pw_hash, created_at, prefs, skeleton) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                [(u.name, u.pw_hash, u.created_at, json.dumps(u.prefs, ensure_ascii=False), u.skeleton) for u in users],
            )
            db.executemany(
                "INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                [(s.token_hash, s.name, s.created_at, s.expires_at) for s in sessions],
            )

    # -- API keys -----------------------------------------------------------------------------
    def add_api_key(self, key_hash: str, prefix: str, name: str, label: str, at: float, *, max_live: int) -> int:
        with self._tx() as db:
            live = db.execute(
                "SELECT COUNT(*) FROM api_keys WHERE name = ? AND revoked_at IS NULL", (name,)
            ).fetchone()[0]
            if live >= max_live:
                raise TooManyKeys(name)
            cur = db.execute(
                "INSERT INTO api_keys (key_hash, prefix, name, label, created_at) VALUES (?, ?, ?, ?, ?)",
                (key_hash, prefix, name, label, at),
            )
        return int(cur.lastrowid)

    def api_keys(self, name: str) -> list[ApiKeyInfo]:
        rows = self._all(
            "SELECT id, prefix, label, created_at, last_used_at, revoked_at FROM api_keys WHERE name = ? ORDER BY id",
            (name,),
        )
        return [ApiKeyInfo(*r) for r in rows]

    def api_key(self, key_hash: str) -> KeyLookup | None:
        row = self._one("SELECT id, name, revoked_at, last_used_at FROM api_keys WHERE key_hash = ?", (key_hash,))
        return KeyLookup(*row) if row else None

    def touch_api_key(self, key_id: int, at: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (at, key_id))

    def revoke_api_key(self, key_id: int, name: str, at: float) -> bool:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM api_keys WHERE id = ? AND name = ?", (key_id, name)).fetchone() is None:
                return False
            db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND name = ? AND revoked_at IS NULL",
                (at, key_id, name),
            )
        return True

    # -- rate events --------------------------------------------------------------------------
    def add_events(self, keys: Iterable[str], kind: str, at: float) -> None:
        with self._tx() as db:
            db.executemany("INSERT INTO rate_events (key, kind, at) VALUES (?, ?, ?)", [(k, kind, at) for k in keys])

    def events(self, key: str, kind: str, since: float) -> list[float]:
        rows = self._all(
            "SELECT at FROM rate_events WHERE key = ? AND kind = ? AND at >= ? ORDER BY at", (key, kind, since)
        )
        return [r[0] for r in rows]

    def clear_events(self, keys: Iterable[str], kind: str) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM rate_events WHERE key = ? AND kind = ?", [(k, kind) for k in keys])

    def prune_events(self, before: float) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM rate_events WHERE at < ?", (before,))

    def forget_events_prefix(self, prefix: str) -> None:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._tx() as db:
            db.execute("DELETE FROM rate_events WHERE key LIKE ? ESCAPE '\\'", (escaped + "%",))

    # -- the browser key ----------------------------------------------------------------------
    def browser_secret(self, make: Callable[[], str]) -> str:
        """Kept in a file of its own beside the database (0600), across restarts."""
        path = self.path.parent / BROWSER_SECRET_FILE
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another worker made it a moment ago
            else:
                with os.fdopen(fd, "w") as fh:
                    fh.write(make())
        return path.read_text().strip()
