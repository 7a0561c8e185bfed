"""The API's rate limits on keys, "like logins": failed attempts (an unknown, malformed or
revoked key) are counted per client by the accounts' login limiter
(``siliconfriend/accounts/rate_limit.py``, its events in the accounts store), and a client over
its limits is refused until its failures age out; a valid key may make at most
``requests_per_minute`` requests (a sliding window kept in this process). The keys themselves
are ``siliconfriend/accounts/keys.py``."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Callable, Protocol

from ..accounts.rate_limit import Attempt, TooManyAttempts
from ..accounts.users import Accounts


class RateLimited(Exception):
    """Too many requests (or too many wrong keys) for now; ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: float):
        self.retry_after = max(0.0, retry_after)
        super().__init__(f"{message}: try again in {int(self.retry_after) + 1} seconds")


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


__all__ = ["KeyLimiter", "LoginStyleLimiter", "RateLimited"]
