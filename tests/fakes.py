"""Stand-ins that tests set by hand (nothing here fakes a component under test)."""

from __future__ import annotations

from typing import Any


class Clock:
    """A clock that a test sets: ``clock()`` returns ``now`` (a datetime, or a time in seconds
    for code that reads ``time.time``); move it with ``clock.now = ...`` or ``clock.now += ...``."""

    def __init__(self, now: Any):
        self.now = now

    def __call__(self) -> Any:
        return self.now
