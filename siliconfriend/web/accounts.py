"""Accounts for the web app: sign up, log in, log out, delete; sessions by token.

One SQLite file, ``$SILICONFRIEND_HOME/accounts.db``: ``users`` (the name as typed at sign-up,
unique regardless of case; an argon2 hash; per-user preferences as JSON), ``sessions`` (only the
SHA-256 of each token is stored, so a copy of the file does not let anyone in) and
``rate_events`` (failed and successful logins per account, client and pair, for the rate limiter
of ``rate_limit.py``). Every web handler turns the client's token into a user name here, on the
server; nothing else the client sends is trusted.

User names are NFKC-normalised ("ｆｏｏ" is "foo"), must hold a letter or digit (no "..") and may
not mix look-alike scripts ("аlice" with a Cyrillic а); a name whose look-alike *skeleton*
matches an existing one is refused as taken. Sign-up says when a name is taken, so it tells
whether a name exists: accepted (a login says only "wrong user name or password"; rate limits
bound the guessing).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Protocol, Sequence

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from memory.sqlite_db import connect, immediate_transaction, run_script

from . import rate_limit
from .rate_limit import Attempt, Limits, RateLimiter, RateLimitStore, SQLiteRateLimitStore

USERNAME_RE = re.compile(r"^[\w.@+-]{2,32}$")  # \w is Unicode: 小明 is a fine name
MIN_PASSWORD = 8
MAX_PASSWORD = 256
SESSION_DAYS = 30
PREF_KEYS = ("lang", "backend", "model", "companion_name", "persona")


class AccountError(ValueError):
    """A refusal the user should read (bad name, taken, wrong password, too many tries...)."""


class SignupClosed(AccountError):
    pass


class TooManyAttempts(AccountError, rate_limit.TooManyAttempts):
    def __init__(self, retry_after: float):
        rate_limit.TooManyAttempts.__init__(self, retry_after)
        self.args = (f"too many failed logins: try again in {int(self.retry_after) + 1} seconds",)


# letters of other scripts that look like Latin ones (after casefolding), from Unicode's
# confusables (TR39) for the scripts a name could be faked with, and the digits 0 and 1
_LOOKALIKES = str.maketrans(
    {
        "а": "a",
        "в": "b",
        "е": "e",
        "ё": "e",
        "к": "k",
        "м": "m",
        "н": "h",
        "о": "o",
        "р": "p",
        "с": "c",
        "т": "t",
        "у": "y",
        "х": "x",
        "ѕ": "s",
        "і": "i",
        "ї": "i",
        "ј": "j",
        "ԁ": "d",
        "һ": "h",
        "ӏ": "l",
        "ԛ": "q",
        "ԝ": "w",
        "ь": "b",
        "α": "a",
        "β": "b",
        "ε": "e",
        "η": "n",
        "ι": "i",
        "κ": "k",
        "μ": "u",
        "ν": "v",
        "ο": "o",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "ω": "w",
        "γ": "y",
        "0": "o",
        "1": "l",
    }
)
_FAKING_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return next((s for s in _FAKING_SCRIPTS if name.startswith(s)), "OTHER")


def skeleton(name: str) -> str:
    """What a name looks like: casefolded, look-alike letters mapped to Latin, "rn" as "m"."""
    return unicodedata.normalize("NFKC", name).casefold().translate(_LOOKALIKES).replace("rn", "m")


@dataclass(frozen=True)
class Session:
    user: str
    token: str


def secret_digest(token: str) -> str:
    """The SHA-256 of a secret (a session token, an API key): what is stored instead of it."""
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
    # 2: API keys (siliconfriend/api/keys.py): only the SHA-256 of a key is stored, and its first
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
    # 3: the rate limiter's events (rate_limit.py) replace the failures; a look-alike skeleton per name
    """
    DROP TABLE failures;
    ALTER TABLE users ADD COLUMN skeleton TEXT;
    CREATE INDEX users_by_skeleton ON users(skeleton);
    """,
]


class SqlConnection(Protocol):
    """What the accounts' SQL (and the API keys') runs on in a transaction: a sqlite3 connection,
    or its PostgreSQL stand-in (``accounts_pg._Dialect``)."""

    def execute(self, statement: str, parameters: Sequence[Any] = ..., /) -> Any: ...
    def executemany(self, statement: str, rows: Iterable[Any], /) -> Any: ...


class Accounts:
    """The users of one SiliconFriend home. Thread-safe (one connection, one lock)."""

    def __init__(
        self,
        path: Path | str,
        *,
        signup_open: bool = True,
        hasher: PasswordHasher | None = None,
        clock: Callable[[], float] = time.time,
        limits: Limits = Limits(),
        session_days: float = SESSION_DAYS,
    ):
        self.path = Path(path)
        self.signup_open = signup_open
        self.hasher = hasher or PasswordHasher()
        self.clock = clock
        self.session_s = session_days * 86400
        self._lock = threading.RLock()
        self._db = self._connect()
        self._migrate()
        self.limiter = RateLimiter(self._rate_store(), limits, clock)
        # verified against when the name is unknown, so that a wrong name takes as long as a wrong password
        self._dummy_hash = self.hasher.hash(secrets.token_hex(8))

    # -- plumbing -----------------------------------------------------------------------------
    def _connect(self):
        # secure_delete: deleted accounts leave no bytes behind
        return connect(self.path, "foreign_keys=ON", "secure_delete=ON")

    def _migrate(self) -> None:
        with immediate_transaction(self._db, self._lock) as db:  # SQLite's (PgAccounts has its own)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if (
                version == 2
                and not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'api_keys'").fetchone()
            ):
                # a database whose migration 2 was the skeletons (today's 3) and had no API keys
                run_script(db, _MIGRATIONS[1])
                version = 3
                db.execute(f"PRAGMA user_version = {version}")
            for i, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                run_script(db, script)
                db.execute(f"PRAGMA user_version = {i}")
            self._fill_skeletons(db)

    @staticmethod
    def _fill_skeletons(db) -> None:
        """Names from before the skeleton column get theirs."""
        for (name,) in db.execute("SELECT name FROM users WHERE skeleton IS NULL").fetchall():
            db.execute("UPDATE users SET skeleton = ? WHERE name = ?", (skeleton(name), name))

    def _rate_store(self) -> RateLimitStore:
        return SQLiteRateLimitStore(self._db, self._lock)

    def _tx(self) -> ContextManager[SqlConnection]:
        return immediate_transaction(self._db, self._lock)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- names and passwords ------------------------------------------------------------------
    @staticmethod
    def normalize(name: str) -> str:
        """The name as stored and looked up: NFKC ("ｆｏｏ" is "foo"), without surrounding space."""
        return unicodedata.normalize("NFKC", name or "").strip()

    @classmethod
    def check_username(cls, name: str) -> str:
        name = cls.normalize(name)
        if not USERNAME_RE.match(name):
            raise AccountError("a user name is 2 to 32 letters, digits or . _ - @ +, without spaces")
        if not any(ch.isalnum() for ch in name):
            raise AccountError("a user name needs at least one letter or digit")
        scripts = {_script(ch) for ch in name} - {None, "OTHER"}
        if len(scripts) > 1:
            raise AccountError("a user name cannot mix Latin, Cyrillic and Greek letters (they look alike)")
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
            row = self._db.execute("SELECT name FROM users WHERE name = ?", (self.normalize(name),)).fetchone()
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
                if db.execute("SELECT 1 FROM users WHERE skeleton = ?", (skeleton(name),)).fetchone():
                    raise sqlite3.IntegrityError("a look-alike name exists")
                db.execute(
                    "INSERT INTO users (name, pw_hash, created_at, skeleton) VALUES (?, ?, ?, ?)",
                    (name, pw_hash, self.clock(), skeleton(name)),
                )
        except sqlite3.IntegrityError:
            raise AccountError("that user name is taken (or looks like one that is)") from None
        return self._new_session(name)

    @staticmethod
    def _attempt(name: str, client: str | None) -> Attempt:
        return Attempt(f"user:{name.casefold()}", client)

    def _check_rate(self, attempt: Attempt) -> None:
        try:
            self.limiter.check(attempt)
        except rate_limit.TooManyAttempts as exc:
            raise TooManyAttempts(exc.retry_after) from None

    def login(self, name: str, password: str, *, client: str | None = None) -> Session:
        """A new session, or AccountError (TooManyAttempts while the rate limiter says wait:
        see ``rate_limit.py`` for the limits per account, per client and per both)."""
        name = self.normalize(name)
        attempt = self._attempt(name, client)
        self._check_rate(attempt)
        with self._lock:
            row = self._db.execute("SELECT name, pw_hash FROM users WHERE name = ?", (name,)).fetchone()
        stored = row[1] if row else self._dummy_hash
        try:
            ok = self.hasher.verify(stored, password or "") and row is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            ok = False
        if not ok:
            self.limiter.failed(attempt)
            raise AccountError("wrong user name or password")
        canonical = row[0]
        if self.hasher.check_needs_rehash(stored):
            with self._tx() as db:
                db.execute("UPDATE users SET pw_hash = ? WHERE name = ?", (self.hasher.hash(password), canonical))
        self.limiter.succeeded(attempt)
        return self._new_session(canonical)

    def _new_session(self, name: str) -> Session:
        token = secrets.token_urlsafe(32)
        now = self.clock()
        with self._tx() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))
            db.execute(
                "INSERT INTO sessions (token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?)",
                (secret_digest(token), name, now, now + self.session_s),
            )
        return Session(name, token)

    def user_for(self, token: str | None) -> str | None:
        """The user a session token belongs to, or None (unknown, expired, logged out, malformed).
        A session in use is extended (sliding expiry)."""
        if not isinstance(token, str) or not 20 <= len(token) <= 200:
            return None
        now = self.clock()
        digest = secret_digest(token)
        with self._lock:
            row = self._db.execute("SELECT name, expires_at FROM sessions WHERE token_hash = ?", (digest,)).fetchone()
        if row is None:
            return None
        if row[1] < now:
            with self._tx() as db:
                db.execute("DELETE FROM sessions WHERE token_hash = ?", (digest,))
            return None
        if row[1] - now < self.session_s / 2:  # written at most about once in 15 days per session
            with self._tx() as db:
                db.execute("UPDATE sessions SET expires_at = ? WHERE token_hash = ?", (now + self.session_s, digest))
        return row[0]

    def logout(self, token: str | None) -> None:
        if isinstance(token, str):
            with self._tx() as db:
                db.execute("DELETE FROM sessions WHERE token_hash = ?", (secret_digest(token),))

    def verify_password(self, name: str, password: str, *, client: str | None = None) -> None:
        """For sensitive actions of a logged-in user (deleting the account); rate-limited too."""
        attempt = self._attempt(name, client)
        self._check_rate(attempt)
        with self._lock:
            row = self._db.execute("SELECT pw_hash FROM users WHERE name = ?", (name,)).fetchone()
        try:
            if row and self.hasher.verify(row[0], password or ""):
                return
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            pass
        self.limiter.failed(attempt)
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
        self.limiter.forget(self._attempt(name, None).name)
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return n > 0
