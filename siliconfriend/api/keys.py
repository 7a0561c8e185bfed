"""Per-user API keys: made and revoked by their owner, shown once, stored as a SHA-256 digest.

A key is ``sf-`` and 43 random URL-safe characters (256 bits), so a digest without salt or
stretching is enough: nobody can guess one, and a copy of the accounts database lets nobody in.
The table lives in the accounts database (its migration is in ``accounts.py``); every statement
this module runs is in ``SQL`` below, so that another store can port them one by one.

Rate limits, "like logins": failed attempts (an unknown, malformed or revoked key) are counted per
client by the accounts' login limiter (``web/rate_limit.py``, its events in the accounts database),
and a client over its limits is refused until its failures age out; a valid key may make at most
``requests_per_minute`` requests (a sliding window kept in this process).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Protocol, TypeGuard

from ..web.accounts import AccountError, Accounts
from ..web.accounts import secret_digest as digest
from ..web.rate_limit import Attempt, TooManyAttempts

KEY_PREFIX = "sf-"
SHOWN_CHARS = 10  # the part of a key shown in lists ("sf-AbCdEfG")
MAX_LABEL = 80
MAX_KEYS_PER_USER = 50
LAST_USED_EVERY_S = 60.0  # "last used" is written at most once a minute per key

SQL = {
    "insert": "INSERT INTO api_keys (key_hash, prefix, name, label, created_at) VALUES (?, ?, ?, ?, ?)",
    "count_live": "SELECT COUNT(*) FROM api_keys WHERE name = ? AND revoked_at IS NULL",
    "list": "SELECT id, prefix, label, created_at, last_used_at, revoked_at FROM api_keys WHERE name = ? ORDER BY id",
    "lookup": "SELECT id, name, revoked_at, last_used_at FROM api_keys WHERE key_hash = ?",
    "touch": "UPDATE api_keys SET last_used_at = ? WHERE id = ?",
    "revoke": "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND name = ? AND revoked_at IS NULL",
    "owner": "SELECT revoked_at FROM api_keys WHERE id = ? AND name = ?",
}


class ApiKeyError(AccountError):
    """A refusal about keys the owner should read (unknown key id, too many keys...)."""


class RateLimited(Exception):
    """Too many requests (or too many wrong keys) for now; ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float):
        self.retry_after = max(0.0, retry_after)
        super().__init__(f"{message}: try again in {int(self.retry_after) + 1} seconds")


@dataclass(frozen=True)
class ApiKeyInfo:
    id: int
    prefix: str  # the first characters, to tell keys apart (never enough to use one)
    label: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "prefix": self.prefix,
            "label": self.label,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "revoked_at": self.revoked_at,
            "active": self.active,
        }


@dataclass(frozen=True)
class NewKey:
    key: str  # shown once, never stored
    info: ApiKeyInfo


@dataclass(frozen=True)
class KeyOwner:
    user: str
    key_id: int


def looks_like_key(key: str | None) -> TypeGuard[str]:
    return isinstance(key, str) and key.startswith(KEY_PREFIX) and 30 <= len(key) <= 100 and key.isascii()


class ApiKeys:
    """The API keys of the users of one accounts database."""

    def __init__(self, accounts: Accounts, *, clock: Callable[[], float] | None = None):
        self.accounts = accounts
        self.clock = clock or accounts.clock

    def create(self, user: str, label: str = "") -> NewKey:
        name = self.accounts.canonical(user)
        if name is None:
            raise ApiKeyError(f"no account named {user!r}")
        label = " ".join((label or "").split())[:MAX_LABEL]
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = self.clock()
        with self.accounts._tx() as db:
            if db.execute(SQL["count_live"], (name,)).fetchone()[0] >= MAX_KEYS_PER_USER:
                raise ApiKeyError(f"at most {MAX_KEYS_PER_USER} keys per account: revoke one first")
            cur = db.execute(SQL["insert"], (digest(key), key[:SHOWN_CHARS], name, label, now))
        return NewKey(key, ApiKeyInfo(cur.lastrowid, key[:SHOWN_CHARS], label, now, None, None))

    def list(self, user: str) -> list[ApiKeyInfo]:
        name = self.accounts.canonical(user) or user
        with self.accounts._lock:
            rows = self.accounts._db.execute(SQL["list"], (name,)).fetchall()
        return [ApiKeyInfo(*row) for row in rows]

    def revoke(self, user: str, key_id: int) -> ApiKeyInfo:
        """Revoke one of ``user``'s keys (another user's key id is "no such key" too)."""
        name = self.accounts.canonical(user) or user
        with self.accounts._tx() as db:
            row = db.execute(SQL["owner"], (int(key_id), name)).fetchone()
            if row is None:
                raise ApiKeyError(f"{user} has no API key {key_id}")
            db.execute(SQL["revoke"], (self.clock(), int(key_id), name))
        return next(k for k in self.list(name) if k.id == int(key_id))

    def owner(self, key: str | None) -> KeyOwner | None:
        """The user a key acts as, or None (unknown, revoked, malformed)."""
        if not looks_like_key(key):
            return None
        with self.accounts._lock:
            row = self.accounts._db.execute(SQL["lookup"], (digest(key),)).fetchone()
        if row is None or row[2] is not None:
            return None
        key_id, name, _, last_used = row
        now = self.clock()
        if last_used is None or now - last_used > LAST_USED_EVERY_S:
            with self.accounts._tx() as db:
                db.execute(SQL["touch"], (now, key_id))
        return KeyOwner(name, key_id)


class KeyLimiter(Protocol):
    """What the API asks of a rate limiter (swappable for the web app's login limiter)."""

    def check_client(self, client: str | None) -> None: ...  # RateLimited when blocked
    def failed(self, client: str | None) -> None: ...
    def allow_request(self, key_id: int) -> None: ...  # RateLimited when over the rate


class LoginStyleLimiter:
    """Bad keys are counted per client with the accounts' own login limiter, exactly as failed
    logins are; requests per valid key in a sliding minute, in memory.

    The accounts' limiter (``accounts.limiter``, a ``RateLimiter``) is used as it is. Each client
    is its own "name" here, so that wrong keys from one client never hold back the keys of another."""

    def __init__(
        self, accounts: Accounts, *, requests_per_minute: int = 60, clock: Callable[[], float] = time.monotonic
    ):
        self.accounts = accounts
        self.requests_per_minute = requests_per_minute
        self.clock = clock
        self._recent: dict[int, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _attempt(self, client: str | None) -> Attempt:
        return Attempt(f"apikey-client:{client or 'unknown'}", client)

    def check_client(self, client: str | None) -> None:
        try:
            self.accounts.limiter.check(self._attempt(client))
        except TooManyAttempts as exc:
            raise RateLimited("too many requests with a wrong API key", exc.retry_after) from None

    def failed(self, client: str | None) -> None:
        self.accounts.limiter.failed(self._attempt(client))

    def allow_request(self, key_id: int) -> None:
        if self.requests_per_minute <= 0:
            return
        now = self.clock()
        with self._lock:
            recent = self._recent[key_id]
            while recent and recent[0] <= now - 60.0:
                recent.popleft()
            if len(recent) >= self.requests_per_minute:
                raise RateLimited(
                    f"this key may make {self.requests_per_minute} requests a minute", recent[0] + 60.0 - now
                )
            recent.append(now)


__all__ = [
    "ApiKeys",
    "ApiKeyInfo",
    "NewKey",
    "KeyOwner",
    "KeyLimiter",
    "LoginStyleLimiter",
    "ApiKeyError",
    "RateLimited",
    "looks_like_key",
    "digest",
    "SQL",
]
