"""Bringing things up: what the companion may ask the person about, to keep it alive.

As the design notes advise (mention important memories in the reply, to strengthen them), the
day rollover picks, once a day, the memories worth bringing up (``choose``):
- a plan whose day has passed in the last ``PLAN_DAYS`` days ("the interview next Tuesday", said
  last week): the person's own statement of a plan, its days resolved forward
  (``memory/dates.days_ahead``);
- an important memory close to fading (importance at least ``FADING_IMPORTANCE``, active, in the
  long-term tier: its retention between the two thresholds), the closest to fading first.

They are kept in the user's meta; each turn offers the first of them that its cue did not find
already, marked in the prompt as something the companion may ask about when it fits. It counts as
recalled (reinforced as any memory the reply used) only when the reply uses it; used, or offered
``OFFERS`` times without being used, it is not offered again.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from memory.bank import MemoryBank
from memory.dates import days_ahead
from memory.importance import about_self
from memory.message import Message
from memory.records import Kind, MemoryRecord, State

from .consolidate import statements
from .known import PLAN

BRING_UP_META = "bring_up"  # the memories to bring up (JSON list of {"id", "why", "day", "offered"})
BRING_UP_CUE = "bring_up"  # the cue of a memory in the prompt because it is worth bringing up
PLAN_DAYS = 3  # a plan is worth asking about for this many days after its day
FADING_IMPORTANCE = 0.6
FADING_KEPT = 3  # the memories close to fading kept to bring up, the closest first
OFFERS = 3  # offers of one memory that the replies did not take up before it is dropped
RECENT_DAYS = 30  # the days whose turns are read for plans

WHY_PLAN = Message(
    "why.plan_passed",
    en="a plan whose day ({day}) has passed: worth asking how it went",
    zh="计划的日子（{day}）已经过了：可以问问结果如何",
)
WHY_FADING = Message("why.fading", en="important, and fading: worth bringing up", zh="重要，但正在淡忘：值得再提起")


def choose(bank: MemoryBank, user: str, now: datetime) -> list[dict]:
    """The memories worth bringing up at ``now`` (see the module's text), and kept as such in the
    user's meta (what was offered before keeps its count of offers)."""
    today = now.date()
    policy = bank.policy_for(user)
    found: list[dict] = []
    days = [today - timedelta(days=n) for n in range(1, RECENT_DAYS + 1)]
    for rec in bank.records(user, kind=Kind.TURN, days=days, extra=False):
        said = statements(rec.query) if rec.state == State.ACTIVE else ""
        if not said or not PLAN.search(said) or not about_self(said):
            continue
        passed = [d for d in days_ahead(said, rec.day) if today - timedelta(days=PLAN_DAYS) <= d < today]
        if passed:
            found.append({"id": rec.stored_id, "why": "plan", "day": passed[-1].isoformat()})
    fading = []
    # only the turns rated high enough are read: the others cannot be chosen, and building every
    # active turn was most of this choice's time on a big store (docs/benchmarks-journal.md)
    important = bank.records(
        user, kind=Kind.TURN, state=State.ACTIVE, extra=False, importance_at_least=FADING_IMPORTANCE
    )
    for rec in important:
        if rec.pinned:
            continue
        r = policy.retention(rec, now)
        if policy.tier(rec, r) == "long_term":
            fading.append((r, rec.stored_id))
    found += [{"id": i, "why": "fading", "day": ""} for _, i in sorted(fading)[:FADING_KEPT]]
    before = {e["id"]: e for e in _read(bank, user)}
    chosen = [{**e, "offered": before.get(e["id"], {}).get("offered", 0)} for e in found]
    chosen = [e for e in chosen if e["offered"] < OFFERS]
    bank.set_user_meta(user, BRING_UP_META, json.dumps(chosen))
    return chosen


def _read(bank: MemoryBank, user: str) -> list[dict]:
    raw = bank.user_meta(user, BRING_UP_META)
    try:
        return [e for e in json.loads(raw) if isinstance(e, dict) and "id" in e] if raw else []
    except ValueError:
        return []


def offer(bank: MemoryBank, user: str, skip: set) -> tuple[MemoryRecord, str] | None:
    """The first memory worth bringing up that is not in ``skip`` (already in the prompt) and
    still active, with the reason to say (``WHY_PLAN`` / ``WHY_FADING``)."""
    entries = [e for e in _read(bank, user) if e["id"] not in skip and e.get("offered", 0) < OFFERS]
    if not entries:
        return None
    found = bank.get_many(user, [int(e["id"]) for e in entries])
    for e in entries:
        rec = found.get(int(e["id"]))
        if rec is not None and rec.state == State.ACTIVE:
            why = WHY_PLAN(day=e.get("day", "")) if e.get("why") == "plan" else WHY_FADING()
            return rec, why
    return None


def offered(bank: MemoryBank, user: str, memory_id: int, used: bool) -> None:
    """A turn offered ``memory_id``: taken up by the reply (``used``), it is not offered again;
    else one more offer is counted."""
    entries = _read(bank, user)
    kept = []
    for e in entries:
        if e["id"] == memory_id:
            if used:
                continue
            e = {**e, "offered": e.get("offered", 0) + 1}
        kept.append(e)
    bank.set_user_meta(user, BRING_UP_META, json.dumps(kept))
