"""The one parser of a memory id a client sent (the web app's table and buttons, the API's URLs)."""

from __future__ import annotations

import numpy as np
import pytest

from memory.bank import UnknownMemory
from memory.stores.sqlite import SqliteStores
from siliconfriend.core.memory_view import MAX_MEMORY_ID, memory_id


@pytest.mark.parametrize("value", [7, "7", " 7 ", 7.0, np.int64(7), np.float64(7.0)])
def test_an_id_as_a_number_or_its_digits(value):
    assert memory_id(value) == 7


def test_the_largest_id_a_store_holds():
    assert memory_id(str(MAX_MEMORY_ID)) == memory_id(np.int64(MAX_MEMORY_ID)) == MAX_MEMORY_ID


@pytest.mark.parametrize(
    "value",
    [
        0,
        -3,
        "-3",
        3.5,
        "3.5",
        "1e3",
        "+3",
        "x",
        "",
        None,
        True,
        float("nan"),
        float("inf"),
        MAX_MEMORY_ID + 1,
        "9" * 30,
        [1],
    ],
)
def test_anything_else_is_no_such_memory(value):
    with pytest.raises(UnknownMemory, match="no memory"):
        memory_id(value)


def test_one_memory_shown_the_same_to_the_page_and_the_api(tmp_path, e5_embedder):
    from datetime import datetime, timedelta

    from memory.bank import MemoryBank
    from memory.records import Kind
    from memory.shown import shown

    t0 = datetime(2024, 5, 1, 9, 0)
    bank = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder)
    try:
        turn = bank.add_turn("amy", "My cat is called Miso", "What a name!", t0)
        bank.set_summary("amy", Kind.GLOBAL_EVENTS, "Amy has a cat.", t0)
        glob = bank.get_summary("amy", Kind.GLOBAL_EVENTS)
        later = t0 + timedelta(days=2)
        m = shown(bank.get("amy", turn.stored_id), bank.policy, later)
        assert (m.id, m.kind, m.day, m.query, m.stopped) == (turn.stored_id, "turn", "2024-05-01", turn.query, False)
        assert 0 < m.retention < 1 and m.retention == round(bank.retention(turn, later), 4)
        assert m.status.startswith("active: fades")
        api = m.as_json()
        assert api["object"] == "memory" and api["id"] == m.id and api["retention"] == m.retention
        assert "score" not in api and api["superseded"] is None
        g = shown(glob, bank.policy, later)
        assert g.day is None and g.status == "global summary: never fades" and "stopped" not in g.as_json()
        hits = bank.search_text("amy", "cat", later, k=2)
        found = shown(hits[0].record, bank.policy, later, hit=hits[0])
        assert found.score is not None and found.why == "; ".join(hits[0].reasons)
    finally:
        bank.close()


def test_what_a_reply_used_is_one_record_kept_and_read_back_older_turns_included():
    """ "What I remembered" is one record (``memory.shown.UsedMemory``): kept with a turn as JSON and
    read back equal; a turn kept by an older version (no tier, an id as text, an entry in no shape)
    still reads; the web app's panel and the API's footnote show the same record."""
    from memory.shown import NOT_FROM_MEMORY, UsedMemory, stored_used
    from siliconfriend.api.footnote import footnote
    from siliconfriend.web.chat import remembered_markdown

    used = UsedMemory(
        3, "turn", "2024-05-01", 1.6, 0.913, "shares words with your message", "My cat is Miso", "long_term"
    )
    assert UsedMemory.from_json(used.as_json()) == used
    old = {
        "used": [
            {
                "id": "5",
                "kind": "daily_events",
                "day": "2024-04-30",
                "strength": 1,
                "retention": 0.5,
                "text": "Calm day",
            },
            "not an entry",
        ],
        "today": [{"id": 7, "kind": "today", "day": "2024-05-01", "text": "Hello there"}],
        NOT_FROM_MEMORY: ["Bella"],
    }
    made_up, summary, today = stored_used(old)
    assert (summary.id, summary.tier, summary.why, summary.retrieved) == (5, None, "", True)
    assert (today.id, today.kind, today.strength, today.retrieved) == (7, "today", 0.0, False)
    assert (made_up.kind, made_up.text, made_up.id) == (NOT_FROM_MEMORY, "Bella", None)
    assert stored_used({"stopped": False}) is None  # kept before "what I remembered" was
    panel = remembered_markdown([made_up, summary, used, today], "en")
    assert "#5" in panel and "Calm day" in panel and "#3" in panel and "Hello there" in panel and "Bella" in panel
    note = footnote([summary, used], 9, "hi")
    assert "- 2024-04-30 · Calm day" in note and "- 2024-05-01 · My cat is Miso" in note and "(2)" in note
