"""The prompt's memory budget shared between the tiers: each tier's share, what one leaves to the
others, and nothing cut mid-sentence."""

from __future__ import annotations

import pytest

from memory.tiers import DEFAULT_SHARES, Line, allot, parse_shares, split_sentences, whole_sentences


def count(text: str) -> int:  # a token a word: the allotment counts with what it is given
    return len(text.split())


def line(tier: str, *parts: str) -> Line:
    return Line(tier, tuple(parts), lambda p: " / ".join(p))


def test_sentences_in_english_and_chinese():
    assert split_sentences("I got a cat. Her name is Pixel! Is she cute?") == [
        "I got a cat. ",
        "Her name is Pixel! ",
        "Is she cute?",
    ]
    assert split_sentences("我养了一只猫。她叫Pixel！很可爱") == ["我养了一只猫。", "她叫Pixel！", "很可爱"]
    assert whole_sentences("One two. Three four five. Six.", lambda s: count(s) <= 5) == "One two. Three four five."
    assert whole_sentences("One two three four. Five.", lambda s: count(s) <= 3) is None


def test_shares_are_checked():
    assert parse_shares(("core=0.4", "active=0.35", "long_term=0.2", "archive=0.05")) == DEFAULT_SHARES
    for bad in (("core=0.5", "active=0.35", "long_term=0.2", "archive=0.05"), ("core=1",), ("core=x",)):
        with pytest.raises(ValueError, match="tier=share"):
            parse_shares(bad)


def test_each_tier_gets_its_share_when_all_want_more():
    words = " ".join(["word"] * 9) + "."  # 9 tokens, 10 with its line break
    lines = [line(t, words) for t in ("core", "active", "long_term", "archive") for _ in range(10)]
    placed = allot(lines, 100, count)
    by_tier = {t: sum(count(p.text) + 1 for p in placed if p.tier == t) for t in DEFAULT_SHARES}
    # 40 / 35 / 20 / 5 of 100 in whole lines of 10 tokens (the archive's 5 hold none, the
    # active's 35 three), then what is left (10) to the first tier that wants it
    assert by_tier == {"core": 40 + 10, "active": 30, "long_term": 20, "archive": 0}
    assert [p.index for p in placed] == sorted(p.index for p in placed)  # in the order given


def test_what_a_tier_leaves_goes_to_the_others():
    lines = [line("active", f"memory number {i} here.") for i in range(8)]  # 4 words + 1 each
    placed = allot(lines, 40, count)
    assert len(placed) == 8  # no core, no archive: the cue's memories take the whole budget
    archived = [line("archive", "an old memory of ten words is here now.")] * 3
    assert len(allot(archived, 40, count)) == 3  # and the archive too, when nothing else wants it


def test_nothing_is_cut_mid_sentence():
    long = "I adopted a kitten. She is grey and small. Her name is Pixel and she sleeps all day long."
    placed = allot([line("active", "Where is the cat?", long)], 16, count)
    assert len(placed) == 1 and placed[0].shortened
    text = placed[0].text
    assert text == "Where is the cat? / I adopted a kitten. She is grey and small."
    assert count(text) + 1 <= 16
    # a memory whose first sentence cannot fit is left out, not cut
    assert allot([line("active", "one two three four five six seven eight nine ten.")], 6, count) == []


def test_the_profile_counts_against_the_core_share():
    lines = [line("core", "pinned fact number one."), line("core", "pinned fact number two.")]
    assert len(allot(lines, 20, count)) == 2
    # a profile of 8 tokens in the system message: the core's share is 8 of 20, nothing left of it,
    # and the rest of the budget (12) still takes both lines
    assert len(allot(lines, 20, count, spent={"core": 8})) == 2
    assert len(allot(lines, 14, count, spent={"core": 8})) == 1


def test_a_memory_that_cannot_fit_costs_few_counts():
    """Once the budget is nearly spent, a long memory whose first sentences do not fit is left
    out after a count of it whole in each of the allotment's two rounds and one of its shortest
    form (a count may be a model's tokenizer, and a turn has dozens of such memories); what fits
    is found by halves."""
    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return count(text)

    reply = " ".join(f"Sentence number {n} of the reply." for n in range(40))
    long = line("active", "I told you about my week in detail today.", reply)
    assert allot([long], 5, counting) == []
    assert len(counted) == 3
    counted.clear()
    placed = allot([long], 60, counting)
    assert placed[0].shortened and placed[0].text.endswith("Sentence number 7 of the reply.")
    assert len(counted) <= 24  # a count a sentence would be over 80 (40 sentences, two rounds)
