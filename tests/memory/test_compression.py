"""Compression before archiving: a long turn about to be archived leaves a short copy active that
carries its activation on; the original stays searchable in the archive."""

from __future__ import annotations

from datetime import datetime, timedelta

from memory.compression import COMPRESSED_OF, extractive
from memory.forgetting import PAPER
from memory.records import Kind, State

T0 = datetime(2024, 3, 1, 20, 0)
LONG = (
    "My grandmother Rosa turned ninety last weekend and the whole family came to Porto for her party. "
    "We cooked her favourite bacalhau together, and my cousin Ana flew in from Toronto to surprise her. "
    "She cried when she saw Ana, and then laughed all evening telling stories about her own wedding. "
    "I keep thinking about how much she has seen, and how little time I spend with her these days. "
    "Maybe I should call her every Sunday, the way my mother does, and ask her about the old days."
)
REPLY = (
    "Ninety years and a family that gathers around her: that is a lovely party. "
    "It sounds like Ana's surprise meant a great deal to her. Do you want to visit her more often?"
)


def test_a_long_turn_is_compressed_before_it_is_archived(open_bank):
    bank = open_bank(policy=PAPER, compress=True)
    long = bank.add_turn("rosa", LONG, REPLY, T0)
    short = bank.add_turn("rosa", "ok", "ok", T0 + timedelta(minutes=1))
    bank.reinforce("rosa", [long.stored_id], T0 + timedelta(hours=1))  # S 2, one recall
    later = T0 + timedelta(days=10)
    decisions = bank.forget_pass("rosa", later)
    assert {d.record.stored_id for d in decisions if d.archived} == {long.stored_id, short.stored_id}
    turns = bank.records("rosa", kind=Kind.TURN)
    copies = [t for t in turns if COMPRESSED_OF in t.extra]
    assert len(copies) == 1  # the short turn is archived as it is
    copy = copies[0]
    assert copy.extra[COMPRESSED_OF] == long.stored_id and bank.compressed("rosa") == {copy.stored_id: long.stored_id}
    # shorter, in whole sentences, on the original's day and time
    assert copy.query == (
        "My grandmother Rosa turned ninety last weekend and the whole family came to Porto for her party. "
        "We cooked her favourite bacalhau together, and my cousin Ana flew in from Toronto to surprise her."
    )
    assert copy.response == "Ninety years and a family that gathers around her: that is a lovely party."
    assert copy.day == long.day and copy.created_at == long.created_at
    # it carries the activation on: active, the original's strength and recalls, t from the pass
    original = bank.get("rosa", long.stored_id)
    assert copy.state == State.ACTIVE and original.state == State.ARCHIVED
    assert copy.strength == original.strength == 2.0 and copy.recall_count == 1 and copy.last_recall == later
    # the original stays searchable in the archive: a strong cue finds it, and the copy
    found = {h.record.stored_id for h in bank.retrieve("rosa", "Ana flew in from Toronto to surprise her", later)}
    assert {long.stored_id, copy.stored_id} <= found
    # a second pass does not compress the copy or the original again
    bank.forget_pass("rosa", later + timedelta(days=30))
    assert len([t for t in bank.records("rosa", kind=Kind.TURN) if COMPRESSED_OF in t.extra]) == 1
    # deleting the original deletes its copy
    bank.delete("rosa", [long.stored_id])
    assert {t.stored_id for t in bank.records("rosa", kind=Kind.TURN)} == {short.stored_id}
    assert bank.compressed("rosa") == {}


def test_a_models_compression_is_used_when_it_gives_one(open_bank):
    bank = open_bank(policy=PAPER, compress=True)
    long = bank.add_turn("rosa", LONG, REPLY, T0)
    asked = []

    def model(rec):
        asked.append(rec.stored_id)
        return ("Rosa turned ninety; Ana came from Toronto.", "A lovely party.")

    bank.forget_pass("rosa", T0 + timedelta(days=10), compressor=model)
    copy = next(t for t in bank.records("rosa", kind=Kind.TURN) if COMPRESSED_OF in t.extra)
    assert asked == [long.stored_id] and copy.query == "Rosa turned ninety; Ana came from Toronto."
    # a model that is not good enough (nothing given): the extractive copy
    bank2 = open_bank(policy=PAPER, compress=True)
    bank2.add_turn("ana", LONG, REPLY, T0)
    bank2.forget_pass("ana", T0 + timedelta(days=10), compressor=lambda rec: None)
    copy2 = next(t for t in bank2.records("ana", kind=Kind.TURN) if COMPRESSED_OF in t.extra)
    assert copy2.query.startswith("My grandmother Rosa turned ninety")


def test_compression_off_and_what_cannot_be_compressed(open_bank):
    bank = open_bank(policy=PAPER)  # a bank compresses only when told to (the settings' default is on)
    bank.add_turn("rosa", LONG, REPLY, T0)
    bank.forget_pass("rosa", T0 + timedelta(days=10))
    assert all(COMPRESSED_OF not in t.extra for t in bank.records("rosa", kind=Kind.TURN))
    one_sentence = bank.add_turn("rosa", "word " * 150 + "end.", "ok", T0).with_(extra={})
    assert extractive(one_sentence) is None  # its only sentence is longer than a copy keeps: never cut
