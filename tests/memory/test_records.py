"""A record's id: none before it is stored, and ``stored_id`` where one must exist."""

from datetime import datetime

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
