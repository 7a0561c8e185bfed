"""The forgetting-curve analysis: R = exp(-t/S), S += 1 per recall, t reset."""

import math
import random
from datetime import datetime, timedelta

import pytest

from memory.forgetting import PAPER, EbbinghausPolicy
from memory.records import Kind, MemoryRecord, State
from memory.retrieval import RetrievalConfig

T0 = datetime(2024, 1, 1, 9, 0)


def rec(**kw) -> MemoryRecord:
    base = dict(user="u", kind=Kind.TURN, text="x", created_at=T0, day=T0.date())
    base.update(kw)
    return MemoryRecord(**base)


def paper(**kw) -> EbbinghausPolicy:
    """The law on the paper's scale: t in days, every memory starting at S = 1."""
    return EbbinghausPolicy(**{"unit_days": PAPER.unit_days, "importance_weight": PAPER.importance_weight, **kw})


def test_one_day_at_strength_one():
    p = paper()
    assert p.retention(rec(), T0 + timedelta(days=1)) == pytest.approx(0.368, abs=5e-4)
    assert p.retention(rec(), T0) == 1.0


def test_recalled_every_three_days_pre_recall_retention():
    p = paper()
    m, now, seen = rec(), T0, []
    for _ in range(5):
        now += timedelta(days=3)
        seen.append(round(p.retention(m, now), 3))
        m = p.reinforce(m, now)
    assert seen == [0.050, 0.223, 0.368, 0.472, 0.549]
    assert m.strength == 6 and m.recall_count == 5 and m.last_recall == now


def test_threshold_forgets_unrecalled_after_2_30_days():
    p = paper(threshold=0.1)
    assert p.time_to_forget(1.0) == pytest.approx(2.30, abs=5e-3)
    assert not p.forget(rec(), T0 + timedelta(days=2.29), random.Random(0))
    assert p.forget(rec(), T0 + timedelta(days=2.31), random.Random(0))


def test_pinned_never_fades_and_importance_raises_strength():
    p = paper(importance_weight=1.0)
    assert p.retention(rec(pinned=True), T0 + timedelta(days=365)) == 1.0
    assert not p.forget(rec(pinned=True), T0 + timedelta(days=365), random.Random(0))
    assert p.initial_strength(2.0) == 3.0


def test_time_unit_and_sublinear_growth():
    hours = EbbinghausPolicy(unit_days=1 / 24)
    assert hours.retention(rec(), T0 + timedelta(hours=1)) == pytest.approx(math.exp(-1))
    sub = paper(growth="sublinear")
    m = rec()
    for i in range(4):
        m = sub.reinforce(m, T0 + timedelta(days=i + 1))
    assert m.strength == pytest.approx(1 + 1 + 1 / math.sqrt(2) + 1 / math.sqrt(3) + 1 / 2)


def test_probabilistic_mode_keeps_with_probability_r():
    p = paper(mode="probabilistic")
    rng = random.Random(0)
    now = T0 + timedelta(days=1)  # R = 0.368
    kept = sum(not p.forget(rec(), now, rng) for _ in range(4000))
    assert kept / 4000 == pytest.approx(math.exp(-1), abs=0.03)
    # seeded: the same generator state gives the same decisions
    a = [p.forget(rec(), now, random.Random(7)) for _ in range(3)]
    assert a == [p.forget(rec(), now, random.Random(7)) for _ in range(3)]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        EbbinghausPolicy(threshold=0)
    with pytest.raises(ValueError):
        EbbinghausPolicy(mode="sometimes")


def test_ten_day_simulation_in_the_bank(paper_bank):
    """Five memories said on day 0, recalled on different schedules, a forgetting pass each
    morning; an archived memory can no longer be recalled."""
    schedules = {
        "cat": [1, 3, 5, 8],  # the example of the analysis
        "job": [],  # never recalled
        "trip": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "book": [2],
        "song": [1, 3],
    }
    ids = {}
    for name in schedules:
        ids[name] = paper_bank.add_turn("sim", f"Remember the {name}", "I will.", T0).id
    archived_on = {}
    for day in range(1, 11):
        now = T0 + timedelta(days=day)
        for d in paper_bank.forget_pass("sim", now):
            if d.archived:
                name = next(n for n, i in ids.items() if i == d.record.id)
                archived_on[name] = day
        recall = [
            ids[n]
            for n, days in schedules.items()
            if day in days and paper_bank.get("sim", ids[n]).state == State.ACTIVE
        ]
        paper_bank.reinforce("sim", recall, now)
    end = T0 + timedelta(days=10)
    cat = paper_bank.get("sim", ids["cat"])
    assert cat.strength == 5 and cat.state == State.ACTIVE
    assert paper_bank.retention(cat, end) == pytest.approx(0.670, abs=5e-4)
    assert archived_on["job"] == 3
    # book: S=2 after day 2; R on day 7 = e^(-5/2) = 0.082 < 0.1 -> archived then
    assert archived_on["book"] == 7
    # song: S=3 after day 3; day 10: e^(-7/3) = 0.097 -> archived on day 10
    assert archived_on["song"] == 10
    assert "trip" not in archived_on and "cat" not in archived_on
    survivors = {n for n in schedules if paper_bank.get("sim", ids[n]).state == State.ACTIVE}
    assert survivors == {"cat", "trip"}
    # archived memories are the second tier: out of reach unless the archive is asked (a strong
    # cue: see test_hybrid_retrieval), still visible, and they can be restored
    hits = paper_bank.retrieve("sim", "Remember the job", end, k=5, config=RetrievalConfig(archive_penalty=None))
    assert ids["job"] not in {h.record.id for h in hits}
    assert paper_bank.get("sim", ids["job"]).archived_at == T0 + timedelta(days=3)
    job = paper_bank.restore("sim", ids["job"], end)
    assert job.state == State.ACTIVE and job.strength == 2
    assert ids["job"] in {
        h.record.id
        for h in paper_bank.retrieve("sim", "Remember the job", end, k=5, config=RetrievalConfig(archive_penalty=None))
    }


def test_companion_defaults_small_talk_fades_in_weeks_a_personal_fact_in_months():
    p = EbbinghausPolicy()  # the defaults the companion runs with
    assert p.time_to_forget(p.initial_strength(0.0)) == pytest.approx(16.1, abs=0.1)
    assert p.time_to_forget(p.initial_strength(1.0)) == pytest.approx(80.6, abs=0.1)
    assert p.time_to_forget(p.next_strength(p.initial_strength(0.0), 0)) == pytest.approx(32.2, abs=0.1)


def test_sixty_days_unrecalled_small_talk_is_archived_a_pinned_or_important_turn_is_not(tmp_path, e5_embedder):
    """Forgetting still happens under the companion's defaults: sixty days after one chat, with a
    forgetting pass every morning, the small talk is archived; the pinned turn and the personal
    fact (rated important when written) are still active."""
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores

    bank = MemoryBank(SqliteStores(tmp_path), e5_embedder)  # default policy, importance rated at write time
    small = bank.add_turn("kim", "Hi, how are you?", "Fine, thanks! And you?", T0)
    weather = bank.add_turn("kim", "Nice weather today.", "Yes, sunny!", T0 + timedelta(minutes=1))
    fact = bank.add_turn(
        "kim",
        "My daughter Emma was diagnosed with asthma last week and I'm worried about her.",
        "I'm sorry to hear that. How is she doing?",
        T0 + timedelta(minutes=2),
    )
    pinned = bank.add_turn("kim", "Okay.", "Okay!", T0 + timedelta(minutes=3))
    bank.pin("kim", pinned.id)
    assert small.importance < 0.1 and fact.importance >= 0.75
    archived_on = {}
    for day in range(1, 61):
        for d in bank.forget_pass("kim", T0 + timedelta(days=day)):
            if d.archived:
                archived_on[d.record.id] = day
    assert set(archived_on) == {small.id, weather.id}
    assert 14 <= archived_on[small.id] <= 18  # 2.3 weeks at S = 1
    state = {i: bank.get("kim", i).state for i in (small.id, weather.id, fact.id, pinned.id)}
    assert state == {
        small.id: State.ARCHIVED,
        weather.id: State.ARCHIVED,
        fact.id: State.ACTIVE,
        pinned.id: State.ACTIVE,
    }
    bank.close()


def test_recalls_in_one_sitting_count_as_one_rehearsal_with_spacing():
    """Spacing: a recall adds its full gain to S only a ``spacing_days`` after the last, and a
    share in proportion before; t resets all the same. Off (0), every recall adds in full."""
    spaced, massed = paper(spacing_days=1.0), paper(spacing_days=0.0)
    for p, strengths in ((spaced, [1.0, 1.0 + 1 / 48, 1.0 + 1 / 48 + 1.0]), (massed, [2.0, 3.0, 4.0])):
        m, seen = rec(), []
        # made at T0: recalled at once (nothing counts), half an hour later, then two days on
        for when in (T0, T0 + timedelta(minutes=30), T0 + timedelta(days=2, minutes=30)):
            m = p.reinforce(m, when)
            seen.append(m.strength)
            assert m.last_recall == when and p.retention(m, when) == 1.0
        assert seen == pytest.approx(strengths)
    with pytest.raises(ValueError):
        paper(spacing_days=-1)
