"""The Ebbinghaus forgetting curve, R = exp(-t / S), as a pure policy.

t is the time since the memory was last recalled (or created), in ``unit_days`` days; S is its
strength. A recall adds to S (1 by default, or a sublinear step) and resets t. Pinned memories
never fade. Forgetting archives: the caller moves the memory to the archived state.

Defaults for a companion used for months: t is counted in weeks (``unit_days`` 7) and a memory
starts at S = 1 + 4 x its importance (0 small talk .. 1 a personal fact, rated when written), so
with the threshold 0.1 an unrecalled bit of small talk is archived after 2.3 weeks (16 days), a
personal fact of importance 1 after 11.5 weeks (81 days), and each recall adds 2.3 weeks.
``PAPER`` is the paper's own scale (t in days, S = 1, an unrecalled memory gone after 2.3 days).

What moves S and how fast t runs (the activation of the design notes, after Oblivion):
- a recall gains ``step x gain``, gain = relevance x confidence in 0..1 (the caller says how well
  the memory matched and whether the reply used it or it only sat in the prompt); 1 is a full recall;
- spacing: recalls in one sitting are one rehearsal, not several (massed practice strengthens
  less than spaced): a recall adds its full gain only ``spacing_days`` (a day) after the memory's
  last recall or its making, and a share in proportion to the time before that; t resets at each;
- validation (the person confirmed it, or said it again) multiplies S by ``validation_factor`` and
  adds a step: a big gain, and since S is what sets the pace, a slower fading from then on;
- each sort of memory (``importance.CATEGORIES``: people and pets, life events and plans,
  preferences, small talk, other) has its own pace: t runs at ``decay[sort]`` of the clock. The
  bank adapts a user's paces (``adapted``) when memories of a sort are recalled after archiving or
  just before it, within bounds;
- two thresholds: a memory is archived below ``threshold``; an archived one is active again only
  when a recall finds it strong enough that, since its previous recall, it would have stayed
  above ``reactivate`` (or when the person restores it). A weak recall of an archived memory adds
  to S and leaves it archived; once back, it outlasts recalls at the rhythm that brought it
  back: no flipping between states at every recall.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, Mapping, Protocol

from .importance import CATEGORIES, asks, categorize
from .records import Kind, MemoryRecord, State

SECONDS_PER_DAY = 86400.0


class ForgettingPolicy(Protocol):
    def initial_strength(self, importance: float = 0.0) -> float: ...
    def retention(self, rec: MemoryRecord, now: datetime) -> float: ...  # in [0, 1]
    def reinforce(self, rec: MemoryRecord, now: datetime, gain: float = 1.0) -> MemoryRecord: ...
    def forget(self, rec: MemoryRecord, now: datetime, rng: random.Random, retention: float | None = None) -> bool: ...
    def fades_at(self, rec: MemoryRecord) -> datetime | None: ...  # None: never (pinned)
    def validate(self, rec: MemoryRecord, now: datetime) -> MemoryRecord: ...
    def suppress(self, rec: MemoryRecord, closeness: float) -> MemoryRecord: ...
    def at_the_edge(self, rec: MemoryRecord, now: datetime) -> bool: ...
    def paces(self) -> dict[str, float]: ...
    def adapted(self, learned: Mapping[str, float]) -> "ForgettingPolicy": ...
    def slowed(self, sort: str) -> float: ...
    def tier(self, rec: MemoryRecord, retention: float) -> str: ...


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
    # an archived memory is active again only when a recall lifts R above this (>= threshold;
    # 0: one threshold, any recall brings it back)
    reactivate: float = 0.3
    validation_factor: float = 2.0  # a confirmed memory: S = S x factor + step
    # the pace of t for each sort of memory (1: the clock's); a sort not named runs at 1
    # (people and life events a companion keeps for years: a personal fact of importance 1 lasts
    # 5.5 years unrecalled, one rated 0 a year; preferences change: months to a year, and so
    # does whatever else the person tells beyond small talk; small talk fades in weeks)
    decay: tuple[tuple[str, float], ...] = (
        ("people", 0.04),
        ("events", 0.04),
        ("preferences", 0.25),
        ("other", 0.25),
        ("small_talk", 1.0),
    )
    # retrieval-induced forgetting: a memory the cue called up beside the ones recalled, but not
    # recalled itself (a competitor), loses this share of its strength x how close it came
    # (``suppress``); 0: off
    competitor_loss: float = 0.0
    # spacing: a recall adds its full gain to S only a ``spacing_days`` or more after the memory's
    # last recall (or its making), and a share in proportion to the time before that: recalls in
    # the same sitting are one rehearsal, not several (massed practice); t resets all the same. 0: off
    spacing_days: float = 1.0
    adapt_factor: float = 0.8  # a sort's pace after one of its memories is recalled at the edge
    adapt_floor: float = 0.25  # ... never below this share of its configured pace

    def __post_init__(self):
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"forgetting threshold must be in (0, 1), got {self.threshold}")
        if self.mode not in ("threshold", "probabilistic"):
            raise ValueError(f"unknown forgetting mode {self.mode!r} (threshold or probabilistic)")
        if self.unit_days <= 0 or self.step <= 0:
            raise ValueError("unit_days and step must be positive")
        if self.importance_weight < 0:
            raise ValueError("importance_weight cannot be negative")
        if not (self.reactivate == 0.0 or self.threshold <= self.reactivate < 1.0):
            raise ValueError(f"the reactivation threshold must be 0 or in [threshold, 1), got {self.reactivate}")
        if self.validation_factor < 1.0:
            raise ValueError("validation_factor must be at least 1")
        unknown = {name for name, _ in self.decay} - set(CATEGORIES)
        if unknown or any(rate <= 0 for _, rate in self.decay):
            raise ValueError(f"decay paces are positive, per sort of memory among {CATEGORIES}: got {self.decay}")
        if self.spacing_days < 0:
            raise ValueError(f"spacing_days cannot be negative, got {self.spacing_days}")
        if not 0.0 <= self.competitor_loss < 1.0:
            raise ValueError(f"competitor_loss must be in [0, 1), got {self.competitor_loss}")
        if not 0.0 < self.adapt_factor <= 1.0 or not 0.0 < self.adapt_floor <= 1.0:
            raise ValueError("adapt_factor and adapt_floor must be in (0, 1]")

    def initial_strength(self, importance: float = 0.0) -> float:
        return 1.0 + self.importance_weight * max(0.0, importance)

    @functools.cached_property
    def _pace_of(self) -> dict[str, float]:
        return dict(self.decay)  # read for every memory of a forgetting pass: made once

    def pace(self, rec: MemoryRecord) -> float:
        """How fast t runs for ``rec``: its sort's pace."""
        return self._pace_of.get(category_of(rec), 1.0)

    def elapsed(self, rec: MemoryRecord, now: datetime) -> float:
        seconds = (now - rec.anchor).total_seconds()
        return max(0.0, seconds) * self.pace(rec) / (SECONDS_PER_DAY * self.unit_days)

    def retention(self, rec: MemoryRecord, now: datetime) -> float:
        if rec.pinned:
            return 1.0
        return math.exp(-self.elapsed(rec, now) / max(rec.strength, 1e-9))

    def next_strength(self, strength: float, recall_count: int, gain: float = 1.0) -> float:
        gain = min(1.0, max(0.0, gain))
        if self.growth == "sublinear":
            # diminishing returns: the n-th recall adds step / sqrt(n)
            return strength + gain * self.step / math.sqrt(recall_count + 1)
        return strength + gain * self.step

    def reinforce(self, rec: MemoryRecord, now: datetime, gain: float = 1.0) -> MemoryRecord:
        """A recall of ``rec`` with ``gain`` (relevance x confidence, 0..1): S += step x gain and
        t resets. An archived memory stays archived unless its retention at the new strength,
        counted from its last recall, is above ``reactivate``: see the module's text."""
        recalled = rec.with_(
            strength=self.next_strength(rec.strength, rec.recall_count, gain * self.spaced(rec, now)),
            recall_count=rec.recall_count + 1,
        )
        # an archived memory comes back only if, at its new strength, it would have stayed above
        # the higher threshold since its last recall: then it outlasts recalls at that rhythm
        back = rec.state != State.ARCHIVED or self.retention(recalled, now) >= self.reactivate
        return recalled.with_(last_recall=max(now, rec.anchor), state=State.ACTIVE if back else rec.state)

    def spaced(self, rec: MemoryRecord, now: datetime) -> float:
        """The share of a recall's gain that counts toward S now: 1 a ``spacing_days`` or more
        after ``rec`` was last recalled (or made), less in proportion before."""
        if self.spacing_days <= 0:
            return 1.0
        since = max(0.0, (now - rec.anchor).total_seconds()) / SECONDS_PER_DAY
        return min(1.0, since / self.spacing_days)

    def validate(self, rec: MemoryRecord, now: datetime) -> MemoryRecord:
        """The person confirmed ``rec``: S x ``validation_factor`` + a step, t reset, active."""
        return rec.with_(
            strength=rec.strength * self.validation_factor + self.step,
            last_recall=max(now, rec.anchor),
            recall_count=rec.recall_count + 1,
            state=State.ACTIVE,
        )

    def suppress(self, rec: MemoryRecord, closeness: float) -> MemoryRecord:
        """``rec`` came up beside what was recalled (``closeness`` 0..1: its score beside the
        best) and was not recalled: S x (1 - ``competitor_loss`` x closeness), never below 1; t
        runs on (the recall of the others does not reset it). Pinned memories lose nothing."""
        if rec.pinned or self.competitor_loss <= 0.0:
            return rec
        loss = self.competitor_loss * min(1.0, max(0.0, closeness))
        return rec.with_(strength=max(1.0, rec.strength * (1.0 - loss)))

    def at_the_edge(self, rec: MemoryRecord, now: datetime) -> bool:
        """Whether a recall of ``rec`` now says its sort fades too fast: it was archived, or its
        retention was already between the two thresholds (about to be archived)."""
        return not rec.pinned and (rec.state == State.ARCHIVED or self.retention(rec, now) < self.reactivate)

    def tier(self, rec: MemoryRecord, retention: float) -> str:
        """Where ``rec`` stands (``TIERS``): core (pinned, or a global summary: the profile),
        active (above the higher threshold), long-term (active, between the two thresholds:
        fading), archive."""
        if rec.pinned or rec.kind.is_global:
            return "core"
        if rec.state == State.ARCHIVED:
            return "archive"
        return "active" if retention >= max(self.reactivate, self.threshold) else "long_term"

    def paces(self) -> dict[str, float]:
        return {name: dict(self.decay).get(name, 1.0) for name in CATEGORIES}

    def adapted(self, learned: Mapping[str, float]) -> "EbbinghausPolicy":
        """This policy with a user's learned paces (``learned``: sort -> pace), each kept within
        [``adapt_floor`` x its configured pace, its configured pace]."""
        if not learned:
            return self
        base = self.paces()
        paces = {
            name: min(rate, max(rate * self.adapt_floor, float(learned.get(name, rate)))) for name, rate in base.items()
        }
        return replace(self, decay=tuple(paces.items()))

    def slowed(self, sort: str) -> float:
        """The pace of ``sort`` after one of its memories was recalled at the edge."""
        return self.paces()[sort] * self.adapt_factor

    def forget(self, rec: MemoryRecord, now: datetime, rng: random.Random, retention: float | None = None) -> bool:
        """Whether ``rec`` is let go at ``now``. ``retention``: its R at ``now`` where the caller
        worked it out already (the forgetting pass records it beside each decision)."""
        if rec.pinned:
            return False
        r = self.retention(rec, now) if retention is None else retention
        if self.mode == "probabilistic":
            return rng.random() >= r
        return r < self.threshold

    def time_to_forget(self, strength: float) -> float:
        """Days until an unrecalled memory of strength S falls under the threshold, at pace 1."""
        return -math.log(self.threshold) * strength * self.unit_days

    def fades_at(self, rec: MemoryRecord) -> datetime | None:
        """When an active memory left unrecalled falls under the threshold (None if pinned)."""
        if rec.pinned:
            return None
        return rec.anchor + timedelta(days=self.time_to_forget(rec.strength) / self.pace(rec))


TIERS = ("core", "active", "long_term", "archive")
SHADOWS = {
    "one-pace": "every sort at the clock's pace",
    "one-threshold": "any recall brings an archived memory back",
    "paper": "the paper's law: t in days, S = 1, one pace",
}
_VARIED = (
    "threshold",
    "unit_days",
    "step",
    "importance_weight",
    "reactivate",
    "validation_factor",
    "competitor_loss",
    "spacing_days",
)


def varied(policy: EbbinghausPolicy, spec: str) -> EbbinghausPolicy:
    """Another policy beside ``policy``, for a shadow pass: a name of ``SHADOWS``, or settings
    over it, comma-separated: ``threshold=0.2,pace.people=0.25,unit_days=1``."""
    spec = spec.strip()
    if spec == "one-pace":
        return replace(policy, decay=())
    if spec == "one-threshold":
        return replace(policy, reactivate=0.0)
    if spec == "paper":
        return PAPER
    changes: dict = {}
    paces = policy.paces()
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, value = item.partition("=")
        name = name.strip()
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is None or not (name in _VARIED or name.removeprefix("pace.") in paces):
            raise ValueError(
                f"shadow policy {item!r}: give one of {', '.join(SHADOWS)}, or name=number with a name among "
                f"{', '.join(_VARIED)}, pace.<sort> ({', '.join(CATEGORIES)})"
            )
        if name in _VARIED:
            changes[name] = number
        else:
            paces[name.removeprefix("pace.")] = number
    return replace(policy, decay=tuple(paces.items()), **changes)


# the sorts that tell nothing lasting: a message of these that asks takes its answer's sort
_FLEETING = ("small_talk", "other")


def category_of(rec: MemoryRecord) -> str:
    """The sort of memory ``rec`` is (``importance.categorize``): a turn by the person's words, or,
    where they only asked and said nothing of a sort that lasts, by the answer they asked for."""
    if rec.kind == Kind.TURN and rec.query.strip():
        own = categorize(rec.query)
        if own in _FLEETING and rec.response.strip() and asks(rec.query):
            # a name in the answer may be the person's own, addressed: not a person of their life
            answer = categorize(rec.response, names=False)
            return answer if answer not in _FLEETING else own
        return own
    return categorize(rec.text)


# the paper's scale: t in days, every memory starts at S = 1, one pace for all that never adapts,
# each recall a full step however soon (for comparison and for tests of the law)
PAPER = EbbinghausPolicy(unit_days=1.0, importance_weight=0.0, decay=(), adapt_factor=1.0, spacing_days=0.0)
