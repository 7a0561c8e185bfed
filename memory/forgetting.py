"""The Ebbinghaus forgetting curve, R = exp(-t / S), as a pure policy.

t is the time since the memory was last recalled (or created), in ``unit_days`` days; S is its
strength. A recall adds to S (1 by default, or a sublinear step) and resets t. Pinned memories
never fade. Forgetting archives: the caller moves the memory to the archived state.

Defaults for a companion used for months: t is counted in weeks (``unit_days`` 7) and a memory
starts at S = 1 + 4 x its importance (0 small talk .. 1 a personal fact, rated when written), so
with the threshold 0.1 an unrecalled bit of small talk is archived after 2.3 weeks (16 days), a
personal fact of importance 1 after 11.5 weeks (81 days), and each recall adds 2.3 weeks.
``PAPER`` is the paper's own scale (t in days, S = 1, an unrecalled memory gone after 2.3 days).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from .records import MemoryRecord

SECONDS_PER_DAY = 86400.0


class ForgettingPolicy(Protocol):
    def initial_strength(self, importance: float = 0.0) -> float: ...
    def retention(self, rec: MemoryRecord, now: datetime) -> float: ...
    def reinforce(self, rec: MemoryRecord, now: datetime) -> MemoryRecord: ...
    def forget(self, rec: MemoryRecord, now: datetime, rng: random.Random) -> bool: ...
    def fades_at(self, rec: MemoryRecord) -> datetime | None: ...  # None: never (pinned)


@dataclass(frozen=True)
class EbbinghausPolicy:
    """``mode="threshold"`` archives when R < threshold; ``mode="probabilistic"`` keeps a memory
    with probability R (the paper's rule), drawing from the generator it is given."""

    threshold: float = 0.1
    mode: Literal["threshold", "probabilistic"] = "threshold"
    unit_days: float = 7.0  # t in weeks: see the module's text
    step: float = 1.0  # S += step per recall (linear)
    growth: Literal["linear", "sublinear"] = "linear"
    importance_weight: float = 4.0  # initial S = 1 + importance_weight * importance

    def __post_init__(self):
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"forgetting threshold must be in (0, 1), got {self.threshold}")
        if self.mode not in ("threshold", "probabilistic"):
            raise ValueError(f"unknown forgetting mode {self.mode!r} (threshold or probabilistic)")
        if self.unit_days <= 0 or self.step <= 0:
            raise ValueError("unit_days and step must be positive")
        if self.importance_weight < 0:
            raise ValueError("importance_weight cannot be negative")

    def initial_strength(self, importance: float = 0.0) -> float:
        return 1.0 + self.importance_weight * max(0.0, importance)

    def elapsed(self, rec: MemoryRecord, now: datetime) -> float:
        seconds = (now - rec.anchor).total_seconds()
        return max(0.0, seconds) / (SECONDS_PER_DAY * self.unit_days)

    def retention(self, rec: MemoryRecord, now: datetime) -> float:
        if rec.pinned:
            return 1.0
        return math.exp(-self.elapsed(rec, now) / max(rec.strength, 1e-9))

    def next_strength(self, strength: float, recall_count: int) -> float:
        if self.growth == "sublinear":
            # diminishing returns: the n-th recall adds step / sqrt(n)
            return strength + self.step / math.sqrt(recall_count + 1)
        return strength + self.step

    def reinforce(self, rec: MemoryRecord, now: datetime) -> MemoryRecord:
        return rec.with_(
            strength=self.next_strength(rec.strength, rec.recall_count),
            last_recall=max(now, rec.anchor),
            recall_count=rec.recall_count + 1,
        )

    def forget(self, rec: MemoryRecord, now: datetime, rng: random.Random) -> bool:
        if rec.pinned:
            return False
        r = self.retention(rec, now)
        if self.mode == "probabilistic":
            return rng.random() >= r
        return r < self.threshold

    def time_to_forget(self, strength: float) -> float:
        """Days until an unrecalled memory of strength S falls under the threshold."""
        return -math.log(self.threshold) * strength * self.unit_days

    def fades_at(self, rec: MemoryRecord) -> datetime | None:
        """When an active memory left unrecalled falls under the threshold (None if pinned)."""
        if rec.pinned:
            return None
        return rec.anchor + timedelta(days=self.time_to_forget(rec.strength))


# the paper's scale: t in days, every memory starts at S = 1 (for comparison and for tests of the law)
PAPER = EbbinghausPolicy(unit_days=1.0, importance_weight=0.0)
