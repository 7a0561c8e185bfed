"""Accounts: sign up, log in, log out, delete; sessions by token; preferences.

The logic, once, over an ``AccountStore`` (``store.py``: SQLite's ``accounts.db`` in the home, or
the ``accounts`` schema of the PostgreSQL database): ``users`` (the name as typed at sign-up,
unique regardless of case; an argon2 hash; per-user preferences), ``sessions`` (only the SHA-256
of each token is stored, so a copy of the database does not let anyone in) and the rate
limiter's events (failed and successful logins per account, client and pair: ``rate_limit.py``).
Every web handler and API request turns the client's token into a user name here, on the server;
nothing else the client sends is trusted.

User names are NFKC-normalised ("ｆｏｏ" is "foo"), must hold a letter or digit (no "..") and may
not mix look-alike scripts ("аlice" with a Cyrillic а); a name whose look-alike *skeleton*
matches an existing one is refused as taken. Sign-up says when a name is taken, so it tells
whether a name exists: accepted (a login says only "wrong user name or password"; rate limits
bound the guessing).
"""

from __future__ import annotations

import re
import secrets
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from memory.message import Message as Text
from memory.stores.base import is_postgres_url

from ..config import Settings
from ..i18n import wait_said
from . import rate_limit
from .rate_limit import Attempt, Limits, RateLimiter
from .store import AccountStore, NameTaken, SessionRow, UserRow, secret_digest

USERNAME_RE = re.compile(r"^[\w.@+-]{2,32}$")  # \w is Unicode: 小明 is a fine name
MIN_PASSWORD = 8
MAX_PASSWORD = 256
SESSION_DAYS = 30
PREF_KEYS = ("lang", "backend", "model", "companion_name", "persona")


class AccountError(ValueError):
    """A refusal the user should read (bad name, taken, wrong password, too many tries...): its
    argument is one of the messages below."""


# what accounts say to a person (``Text``: an id with its English and Chinese)
BAD_NAME = Text(
    "account.bad_name",
    en="a user name is 2 to 32 letters, digits or . _ - @ +, without spaces",
    zh="用户名为 2 到 32 个字母、数字或 . _ - @ +，不能有空格。",
)
NAME_NEEDS_LETTER = Text(
    "account.name_needs_letter",
    en="a user name needs at least one letter or digit",
    zh="用户名至少要有一个字母或数字。",
)
NAME_MIXES_SCRIPTS = Text(
    "account.name_mixes_scripts",
    en="a user name cannot mix Latin, Cyrillic and Greek letters (they look alike)",
    zh="用户名不能混用拉丁、西里尔和希腊字母（它们看起来很像）。",
)
SHORT_PASSWORD = Text(
    "account.short_password", en="a password needs at least {n} characters", zh="密码至少需要 {n} 个字符。"
)
LONG_PASSWORD = Text(
    "account.long_password", en="a password can have at most {n} characters", zh="密码最多 {n} 个字符。"
)
SIGNUP_CLOSED = Text(
    "account.signup_closed",
    en="sign-up is closed on this server; ask its owner for an account",
    zh="本服务器已关闭注册；请向管理员申请账户。",
)
NAME_TAKEN = Text(
    "account.name_taken",
    en="that user name is taken (or looks like one that is)",
    zh="这个用户名已被占用（或与已有的用户名太像）。",
)
WRONG_LOGIN = Text("account.wrong_login", en="wrong user name or password", zh="用户名或密码错误。")
WRONG_PASSWORD = Text("account.wrong_password", en="wrong password", zh="密码错误。")
TOO_MANY_LOGINS = Text(
    "account.too_many_logins", en="too many failed logins: try again in {wait}", zh="尝试失败次数过多：请{wait}后再试。"
)


class SignupClosed(AccountError):
    pass


class TooManyAttempts(AccountError, rate_limit.TooManyAttempts):
    def __init__(self, retry_after: float):
        rate_limit.TooManyAttempts.__init__(self, retry_after)
        self.args = (TOO_MANY_LOGINS(wait=wait_said(self.retry_after)),)


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


class Accounts:
    """The users of one accounts store. Thread-safe (the store is)."""

    def __init__(
        self,
        store: AccountStore,
        *,
        signup_open: bool = True,
        hasher: PasswordHasher | None = None,
        clock: Callable[[], float] = time.time,
        limits: Limits = Limits(),
        session_days: float = SESSION_DAYS,
    ):
        self.store = store
        self.signup_open = signup_open
        self.hasher = hasher or PasswordHasher()
        self.clock = clock
        self.session_s = session_days * 86400
        for name in store.names_without_skeleton():  # names from before the skeleton column
            store.set_skeleton(name, skeleton(name))
        self.limiter = RateLimiter(store, limits, clock)
        # verified against when the name is unknown, so that a wrong name takes as long as a wrong password
        self._dummy_hash = self.hasher.hash(secrets.token_hex(8))

    @classmethod
    def at(cls, where: Path | str, **options) -> Accounts:
        """The accounts of the store at ``where`` (``open_store``)."""
        return cls(open_store(where), **options)

    def close(self) -> None:
        self.store.close()

    def browser_secret(self) -> str:
        """The key that encrypts the session token in the browser, the same for every worker of
        this store and across restarts (a browser whose requests reach another worker stays
        logged in)."""
        return self.store.browser_secret(lambda: secrets.token_urlsafe(32))

    # -- names and passwords ------------------------------------------------------------------
    @staticmethod
    def normalize(name: str) -> str:
        """The name as stored and looked up: NFKC ("ｆｏｏ" is "foo"), without surrounding space."""
        return unicodedata.normalize("NFKC", name or "").strip()

    @classmethod
    def check_username(cls, name: str) -> str:
        name = cls.normalize(name)
        if not USERNAME_RE.match(name):
            raise AccountError(BAD_NAME())
        if not any(ch.isalnum() for ch in name):
            raise AccountError(NAME_NEEDS_LETTER())
        scripts = {_script(ch) for ch in name} - {None, "OTHER"}
        if len(scripts) > 1:
            raise AccountError(NAME_MIXES_SCRIPTS())
        return name

    @staticmethod
    def check_password(password: str) -> str:
        if not password or len(password) < MIN_PASSWORD:
            raise AccountError(SHORT_PASSWORD(n=str(MIN_PASSWORD)))
        if len(password) > MAX_PASSWORD:
            raise AccountError(LONG_PASSWORD(n=str(MAX_PASSWORD)))
        return password

    def exists(self, name: str) -> bool:
        return self.canonical(name) is not None

    def canonical(self, name: str) -> str | None:
        """The name as it was typed at sign-up (names are unique regardless of case)."""
        row = self.store.user(self.normalize(name))
        return row.name if row else None

    def users(self) -> list[str]:
        return self.store.users()

    # -- sign up / log in / log out -----------------------------------------------------------
    def signup(self, name: str, password: str) -> Session:
        if not self.signup_open:
            raise SignupClosed(SIGNUP_CLOSED())
        name = self.check_username(name)
        pw_hash = self.hasher.hash(self.check_password(password))
        try:
            self.store.add_user(UserRow(name, pw_hash, self.clock(), {}, skeleton(name)))
        except NameTaken:
            raise AccountError(NAME_TAKEN()) from None
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
        row = self.store.user(name)
        stored = row.pw_hash if row else self._dummy_hash
        try:
            ok = self.hasher.verify(stored, password or "") and row is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            ok = False
        if not ok or row is None:
            self.limiter.failed(attempt)
            raise AccountError(WRONG_LOGIN())
        if self.hasher.check_needs_rehash(stored):
            self.store.set_password_hash(row.name, self.hasher.hash(password))
        self.limiter.succeeded(attempt)
        return self._new_session(row.name)

    def _new_session(self, name: str) -> Session:
        token = secrets.token_urlsafe(32)
        now = self.clock()
        self.store.add_session(SessionRow(secret_digest(token), name, now, now + self.session_s), expired_before=now)
        return Session(name, token)

    def user_for(self, token: str | None) -> str | None:
        """The user a session token belongs to, or None (unknown, expired, logged out, malformed).
        A session in use is extended (sliding expiry)."""
        if not isinstance(token, str) or not 20 <= len(token) <= 200:
            return None
        now = self.clock()
        digest = secret_digest(token)
        row = self.store.session(digest)
        if row is None:
            return None
        if row.expires_at < now:
            self.store.delete_session(digest)
            return None
        if row.expires_at - now < self.session_s / 2:  # written at most about once in 15 days per session
            self.store.extend_session(digest, now + self.session_s)
        return row.name

    def logout(self, token: str | None) -> None:
        if isinstance(token, str):
            self.store.delete_session(secret_digest(token))

    def verify_password(self, name: str, password: str, *, client: str | None = None) -> None:
        """For sensitive actions of a logged-in user (deleting the account); rate-limited too."""
        attempt = self._attempt(name, client)
        self._check_rate(attempt)
        row = self.store.user(name)
        try:
            if row and self.hasher.verify(row.pw_hash, password or ""):
                return
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            pass
        self.limiter.failed(attempt)
        raise AccountError(WRONG_PASSWORD())

    # -- preferences --------------------------------------------------------------------------
    def prefs(self, name: str) -> dict:
        row = self.store.user(name)
        return dict(row.prefs) if row else {}

    def set_prefs(self, name: str, **prefs) -> dict:
        unknown = set(prefs) - set(PREF_KEYS)
        if unknown:
            raise AccountError(f"unknown preferences: {', '.join(sorted(unknown))}")
        merged = self.store.merge_prefs(name, {k: v for k, v in prefs.items() if v is not None})
        if merged is None:
            raise AccountError("no such user")
        return merged

    # -- deletion -----------------------------------------------------------------------------
    def delete(self, name: str) -> bool:
        """The account, its sessions, API keys, preferences and rate-limit records. (Memories are
        the bank's.)"""
        self.limiter.forget(self._attempt(name, None).name)
        return self.store.delete_user(name)


def open_store(where: Path | str) -> AccountStore:
    """The accounts store at ``where``: a PostgreSQL URL (its ``accounts`` schema) or the path of
    an SQLite file."""
    if is_postgres_url(str(where)):
        from .postgres import PgAccountStore  # psycopg is loaded only for PostgreSQL

        return PgAccountStore(str(where))
    from .sqlite import SQLiteAccountStore

    return SQLiteAccountStore(where)


def open_accounts(settings: Settings, **options) -> Accounts:
    """The accounts the settings name: ``accounts.db`` in the home, or the database of
    ``database_url``."""
    return Accounts.at(
        settings.database_url or settings.home / "accounts.db", signup_open=settings.signup_open, **options
    )
