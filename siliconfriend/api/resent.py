"""One turn, however often it is sent: what a resent chat does to the stored turns.

A chat app resends the whole chat with every request, so a request alone cannot say whether its
last message is new. Its history can. Each turn the API stores keeps a digest of the history it
came with (``extra["chat"]["history"]``: the exchanges before it, as the client showed them).
A later request with

* the same history and the same last message is a **regenerate** of that turn: its reply is
  replaced, as the web app's ``Companion.regenerate`` does, and the rejected reply is kept nowhere;
* the same (non-empty) history and another last message is an **edit** of that turn's message: the
  new turn is stored and the old one is superseded (reason "edited": kept, shown, never used);
* any other history is a new turn: a new chat asking the same thing again has another history.

A chat's first message has an empty history, which every new chat shares: there a repeat is a
regenerate only while it is the user's latest turn, and an edit cannot be told from a new chat
(the new words are stored, the old ones stay) -- unless the client names its chat
(``X-SiliconFriend-Chat``, or Open WebUI's ``X-OpenWebUI-Chat-Id`` when it forwards it), which
then goes into the digest.

The stored turns are read from the store, so two workers over one PostgreSQL database agree.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Sequence

from memory.bank import MemoryBank
from memory.records import Kind, MemoryRecord, State

CHAT = "chat"  # the key of a stored turn's extra fields that says where in the client's chat it was


def _norm(text: str) -> str:
    return " ".join(text.split())


def history_digest(history: Sequence[tuple[str, str]], chat: str | None = None) -> str:
    """A short digest of the exchanges before a message (whitespace folded) and of the client's
    chat id where it sends one."""
    pairs = [[_norm(q), _norm(a)] for q, a in history]
    key = json.dumps([chat, pairs] if chat else pairs, ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


@dataclass
class Placed:
    """Where a request's message goes: ``replaces`` (a regenerate of that turn), ``supersedes``
    (an edit of that turn's message), or neither (a new turn); ``extra`` is kept with it."""

    extra: dict = field(default_factory=dict)
    replaces: MemoryRecord | None = None
    supersedes: MemoryRecord | None = None


def place(
    bank: MemoryBank,
    user: str,
    text: str,
    history: Sequence[tuple[str, str]],
    today: date,
    *,
    chat: str | None = None,
) -> Placed:
    """Where ``text``, sent after ``history`` (in the client's chat ``chat``, where it names one),
    goes among ``user``'s turns of ``today`` and the day before (a chat that runs past midnight;
    what is older is not regenerated or edited: read by the day's index, this costs a turn a
    few milliseconds however long the user's memory)."""
    digest = history_digest(history, chat)
    known = bool(history) or bool(chat)  # a place no other chat shares
    placed = Placed({CHAT: {"history": digest}})
    if not bank.has_user(user):
        return placed
    # the turns without their extra fields, then only the digest in them (the rest is what each
    # turn's prompt held: kilobytes a turn, read at every request of a long day otherwise)
    days = [today, today - timedelta(days=1)]
    recent = [
        t
        for t in bank.records(user, kind=Kind.TURN, days=days, newest_first=True, extra=False)
        if t.state != State.SUPERSEDED
    ]
    digests = bank.extra_at(user, [t.stored_id for t in recent], (CHAT, "history"))
    same = [t for t in recent if digests.get(t.stored_id) == digest]
    said = _norm(text)
    again = next((t for t in same if _norm(t.query) == said), None)
    if again is not None and (known or again.id == recent[0].id):
        placed.replaces = again
    elif known and same and again is None:
        placed.supersedes = same[0]
    return placed


__all__ = ["CHAT", "Placed", "place", "history_digest"]
