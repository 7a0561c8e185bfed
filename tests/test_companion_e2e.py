"""End to end with the real packaged SmolLM2: three scripted days. The finished days are summarised
at the first turn of the next day, what was kept of each names nothing that was not said that day,
the global summary (and personality, unless no day's could be grounded) exist and reach the prompt,
and on day 3 the meta-prompt carries a day-1 fact, retrieved, with its date."""

from __future__ import annotations

from datetime import date, datetime

from memory.records import Kind
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion
from siliconfriend.core.consolidate import PATHS, path_of
from siliconfriend.core.prompting import load_prompts

SCRIPT = [
    (datetime(2024, 5, 1, 19, 30), "Hi! I'm Maya. I just adopted a grey kitten and named her Pixel."),
    (datetime(2024, 5, 2, 21, 0), "I signed up for a pottery class on Thursday evenings."),
    (datetime(2024, 5, 3, 18, 45), "Do you remember what my kitten is called?"),
]
D1, D2, D3 = date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 3)


def test_three_scripted_days(bank, smollm2_backend, tmp_path):
    now = {"t": SCRIPT[0][0]}
    companion = Companion(
        bank, smollm2_backend, settings=Settings(home=tmp_path, max_new_tokens=8), clock=lambda: now["t"]
    )
    results, rollovers = [], []
    for when, text in SCRIPT:
        now["t"] = when
        stream = companion.respond("Maya", text)
        chunks = list(stream)
        assert stream.result.error is None, stream.result.error
        assert stream.result.reply == "".join(chunks).strip()
        results.append(stream.result)
        rollovers.append(stream.consolidation)

    # each finished day was summarised at the first turn of the next day
    assert rollovers[1].summarised == [D1] and rollovers[2].summarised == [D2]
    for day in (D1, D2):
        for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
            assert bank.get_summary("Maya", kind, day).text.strip(), (kind, day)
    assert not companion.consolidator.pending_days("Maya", D2)
    # no false memories: what was kept of each day names nothing that was not said that day
    checker = companion.consolidator.checker
    date_of = load_prompts("en").format_date
    for day in (D1, D2):
        turns = bank.turns_on("Maya", day)
        said = checker.sources(
            [x for t in turns for x in (t.query, t.response)], allowed=["Maya", "SiliconFriend", date_of(day)]
        )
        for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
            rec = bank.get_summary("Maya", kind, day)
            assert path_of(rec) in PATHS
            assert checker.unsupported_names(rec.text, said) == [], (kind, day, rec.text)
    global_events = bank.get_summary("Maya", Kind.GLOBAL_EVENTS).text
    profiles = [r for r in bank.summaries("Maya", Kind.DAILY_PERSONALITY) if path_of(r) != "none"]
    global_personality = (g.text if (g := bank.get_summary("Maya", Kind.GLOBAL_PERSONALITY)) else "") or None
    assert global_events.strip() and bool(global_personality) == bool(profiles)  # no profile beats a false one

    # the day-3 meta-prompt: the global summaries, and a day-1 fact retrieved with its date
    day3 = results[2]
    system = day3.messages[0].content
    assert global_events in system and (global_personality is None or global_personality in system)
    assert "Today is Friday, May 3, 2024." in system
    day1 = [h for h in day3.used if h.record.day == D1 and "Pixel" in h.record.text]
    assert day1, [h.as_dict() for h in day3.used]
    given = day3.messages[-1].content  # the memories come with the message
    lines = [line for line in given.splitlines() if "Pixel" in line and "Wednesday, May 1, 2024" in line]
    assert any(line.startswith("- ") for line in lines), system
    # the memories that were used were reinforced
    for hit in day3.used:
        assert bank.get("Maya", hit.record.id).last_recall == SCRIPT[2][0]
    assert [t.query for t in companion.today("Maya")] == [SCRIPT[2][1]]
