"""A record's id: none before it is stored, and ``stored_id`` where one must exist; its extra
fields, parsed when first used."""

from dataclasses import FrozenInstanceError
from datetime import datetime, timedelta

import pytest

from memory.records import Kind, MemoryRecord


def test_a_stored_record_has_its_id_and_a_new_one_says_it_has_none(bank):
    when = datetime(2024, 5, 1, 9, 0)
    stored = bank.add_turn("amy", "I adopted a cat named Miso", "What a lovely name!", when)
    assert stored is not None and stored.stored_id == stored.id == bank.get("amy", stored.stored_id).id
    fresh = MemoryRecord(user="amy", kind=Kind.TURN, text="not stored", created_at=when, day=when.date())
    assert fresh.id is None
    with pytest.raises(ValueError, match="turn memory is not stored yet"):
        fresh.stored_id  # noqa: B018 - the property is what is tested


def test_a_records_extra_fields_are_parsed_when_first_used(bank, monkeypatch):
    """A turn's extra fields (the memories and today's lines its prompt held: kilobytes of JSON)
    come from the store as text, parsed when the record's ``extra`` is first used. A chat turn
    reads all of today's turns; parsing every turn's fields at each read made the turns of a long
    day slower and slower. The record is otherwise as before: equal, hashable, frozen."""
    import memory.records as records

    when = datetime(2024, 5, 1, 9, 0)
    extra = {"used": [{"id": i, "text": "x" * 300} for i in range(5)], "stopped": False}
    for i in range(30):
        bank.add_turn("amy", f"message {i}", f"reply {i}", when + timedelta(minutes=i), extra=extra)
    real, parsed = records.json, []

    class CountingJson:
        @staticmethod
        def loads(text):
            parsed.append(text)
            return real.loads(text)

    monkeypatch.setattr(records, "json", CountingJson)
    today = bank.turns_on("amy", when.date())
    assert [t.query for t in today] == [f"message {i}" for i in range(30)] and parsed == []
    assert today[3].extra == extra and len(parsed) == 1
    assert today[3].extra is today[3].extra and len(parsed) == 1  # once
    again = bank.get("amy", today[3].stored_id)
    assert again == today[3] and hash(again) == hash(today[3]) and parsed == [parsed[0]]
    with pytest.raises(FrozenInstanceError):
        today[3].extra = {}  # type: ignore[misc]
    # a record made in code keeps the dict it is given, and each new one has its own empty dict
    given = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date(), extra=extra)
    first = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date())
    second = MemoryRecord(user="amy", kind=Kind.TURN, text="t", created_at=when, day=when.date())
    assert given.extra is extra and first.extra == {} and first.extra is not second.extra
