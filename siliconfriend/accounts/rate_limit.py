"""Rate limits for guessing secrets (passwords now; API keys can use the same limiter).

Three kinds of key, each with its own limit, so that no one key can be used against the others:

* ``pair`` -- one secret's name from one client (``user:amy|client:10.0.0.7``): a few tries, then
  that pair waits a back-off that grows with every further failure (5 s, 10 s, 20 s ... capped at
  ``max_backoff_s``), not a wall: the person who mistypes her own password waits here, seconds
  and never long, nobody else does; a guesser from that client is slowed to one try a minute, and
  the client limit below bounds it over all names.
* ``client`` -- one client, over all names: many tries (a NAT or an office shares one address),
  then the client waits. Password spraying from one address ends here.
* ``account`` -- one name, from all clients: past its limit every new try must wait an
  exponentially growing back-off, capped at ``max_backoff_s`` (a minute by default), so that an
  attacker with many addresses gets a few guesses an hour instead of thousands, while the owner
  is never held out longer than the cap. A client from which the name logged in successfully
  lately (a *known client*, OWASP's "device cookie" idea keyed by address) skips the account
  back-off: an attack from elsewhere does not lock the owner out at all.

State lives in the accounts store (``store.RateEvents``: a table of timestamped events per key),
so that every worker of a shared database counts the same tries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .store import RateEvents


class TooManyAttempts(ValueError):
    """Refused before the secret was checked; ``retry_after`` seconds until the next try."""

    def __init__(self, retry_after: float):
        self.retry_after = max(0.0, retry_after)
        super().__init__(f"too many failed tries: try again in {int(self.retry_after) + 1} seconds")


@dataclass(frozen=True)
class Limits:
    window_s: float = 900.0  # failures older than this are forgotten
    per_pair: int = 5  # one name from one client, before its back-off starts
    per_client: int = 30  # one client, all names
    per_account: int = 10  # one name, all clients, before the back-off starts
    base_backoff_s: float = 5.0  # the first back-off; doubled for every further failure
    max_backoff_s: float = 60.0  # the longest the owner can be held out
    known_client_days: float = 30.0


@dataclass(frozen=True)
class Attempt:
    """The keys of one try: ``name`` is the secret's holder ("user:amy", "apikey:sk-ab12")."""

    name: str
    client: str | None

    @property
    def pair(self) -> str:
        return f"{self.name}|client:{self.client or '-'}"

    @property
    def client_key(self) -> str | None:
        return f"client:{self.client}" if self.client else None


class RateLimiter:
    """``check`` before verifying a secret (TooManyAttempts when the try must wait), then
    ``failed`` or ``succeeded`` after."""

    def __init__(self, store: RateEvents, limits: Limits = Limits(), clock: Callable[[], float] = time.time):
        self.store, self.limits, self.clock = store, limits, clock

    def check(self, attempt: Attempt) -> None:
        lim, now = self.limits, self.clock()
        since = now - lim.window_s
        self.store.prune_events(now - max(lim.window_s, lim.known_client_days * 86400))
        pair = self.store.events(attempt.pair, "fail", since)
        self._back_off(pair, lim.per_pair, now)
        if attempt.client_key:
            client = self.store.events(attempt.client_key, "fail", since)
            if len(client) >= lim.per_client:
                raise TooManyAttempts(client[-lim.per_client] + lim.window_s - now)
        if self.known(attempt):
            return
        self._back_off(self.store.events(attempt.name, "fail", since), lim.per_account, now)

    def _back_off(self, failures: list[float], allowed: int, now: float) -> None:
        """Past ``allowed`` failures, a try must wait since the last one: the base back-off,
        doubled for each failure over, capped (TooManyAttempts otherwise)."""
        over = len(failures) - allowed
        if over >= 0:
            wait = min(self.limits.max_backoff_s, self.limits.base_backoff_s * 2**over)
            if now < failures[-1] + wait:
                raise TooManyAttempts(failures[-1] + wait - now)

    def known(self, attempt: Attempt) -> bool:
        """Did this name succeed from this client lately?"""
        if not attempt.client:
            return False
        since = self.clock() - self.limits.known_client_days * 86400
        return bool(self.store.events(attempt.pair, "ok", since))

    def failed(self, attempt: Attempt) -> None:
        keys = [attempt.pair, attempt.name] + ([attempt.client_key] if attempt.client_key else [])
        self.store.add_events(keys, "fail", self.clock())

    def succeeded(self, attempt: Attempt) -> None:
        """The pair's failures are forgotten and the client becomes known for the name; the
        account's and the client's failures stay (an attacker's are not wiped by the owner)."""
        self.store.clear_events([attempt.pair], "fail")
        self.store.clear_events([attempt.pair], "ok")
        if attempt.client:
            self.store.add_events([attempt.pair], "ok", self.clock())

    def forget(self, name: str) -> None:
        self.store.forget_events_prefix(name + "|")
        self.store.clear_events([name], "fail")


__all__ = ["Attempt", "Limits", "RateLimiter", "TooManyAttempts"]
