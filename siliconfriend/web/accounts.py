"""Accounts for the web app: sign up, log in, log out, delete; sessions by token.

One SQLite file, ``$SILICONFRIEND_HOME/accounts.db``: ``users`` (the name as typed at sign-up,
unique regardless of case; an argon2 hash; per-user preferences as JSON), ``sessions`` (only the
SHA-256 of each token is stored, so a copy of the file does not let anyone in) and ``failures``
(failed logins, per name and per client, for rate limiting). Every web handler turns the
client's token into a user name here, on the server; nothing else the client sends is trusted.
"""
from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from memory.sqlite_db import connect, immediate_transaction, run_script

USERNAME_RE = re.compile(r"^[\w.@+-]{2,32}$")   # \w is Unicode: 小明 is a fine name
MIN_PASSWORD = 8
MAX_PASSWORD = 256
SESSION_DAYS = 30
PREF_KEYS = ("lang", "backend", "model", "companion_name", "persona")


class AccountError(ValueError):
    """A refusal the user should read (bad name, taken, wrong password, too many tries...)."""


class SignupClosed(AccountError):
    pass


class TooManyAttempts(AccountError):
    def __init__(self, retry_after: float):
        self.retry_after = retry_after
        super().__init__(f"too many failed logins: try again in {int(retry_after) + 1} seconds")


@dataclass(frozen=True)
class Session:
    user: str
    token: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


_MIGRATIONS = [
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
    # API keys (siliconfriend/api/keys.py): only the SHA-256 of a key is stored, and its first
    # characters to tell the keys apart in lists
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
]


class Accounts:
    """The users of one SiliconFriend home. Thread-safe (one connection, one lock)."""

    def __init__(self, path: Path | str, *, signup_open: bool = True, hasher: PasswordHasher | None = None,
                 clock: Callable[[], float] = time.time, max_failures: int = 5,
                 failure_window_s: float = 300.0, session_days: float = SESSION_DAYS):
        self.path = Path(path)
        self.signup_open = signup_open
        self.hasher = hasher or PasswordHasher()
        self.clock = clock
        self.max_failures = max_failures
        self.failure_window_s = failure_window_s
        self.session_s = session_days * 86400
        self._lock = threading.RLock()
        self._db = self._connect()
        self._migrate()
        # verified against when the name is unknown, so that a wrong name takes as long as a wrong password
        self._dummy_hash = self.hasher.hash(secrets.token_hex(8))

    # -- plumbing -----------------------------------------------------------------------------
    def _connect(self):
        # secure_delete: deleted accounts leave no bytes behind
        return connect(self.path, "foreign_keys=ON", "secure_delete=ON")

    def _migrate(self) -> None:
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for i, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                run_script(db, script)
                db.execute(f"PRAGMA user_version = {i}")

    def _tx(self) -> ContextManager[sqlite3.Connection]:
        return immediate_transaction(self._db, self._lock)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- names and passwords ------------------------------------------------------------------
    @staticmethod
    def check_username(name: str) -> str:
        name = (name or "").strip()
        if not USERNAME_RE.match(name):
            raise AccountError("a user name is 2 to 32 letters, digits or . _ - @ +, without spaces")
        return name

    @staticmethod
    def check_password(password: str) -> str:
        if not password or len(password) < MIN_PASSWORD:
            raise AccountError(f"a password needs at least {MIN_PASSWORD} characters")
        if len(password) > MAX_PASSWORD:
            raise AccountError(f"a password can have at most {MAX_PASSWORD} characters")
        return password

    def exists(self, name: str) -> bool:
        return self.canonical(name) is not None

    def canonical(self, name: str) -> str | None:
        """The name as it was typed at sign-up (names are unique regardless of case)."""
        with self._lock:
            row = self._db.execute("SELECT name FROM users WHERE name = ?", ((name or "").strip(),)).fetchone()
        return row[0] if row else None

    def users(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT name FROM users ORDER BY name")]

    # -- sign up / log in / log out -----------------------------------------------------------
    def signup(self, name: str, password: str) -> Session:
        if not self.signup_open:
            raise SignupClosed("sign-up is closed on this server; ask its owner for an account")
        name = self.check_username(name)
        pw_hash = self.hasher.hash(self.check_password(password))
        try:
            with self._tx() as db:
                db.execute("INSERT INTO users (name, pw_hash, created_at) VALUES (?, ?, ?)",
                           (name, pw_hash, self.clock()))
        except sqlite3.IntegrityError:
            raise AccountError("that user name is taken") from None
        return self._new_session(name)

    def login(self, name: str, password: str, *, client: str | None = None) -> Session:
        """A new session, or AccountError. After ``max_failures`` failed tries within the window,
        for that name or from that client, every try is refused until the oldest one expires."""
        name = (name or "").strip()
        keys = [f"user:{name.lower()}"] + ([f"client:{client}"] if client else [])
        self._check_rate(keys)
        with self._lock:
            row = self._db.execute("SELECT name, pw_hash FROM users WHERE name = ?", (name,)).fetchone()
        stored = row[1] if row else self._dummy_hash
        try:
            ok = self.hasher.verify(stored, password or "") and row is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            ok = False
        if not ok:
            self._record_failure(keys)
            raise AccountError("wrong user name or password")
        canonical = row[0]
        if self.hasher.check_needs_rehash(stored):
            with self._tx() as db:
                db.execute("UPDATE users SET pw_hash = ? WHERE name = ?", (self.hasher.hash(password), canonical))
        with self._tx() as db:
            db.execute("DELETE FROM failures WHERE key = ?", (keys[0],))
        return self._new_session(canonical)

    def _check_rate(self, keys: list[str]) -> None:
        now = self.clock()
        since = now - self.failure_window_s
        with self._tx() as db:
            db.execute("DELETE FROM failures WHERE at < ?", (since,))
            for key in keys:
                n, oldest = db.execute("SELECT COUNT(*), MIN(at) FROM failures WHERE key = ?", (key,)).fetchone()
                if n >= self.max_failures:
                    raise TooManyAttempts(oldest + self.failure_window_s - now)

    def _record_failure(self, keys: list[str]) -> None:
        now = self.clock()
        with self._tx() as db:
            db.executemany("INSERT INTO failures (key, at) VALUES (?, ?)", [(k, now) for k in keys])

    def _new_session(self, name: str) -> Session:
        token = secrets.token_urlsafe(32)
        now = self.clock()
        with self._tx() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))
            db.execute("INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                       (_digest(token), name, now, now + self.session_s))
        return Session(name, token)

    def user_for(self, token: str | None) -> str | None:
        """The user a session token belongs to, or None (unknown, expired, logged out, malformed).
        A session in use is extended (sliding expiry)."""
        if not isinstance(token, str) or not 20 <= len(token) <= 200:
            return None
        now = self.clock()
        digest = _digest(token)
        with self._lock:
            row = self._db.execute("SELECT name, expires_at FROM sessions WHERE token_hash = ?", (digest,)).fetchone()
        if row is None:
            return None
        if row[1] < now:
            with self._tx() as db:
                db.execute("DELETE FROM sessions WHERE token_hash = ?", (digest,))
            return None
        if row[1] - now < self.session_s / 2:   # written at most about once in 15 days per session
            with self._tx() as db:
                db.execute("UPDATE sessions SET expires_at = ? WHERE token_hash = ?", (now + self.session_s, digest))
        return row[0]

    def logout(self, token: str | None) -> None:
        if isinstance(token, str):
            with self._tx() as db:
                db.execute("DELETE FROM sessions WHERE token_hash = ?", (_digest(token),))

    def change_password(self, name: str, old: str, new: str) -> None:
        self.verify_password(name, old)
        pw_hash = self.hasher.hash(self.check_password(new))
        with self._tx() as db:
            db.execute("UPDATE users SET pw_hash = ? WHERE name = ?", (pw_hash, name))
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))

    def verify_password(self, name: str, password: str) -> None:
        """For sensitive actions of a logged-in user (deleting the account); rate-limited too."""
        keys = [f"user:{name.lower()}"]
        self._check_rate(keys)
        with self._lock:
            row = self._db.execute("SELECT pw_hash FROM users WHERE name = ?", (name,)).fetchone()
        try:
            if row and self.hasher.verify(row[0], password or ""):
                return
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            pass
        self._record_failure(keys)
        raise AccountError("wrong password")

    # -- preferences --------------------------------------------------------------------------
    def prefs(self, name: str) -> dict:
        with self._lock:
            row = self._db.execute("SELECT prefs FROM users WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else {}

    def set_prefs(self, name: str, **prefs) -> dict:
        unknown = set(prefs) - set(PREF_KEYS)
        if unknown:
            raise AccountError(f"unknown preferences: {', '.join(sorted(unknown))}")
        with self._tx() as db:
            row = db.execute("SELECT prefs FROM users WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise AccountError("no such user")
            merged = {**json.loads(row[0]), **{k: v for k, v in prefs.items() if v is not None}}
            db.execute("UPDATE users SET prefs = ? WHERE name = ?", (json.dumps(merged, ensure_ascii=False), name))
        return merged

    # -- deletion -----------------------------------------------------------------------------
    def delete(self, name: str) -> bool:
        """The account, its sessions, preferences and failure records. (Memories are the bank's.)"""
        with self._tx() as db:
            n = db.execute("DELETE FROM users WHERE name = ?", (name,)).rowcount
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))
            db.execute("DELETE FROM api_keys WHERE name = ?", (name,))
            db.execute("DELETE FROM failures WHERE key = ?", (f"user:{name.lower()}",))
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n > 0
