"""Activation on top of R = exp(-t/S): gain by use, validation, a pace per sort of memory that
adapts, and two thresholds."""

import json
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from memory.activation import confirms, recall_gains, restated
from memory.bank import PACES_META
from memory.forgetting import PAPER, EbbinghausPolicy, category_of
from memory.importance import ANSWER_SHARE, asks, categorize, rate_importance, rate_turn, told
from memory.lexical import Tokenizer
from memory.records import Kind, MemoryRecord, State

T0 = datetime(2024, 1, 1, 9, 0)


def rec(**kw) -> MemoryRecord:
    base = dict(user="u", kind=Kind.TURN, text="x", created_at=T0, day=T0.date())
    base.update(kw)
    return MemoryRecord(**base)


def test_gain_in_proportion_to_use():
    p = PAPER
    assert p.reinforce(rec(), T0, 1.0).strength == 2.0
    assert p.reinforce(rec(), T0, 0.25).strength == 1.25
    assert p.reinforce(rec(), T0, 7.0).strength == 2.0  # a gain is at most a full step
    tok = Tokenizer()
    cat = rec(id=1, query="My cat Pixel is scared of thunderstorms", text="My cat Pixel is scared of thunderstorms")
    tea = rec(id=2, query="I drink green tea in the morning", text="I drink green tea in the morning")
    reply = "Is Pixel hiding again? Thunderstorms must be hard on him."
    gains = recall_gains(tok, [(cat, 0.9), (tea, 0.3)], reply)
    assert gains[1] == 1.0  # the best match, and the reply used it
    assert gains[2] == pytest.approx(0.3 / 0.9 * 0.4, abs=1e-3)  # marginal, only in the prompt
    # the same strong match that the reply did not use gains less than when it was used
    assert recall_gains(tok, [(cat, 0.9)], "Tell me about your day.")[1] == pytest.approx(0.4)
    zh = rec(id=3, query="我的猫叫皮克斯，它怕打雷", text="我的猫叫皮克斯，它怕打雷")
    assert recall_gains(tok, [(zh, 0.8)], "皮克斯今天还怕打雷吗？")[3] == 1.0


def test_validation_gains_a_lot_and_fades_more_slowly():
    p = EbbinghausPolicy(decay=())
    day = T0 + timedelta(days=1)  # a day after it was made: a recall counts in full (spacing)
    plain, confirmed = p.reinforce(rec(strength=3.0), day), p.validate(rec(strength=3.0), day)
    assert plain.strength == 4.0 and confirmed.strength == 7.0
    # the same sitting it was made in: a recall resets t and adds nothing; a confirmation in full
    assert p.reinforce(rec(strength=3.0), T0).strength == 3.0 and p.validate(rec(strength=3.0), T0).strength == 7.0
    later = T0 + timedelta(days=60)
    assert p.retention(confirmed, later) > p.retention(plain, later)
    assert p.validate(rec(state=State.ARCHIVED), T0).state == State.ACTIVE
    for yes in ("Yes, still Pixel!", "yeah he is", "Right, that's him", "对，还是它", "没错", "是的，我妹妹在台北"):
        assert confirms(yes), yes
    for no in ("Right now I'm tired", "True crime podcasts are my thing", "No, she moved", "对面的邻居很吵"):
        assert not confirms(no), no
    tok = Tokenizer()
    sister = rec(id=5, query="My sister Lin lives in Taipei and works as a nurse")
    assert restated(tok, [sister], "My sister Lin still lives in Taipei, still a nurse") == [sister]
    assert restated(tok, [sister], "My brother lives in Tokyo") == []


def test_sorts_of_memory_and_their_paces():
    assert categorize("My sister Lin is visiting next week") == "people"
    assert categorize("Our dog Biscuit learned a new trick") == "people"
    assert categorize("I have my driving exam on Friday") == "events"
    assert categorize("I really love spicy noodles") == "preferences"
    assert categorize("hi, how are you?") == "small_talk"
    assert categorize("I fixed the printer at the office again today") == "other"
    assert categorize("我妹妹在台北当护士") == "people"
    assert categorize("我下周五有驾照考试") == "events"
    assert categorize("我特别喜欢吃辣的面条") == "preferences"
    assert categorize("你好") == "small_talk"
    p = EbbinghausPolicy()  # the companion's defaults
    exam = rec(query="I have my driving exam on Friday", strength=3.0)
    printer = rec(query="I fixed the printer at the office again today", strength=3.0)
    assert category_of(exam) == "events" and p.pace(exam) == 0.04 and p.pace(printer) == 0.25
    days = {r.query: (p.fades_at(r) - T0).total_seconds() / 86400 for r in (exam, printer)}
    assert days[exam.query] == pytest.approx(6.25 * days[printer.query])
    assert p.retention(exam, T0 + timedelta(days=175)) == pytest.approx(p.retention(printer, T0 + timedelta(days=28)))
    chat = rec(query="hi, how are you?", strength=3.0)  # small talk: the clock's pace
    assert p.pace(chat) == 1.0 and p.retention(chat, T0 + timedelta(days=7)) == pytest.approx(
        p.retention(printer, T0 + timedelta(days=28))
    )
    with pytest.raises(ValueError, match="sort of memory"):
        EbbinghausPolicy(decay=(("gossip", 0.5),))
    with pytest.raises(ValueError, match="reactivation"):
        EbbinghausPolicy(threshold=0.2, reactivate=0.1)


def test_what_is_rated_is_what_the_person_tells_of_their_life():
    # the talk's formulas (thanks for the advice, farewells, the companion called "friend") are
    # no person and no plan: they fade as small talk
    assert told("Thank you for your advice, friend. See you tomorrow!") == ""
    assert categorize("Thank you for your advice, friend. See you tomorrow!") == "small_talk"
    assert categorize("谢谢你的建议和陪伴，我们下次再聊，再见！") == "small_talk"
    assert categorize("Hi friend, I met my friend Tom at the station") == "people"  # a friend of theirs
    assert rate_importance("Hello, friend. Okay, thank you for the suggestions.") < 0.1
    # an episode lived, with what it felt like, is a life event; a plain errand is not
    assert categorize("I went to a support group yesterday and it was so powerful") == "events"
    assert categorize("今天我去了绿禾公园，看到了樱花，感到特别开心。") == "events"
    assert categorize("I fixed the printer at the office again today") == "other"
    assert categorize("Did you go to the zoo and have fun?") != "events"  # a question tells nothing
    # a life told in the third person is about a person as much as "I ...": rated alike
    third, first = (
        "Lisa painted a giant panda in art class and felt very happy.",
        "I painted a giant panda in art class and felt very happy.",
    )
    assert categorize(third) == "events"
    assert abs(rate_importance(third) - rate_importance(first)) < 0.15
    assert (
        rate_importance("Bart在动物园看到了喜欢的企鹅，感到非常开心。")
        >= rate_importance("动物园里的企鹅很可爱。") + 0.2
    )
    assert rate_importance("Sounds great, the weather was nice.") < rate_importance(third)  # "Sounds" is no name


def test_an_answer_the_person_asked_for_is_kept_as_a_share_of_its_worth(open_bank):
    """A message that only asks is rated, and sorted, by the answer it got: the person asked for
    it ("what was that book you suggested?"); small talk answered stays small talk, and a message
    that tells something keeps its own rating."""
    ask, told_back = (
        "What have you been up to?",
        "I went to the support group on Saturday with my sister Mei, it was so powerful.",
    )
    assert asks(ask) and asks("I went hiking. How about you?") and asks("你周末过得怎么样？")
    assert not asks("I went hiking.") and not asks("")
    assert rate_importance(ask) < 0.05
    assert rate_turn(ask, told_back) == pytest.approx(ANSWER_SHARE * rate_importance(told_back), abs=1e-3)
    assert rate_turn(ask, told_back) > 0.2
    assert rate_turn(ask, "Fine, thanks!") == rate_importance(ask)  # small talk answered: as it asked
    mine = "My sister Mei is visiting next week, what should we cook?"
    assert rate_turn(mine, "Dumplings!") == rate_importance(mine)  # their own words weigh more
    assert rate_turn("I got the job!", told_back) == rate_importance("I got the job!")  # no question
    assert category_of(rec(query=ask, response=told_back)) == "people"
    assert category_of(rec(query=ask, response="Fine, thanks!")) == "small_talk"
    # the person's own name in the answer is them addressed, not a person of their life
    assert category_of(rec(query=ask, response="I am doing well, Amy! How was your day?")) == "small_talk"
    assert category_of(rec(query="How are you today?", response="Fine, thanks!")) == "other"  # its own
    assert category_of(rec(query=mine, response="hi")) == "people"
    # with the companion's forgetting, the answer asked for outlives the small talk of that day
    bank = open_bank(policy=EbbinghausPolicy())
    kept = bank.add_turn("kai", ask, told_back, T0)
    chat = bank.add_turn("kai", "What about you?", "Fine, thanks!", T0 + timedelta(minutes=1))
    states = {d.record.stored_id: d.archived for d in bank.forget_pass("kai", T0 + timedelta(days=30))}
    assert states == {kept.stored_id: False, chat.stored_id: True}


def _flips(policy: EbbinghausPolicy, every: int, gain: float, days: int = 120) -> tuple[int, State]:
    """A memory recalled every ``every`` days with a marginal ``gain`` and a forgetting pass each
    morning: how many times it changes state, and its state at the end."""
    r, flips = rec(), 0
    for day in range(1, days + 1):
        now = T0 + timedelta(days=day)
        if r.state == State.ACTIVE and policy.forget(r, now, None):  # type: ignore[arg-type]
            r, flips = r.with_(state=State.ARCHIVED), flips + 1
        if day % every == 0:
            before = r.state
            r = policy.reinforce(r, now, gain)
            flips += r.state != before
    return flips, r.state


@pytest.mark.parametrize("every,gain", [(3, 0.05), (3, 0.2), (4, 0.2), (5, 0.3)])
def test_two_thresholds_a_memory_recalled_every_few_days_does_not_flip(every, gain):
    flips, state = _flips(PAPER, every, gain)
    assert flips <= 2 and state == State.ACTIVE  # archived once at most, back once, then kept
    single, _ = _flips(replace(PAPER, reactivate=0.0), every, gain)  # one threshold: any recall brings it back
    assert single >= 4


def test_a_weak_recall_of_an_archived_memory_leaves_it_archived_a_restore_does_not(paper_bank):
    r = paper_bank.add_turn("ann", "We talked about the weather", "ok", T0)
    paper_bank.forget_pass("ann", T0 + timedelta(days=10))
    assert paper_bank.get("ann", r.id).state == State.ARCHIVED
    later = T0 + timedelta(days=10)
    (weak,) = paper_bank.reinforce("ann", [r.id], later, gains={r.id: 0.1})
    assert weak.state == State.ARCHIVED and paper_bank.get("ann", r.id).state == State.ARCHIVED
    assert weak.strength == pytest.approx(1.1) and weak.last_recall == later
    assert paper_bank.restore("ann", r.id, later).state == State.ACTIVE


def test_paces_adapt_when_a_sort_is_recalled_at_the_edge_bounded_and_kept(open_bank):
    bank = open_bank(policy=EbbinghausPolicy())
    exam = bank.add_turn("bo", "I have my driving exam on Friday", "Good luck!", T0)
    chat = bank.add_turn("bo", "I fixed the printer at the office again today", "Annoying!", T0)
    bank.reinforce("bo", [exam.id, chat.id], T0 + timedelta(days=1))  # fresh: nothing learned
    assert bank.paces("bo")["events"] == 0.04 and bank.user_meta("bo", PACES_META) is None
    late = T0 + timedelta(days=3000)
    bank.forget_pass("bo", late)
    assert bank.get("bo", exam.id).state == State.ARCHIVED
    bank.reinforce("bo", [exam.id], late)  # recalled after archiving: events fade more slowly
    assert bank.paces("bo")["events"] == pytest.approx(0.032)
    assert bank.paces("bo")["other"] == 0.25  # only the sort recalled at the edge slows
    for n in range(20):  # bounded: a quarter of the configured pace at most
        bank.forget_pass("bo", late + timedelta(days=20000 * (n + 1)))
        bank.reinforce("bo", [exam.id], late + timedelta(days=20000 * (n + 1), hours=1))
    assert bank.paces("bo")["events"] == pytest.approx(0.01)
    assert json.loads(bank.user_meta("bo", PACES_META))["events"] == pytest.approx(0.01)
    again = open_bank(policy=EbbinghausPolicy())  # another process, or a restart: the paces are kept
    assert again.paces("bo")["events"] == pytest.approx(0.01)


def test_validate_in_the_bank_brings_an_archived_memory_back(paper_bank):
    r = paper_bank.add_turn("cy", "My cat is called Pixel", "Cute!", T0)
    paper_bank.forget_pass("cy", T0 + timedelta(days=10))
    (v,) = paper_bank.validate("cy", [r.id], T0 + timedelta(days=10))
    assert v.state == State.ACTIVE and v.strength == 3.0
    assert paper_bank.get("cy", r.id).state == State.ACTIVE and paper_bank.get("cy", r.id).strength == 3.0


def test_tiers():
    p = PAPER
    assert p.tier(rec(pinned=True), 0.05) == "core"
    assert p.tier(rec(kind=Kind.GLOBAL_PERSONALITY), 1.0) == "core"
    assert p.tier(rec(), 0.9) == "active" and p.tier(rec(), 0.2) == "long_term"  # between 0.1 and 0.3
    assert p.tier(rec(state=State.ARCHIVED), 0.01) == "archive"


def test_retrieval_induced_forgetting_weakens_the_competitors_of_a_recall(open_bank):
    policy = replace(PAPER, competitor_loss=0.2)
    assert policy.suppress(rec(strength=5.0), 1.0).strength == pytest.approx(4.0)
    assert policy.suppress(rec(strength=5.0), 0.5).strength == pytest.approx(4.5)
    assert policy.suppress(rec(strength=1.1), 1.0).strength == 1.0  # never below 1
    assert policy.suppress(rec(strength=5.0, pinned=True), 1.0).strength == 5.0
    assert PAPER.suppress(rec(strength=5.0), 1.0).strength == 5.0  # off by default
    with pytest.raises(ValueError, match="competitor_loss"):
        replace(PAPER, competitor_loss=1.0)
    for loss, kept in ((0.0, True), (0.2, False)):
        bank = open_bank(policy=replace(PAPER, competitor_loss=loss, importance_weight=4.0))
        user = f"rif{int(loss * 10)}"
        ids = [
            bank.add_turn(user, said, "ok", T0 + timedelta(minutes=n)).stored_id
            for n, said in enumerate(("I play tennis on Sundays", "I play chess online", "I pinned this"))
        ]
        bank.pin(user, ids[2])
        before = {i: bank.get(user, i).strength for i in ids}
        bank.reinforce(user, [ids[0]], T0 + timedelta(days=1), competitors={ids[1]: 0.5, ids[2]: 1.0, ids[0]: 1.0})
        after = {i: bank.get(user, i) for i in ids}
        assert after[ids[0]].strength == before[ids[0]] + 1  # the recalled one is not its own competitor
        assert after[ids[2]].strength == before[ids[2]]  # pinned
        assert (after[ids[1]].strength == before[ids[1]]) is kept
        if not kept:
            assert after[ids[1]].strength == pytest.approx(max(1.0, before[ids[1]] * 0.9))
            assert after[ids[1]].recall_count == 0 and after[ids[1]].last_recall is None  # t runs on
