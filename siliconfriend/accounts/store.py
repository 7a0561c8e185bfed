"""The accounts' repository: what the account logic (``users.py``), the API keys (``keys.py``) and
the rate limiter (``rate_limit.py``) ask of a database.

Two implementations, each plain SQL in its own dialect: ``sqlite.py`` (``accounts.db`` in the
home) and ``postgres.py`` (the ``accounts`` schema of the shared database). The logic above them
is written once, against this interface; a store raises only the errors defined here, never its
driver's. Names are compared regardless of case by every store (SQLite: ``COLLATE NOCASE``;
PostgreSQL: ``lower(name)``) and come back as typed at sign-up; a write that names a user (a
session, an API key) names them as stored (``UserRow.name``). ``tests/pg/test_account_store_contract.py``
runs every behaviour against both stores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol


class NameTaken(Exception):
    """The name, or a name that looks like it (the same skeleton), has an account already."""


class TooManyKeys(Exception):
    """The account has as many live API keys as it may have."""


def secret_digest(token: str) -> str:
    """The SHA-256 of a secret (a session token, an API key): what is stored instead of it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class UserRow:
    name: str  # as typed at sign-up
    pw_hash: str
    created_at: float
    prefs: dict = field(default_factory=dict)
    skeleton: str | None = None  # what the name looks like (``users.skeleton``); None before it was worked out


@dataclass(frozen=True)
class SessionRow:
    token_hash: str  # the SHA-256 of the token, never the token
    name: str
    created_at: float
    expires_at: float


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
class KeyLookup:
    """A stored key found by its digest."""

    id: int
    name: str
    revoked_at: float | None
    last_used_at: float | None


class RateEvents(Protocol):
    """Timestamped events per key, for the rate limiter: ``kind`` is "fail" (a failed try) or
    "ok" (a success)."""

    def add_events(self, keys: Iterable[str], kind: str, at: float) -> None: ...

    def events(self, key: str, kind: str, since: float) -> list[float]:
        """The times of ``key``'s ``kind`` events at or after ``since``, oldest first."""
        ...

    def clear_events(self, keys: Iterable[str], kind: str) -> None: ...

    def prune_events(self, before: float) -> None:
        """Forget every event older than ``before``."""
        ...

    def forget_events_prefix(self, prefix: str) -> None:
        """Forget every event of the keys that start with ``prefix`` (a deleted account)."""
        ...


class AccountStore(RateEvents, Protocol):
    """Users, sessions, API keys and rate events in one database. Thread-safe; every method is
    one transaction."""

    where: str  # the file, or the server without its password: for messages to the operator

    # -- users
    def user(self, name: str) -> UserRow | None: ...
    def users(self) -> list[str]:
        """Every name, sorted."""
        ...

    def add_user(self, row: UserRow) -> None:
        """NameTaken when the name (in any case) or its skeleton is taken."""
        ...

    def set_password_hash(self, name: str, pw_hash: str) -> None: ...
    def merge_prefs(self, name: str, changes: dict) -> dict | None:
        """The user's preferences updated with ``changes`` (one transaction); None: no such user."""
        ...

    def names_without_skeleton(self) -> list[str]: ...
    def set_skeleton(self, name: str, skeleton: str) -> None: ...
    def delete_user(self, name: str) -> bool:
        """The user with their sessions and API keys, leaving no bytes behind; False: no such user."""
        ...

    # -- sessions
    def add_session(self, row: SessionRow, *, expired_before: float) -> None:
        """Store a session, and drop every session that expired before ``expired_before``."""
        ...

    def session(self, token_hash: str) -> SessionRow | None: ...
    def extend_session(self, token_hash: str, expires_at: float) -> None: ...
    def delete_session(self, token_hash: str) -> None: ...

    # -- copying a whole store (``siliconfriend migrate-store``)
    def user_rows(self) -> list[UserRow]: ...
    def session_rows(self) -> list[SessionRow]: ...
    def copy_in(self, users: list[UserRow], sessions: list[SessionRow]) -> None:
        """The users and sessions this store lacks (by name, by token hash); others are left alone."""
        ...

    # -- API keys
    def add_api_key(self, key_hash: str, prefix: str, name: str, label: str, at: float, *, max_live: int) -> int:
        """The new key's id; TooManyKeys when ``name`` has ``max_live`` keys not revoked."""
        ...

    def api_keys(self, name: str) -> list[ApiKeyInfo]:
        """Every key of ``name``, revoked ones too, oldest first."""
        ...

    def api_key(self, key_hash: str) -> KeyLookup | None: ...
    def touch_api_key(self, key_id: int, at: float) -> None: ...
    def revoke_api_key(self, key_id: int, name: str, at: float) -> bool:
        """False when ``name`` has no key ``key_id``; a key revoked before keeps its first time."""
        ...

    # -- the web app's browser key
    def browser_secret(self, make: Callable[[], str]) -> str:
        """The key that encrypts the session token in the browser, made once by ``make`` and the
        same for every worker of this store afterwards."""
        ...

    def close(self) -> None: ...


__all__ = [
    "AccountStore",
    "ApiKeyInfo",
    "KeyLookup",
    "NameTaken",
    "RateEvents",
    "SessionRow",
    "TooManyKeys",
    "UserRow",
    "secret_digest",
]
