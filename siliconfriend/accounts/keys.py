"""Per-user API keys: made and revoked by their owner, shown once, stored as a SHA-256 digest.

A key is ``sf-`` and 43 random URL-safe characters (256 bits), so a digest without salt or
stretching is enough: nobody can guess one, and a copy of the accounts database lets nobody in.
The keys live in the accounts store (``store.AccountStore``); the web app's account page makes
and lists them, the API (``siliconfriend.api``) checks them, the CLI's ``keys`` commands do both.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Callable, TypeGuard

from memory.message import Message as Text

from .store import ApiKeyInfo, TooManyKeys
from .store import secret_digest as digest
from .users import AccountError, Accounts

KEY_PREFIX = "sf-"
SHOWN_CHARS = 10  # the part of a key shown in lists ("sf-AbCdEfG")
MAX_LABEL = 80
MAX_KEYS_PER_USER = 50
LAST_USED_EVERY_S = 60.0  # "last used" is written at most once a minute per key


TOO_MANY_KEYS = Text(
    "keys.too_many", en="at most {n} keys per account: revoke one first", zh="每个账户最多 {n} 个密钥：请先吊销一个。"
)
NO_SUCH_KEY = Text("keys.unknown", en="{user} has no API key {id}", zh="你没有编号为 {id} 的 API 密钥。")


class ApiKeyError(AccountError):
    """A refusal about keys the owner should read (unknown key id, too many keys...)."""


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
    """The API keys of the users of one accounts store."""

    def __init__(self, accounts: Accounts, *, clock: Callable[[], float] | None = None):
        self.accounts = accounts
        self.store = accounts.store
        self.clock = clock or accounts.clock

    def create(self, user: str, label: str = "") -> NewKey:
        name = self.accounts.canonical(user)
        if name is None:
            raise ApiKeyError(f"no account named {user!r}")
        label = " ".join((label or "").split())[:MAX_LABEL]
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        now = self.clock()
        try:
            key_id = self.store.add_api_key(
                digest(key), key[:SHOWN_CHARS], name, label, now, max_live=MAX_KEYS_PER_USER
            )
        except TooManyKeys:
            raise ApiKeyError(TOO_MANY_KEYS(n=str(MAX_KEYS_PER_USER))) from None
        return NewKey(key, ApiKeyInfo(key_id, key[:SHOWN_CHARS], label, now, None, None))

    def list(self, user: str) -> list[ApiKeyInfo]:
        return self.store.api_keys(self.accounts.canonical(user) or user)

    def revoke(self, user: str, key_id: int) -> ApiKeyInfo:
        """Revoke one of ``user``'s keys (another user's key id is "no such key" too)."""
        name = self.accounts.canonical(user) or user
        if not self.store.revoke_api_key(int(key_id), name, self.clock()):
            raise ApiKeyError(NO_SUCH_KEY(user=user, id=str(key_id)))
        return next(k for k in self.list(name) if k.id == int(key_id))

    def owner(self, key: str | None) -> KeyOwner | None:
        """The user a key acts as, or None (unknown, revoked, malformed)."""
        if not looks_like_key(key):
            return None
        found = self.store.api_key(digest(key))
        if found is None or found.revoked_at is not None:
            return None
        now = self.clock()
        if found.last_used_at is None or now - found.last_used_at > LAST_USED_EVERY_S:
            self.store.touch_api_key(found.id, now)
        return KeyOwner(found.name, found.id)


__all__ = ["ApiKeys", "ApiKeyInfo", "NewKey", "KeyOwner", "ApiKeyError", "looks_like_key", "digest"]
