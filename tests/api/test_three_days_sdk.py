"""End to end through the OpenAI SDK: a scripted three-day session (the app's injectable clock)
leaves the daily summaries of the finished days, the global summary, and on day 3 a retrieved
day-1 memory that the response reports, as ``replay`` does with the companion directly. The
client resends its whole chat each day, as chat apps do: only the new message is stored."""

from __future__ import annotations

from datetime import date, datetime

from api_helpers import client

from memory.records import Kind

SCRIPT = [
    (datetime(2024, 5, 1, 19, 30), "Hi! I'm Maya. I just adopted a grey kitten and named her Pixel."),
    (datetime(2024, 5, 2, 21, 0), "I signed up for a pottery class on Thursday evenings."),
    (datetime(2024, 5, 3, 18, 45), "Do you remember what my kitten is called?"),
]
D1, D2, D3 = date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 3)


def test_three_scripted_days_through_the_sdk(served):
    key = served.signup("Maya")
    sdk = client(served, key)
    chat: list[dict] = []
    replies = []
    for when, text in SCRIPT:
        served.clock.now = when
        chat.append({"role": "user", "content": text})
        events = list(sdk.chat.completions.create(model="siliconfriend", messages=chat, stream=True))
        reply = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
        chat.append({"role": "assistant", "content": reply})
        replies.append([e for e in events if e.choices][-1].model_extra["siliconfriend"])

    bank = served.api.bank
    # each finished day was summarised at the first turn of the next day, and rolled up
    assert replies[1]["day_rollover"]["summarised"] == [D1.isoformat()]
    assert replies[2]["day_rollover"]["summarised"] == [D2.isoformat()]
    assert replies[1]["day_rollover"]["left_out"] >= 0 and all(isinstance(r["not_from_memory"], list) for r in replies)
    for day in (D1, D2):
        for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
            assert bank.get_summary("Maya", kind, day).text.strip(), (kind, day)
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS).text.strip()
    # day 3: the day-1 fact was retrieved, with its date, and is in the response's extension
    used = replies[2]["memories"]
    assert any(m["day"] == D1.isoformat() and "Pixel" in m["text"] for m in used), used
    given = served.backend.calls[-1][-1].content  # the memories come with the message
    assert "Pixel" in given and "May 1, 2024" in given
    # one stored turn per day: the resent history was never stored again
    assert [len(bank.turns_on("Maya", d)) for d in (D1, D2, D3)] == [1, 1, 1]
    assert bank.count("Maya", kind=Kind.TURN) == 3
    # the memory API shows the same, with the summaries
    listed = served.api.list_memories("Maya", kind="daily_events")
    assert {m["day"] for m in listed["data"]} == {D1.isoformat(), D2.isoformat()}
