"""The client's chat is the truth: what a resent chat does to the stored turns.

A chat app resends the whole chat with every request, as the person now sees it. So each request
says, besides its new message, what became of the exchanges stored before it: one the person
edited, a reply swiped to another or edited, an exchange deleted. ``place`` reads that out of the
request's history and the stored turns of the same chat:

* **which chat.** Each stored turn keeps the id of the client's chat it was said in
  (``extra["chat"]["id"]``): the client's own id where it sends one (``X-SiliconFriend-Chat``,
  Open WebUI's ``X-OpenWebUI-Chat-Id``), else one made up when the chat's first message came.
  A request without an id continues the stored chat its history shares most exchanges with (the
  same reply, or the same message: ``_chat_of``), among the turns of the last ``RECENT_DAYS``
  days; a request with no history starts a new chat, unless it repeats the person's latest
  message (a regenerate of a chat's first reply) or rewords it while it is still its chat's only
  one (an edit of the message just sent, resent);
* **every position.** The chat's stored turns are aligned with the history's exchanges
  (``_align``: an exchange matches a turn by its message or by its reply). A turn whose message
  the history shows changed is **edited**: the exchange as the history now holds it is stored and
  the old turn leaves active memory (superseded, reason "edited"); a turn whose reply differs
  (a swipe the person kept, a reply they edited, a continued reply) gets the history's reply; a
  turn the history no longer has is **deleted** by the person: it leaves active memory (reason
  "deleted"), kept and shown. Turns older than the history's first exchange are left alone unless
  the request shows the chat's start (its id, the app's greeting before the first message, or an
  app that always sends the whole chat): an app that sends only the latest messages of a long
  chat deletes nothing;
* **the new message.** After the history comes the new message: the same as the chat's stored
  turn at that place is a **regenerate** (its reply is replaced, the rejected one kept nowhere),
  that message reworded is an **edit** of it (superseded, "edited"), another message there
  follows a **deletion** of it ("deleted": the person deleted the chat's last exchange and said
  something else), and stored turns after it are gone from the chat ("deleted");
* **only the person's words.** A message that repeats what the companion said (a reply, a part
  of one, a reply still streaming: a chat app's extension classifying or quoting it) is not the
  person talking: ``echo`` tells the service to answer it as a task.

Everything is read from the store, so two workers over one PostgreSQL database agree.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import date, timedelta
from difflib import SequenceMatcher
from typing import Iterable, Sequence

from memory.bank import MemoryBank
from memory.records import Kind, MemoryRecord, State

CHAT = "chat"  # the key of a stored turn's extra fields that says where in the client's chat it was
SEQ = "seq"  # under CHAT: the turn's place in its chat, as text ("0", "1"...: extra_at reads text)
RECENT_DAYS = 7  # how far back a chat's stored turns are followed (an edit of an older one is not)
# a message that repeats the companion: at least this long where it is the whole message, and
# a sentence of a reply at least this long where it is quoted in a message without history
ECHO_CHARS = 30
QUOTE_CHARS = 30
WINDOWS = 400  # a message's word starts searched in the replies (a huge message: its first ones)
# how alike (difflib's ratio of their plain text) a message must be to the stored one in its place
# to be read as that one edited, where the request cannot say (an edit resent, and a message sent
# after the last exchange was deleted, look the same): a changed name or word is an edit, another
# sentence is not
REWORDED = 0.6


def _norm(text: str) -> str:
    return " ".join(text.split())


def history_digest(history: Sequence[tuple[str, str]], chat: str | None = None) -> str:
    """A short digest of the exchanges before a message (whitespace folded) and of the client's
    chat id where it sends one."""
    pairs = [[_norm(q), _norm(a)] for q, a in history]
    key = json.dumps([chat, pairs] if chat else pairs, ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


@dataclass
class Change:
    """One stored turn the client's chat shows otherwise: ``kind`` "reply" (its reply becomes
    ``reply``), "edited" (superseded by the exchange ``query`` / ``reply``) or "deleted"."""

    kind: str
    turn: MemoryRecord
    query: str = ""
    reply: str = ""
    extra: dict = field(default_factory=dict)  # an edited exchange's, as a new turn's


@dataclass
class Placed:
    """Where a request's message goes: ``replaces`` (a regenerate of that turn), ``supersedes``
    (an edit of that turn's message), or neither (a new turn); ``extra`` is kept with it;
    ``changes``: what the request's history changed in the chat's earlier turns; ``echo``: the
    message repeats the companion's words (answered as a task, never stored)."""

    extra: dict = field(default_factory=dict)
    replaces: MemoryRecord | None = None
    supersedes: MemoryRecord | None = None
    changes: list[Change] = field(default_factory=list)
    echo: bool = False
    chat: str | None = None


# -- the companion's words, repeated ---------------------------------------------------------------
_MARKS = re.compile(r"[*\"“”‘’`_~]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？…])")  # in text made ``_plain``


def _plain(text: str) -> str:
    """Text compared for repetition: lower case, without the quotes and emphasis marks a chat app
    strips before it sends a reply on (SillyTavern's expression classifier), whitespace folded."""
    return " ".join(_MARKS.sub("", text).lower().split())


def echoes(text: str, replies: Iterable[str], *, history: bool, own: Iterable[str] = ()) -> bool:
    """Whether ``text`` repeats the companion's ``replies`` rather than saying something: the whole
    message (at least ECHO_CHARS long) found in one reply, or most of it made of a reply's
    sentences; without ``history`` also any sentence of QUOTE_CHARS or more quoted from a reply
    (a chat app's own prompt over a copy of the chat). Words the person said before (``own``:
    their earlier messages) are theirs to say again, even where a reply repeated them."""
    said = _plain(text)
    if len(said) < ECHO_CHARS:
        return False
    # what the message shares with the replies at all, found by searching its words' starts
    # (a dozen characters each) in all the replies at once, made plain in one pass; most
    # messages share nothing, and the sentence by sentence reading below is for the few that do
    every = _plain("\0".join(r.replace("\0", " ") for r in replies))
    starts = [0, *(i + 1 for i, c in enumerate(said) if c == " ")][:WINDOWS]
    if not any(said[i : i + 12] in every for i in starts if i + 12 <= len(said)):
        return False
    mine = [p for p in (_plain(q) for q in own) if p]
    if any(said in p for p in mine):
        return False
    if said in every:
        return True
    plain = [p.strip() for p in every.split("\0") if p.strip()]
    quoted = {
        s
        for p in plain
        if any(said[i : i + 12] in p for i in starts if i + 12 <= len(said))
        for s in _SENTENCE.split(p)
        if len(s) >= 12 and s in said and not any(s in m for m in mine)
    }
    if not history and any(len(s) >= QUOTE_CHARS for s in quoted):
        return True
    return sum(len(s) for s in quoted) >= 0.6 * len(said)


# -- the chat and its turns ----------------------------------------------------------------------
def _same(a: str, b: str) -> bool:
    return bool(a.strip()) and _norm(a) == _norm(b)


def reworded(old: str, new: str) -> bool:
    """Whether ``new`` reads as ``old`` edited (most of their characters alike, in order: a name
    corrected, a word changed) rather than something else said."""
    a, b = _plain(old), _plain(new)
    if not a or not b or a == b:
        return False
    alike = SequenceMatcher(None, a, b, autojunk=False)
    return alike.real_quick_ratio() >= REWORDED and alike.quick_ratio() >= REWORDED and alike.ratio() >= REWORDED


def _keys(texts: Iterable[str]) -> list[str]:
    """Texts compared as ``_same`` compares them ("" for a blank one, which matches nothing)."""
    return [_norm(t) for t in texts]


def _chat_of(turns: Sequence[MemoryRecord], chats: dict[int, str], history: Sequence[tuple[str, str]]) -> str | None:
    """The stored chat ``history`` continues: the one whose turns share most of its replies, then
    of its messages. A chat must share a reply: a reply is the model's, made once,
    while messages such as "hi" open many chats (and a chat taken for another would have the
    other's turns followed as if deleted)."""
    asked = set(_keys(q for q, _ in history)) - {""}
    answered = set(_keys(a for _, a in history)) - {""}
    replies: dict[str, int] = {}
    messages: dict[str, int] = {}
    latest: dict[str, int] = {}
    for i, t in enumerate(turns):  # newest first
        key = chats.get(t.stored_id)
        if key is None:
            continue
        latest.setdefault(key, -i)
        if _norm(t.response) in answered:
            replies[key] = replies.get(key, 0) + 1
        elif _norm(t.query) in asked:
            messages[key] = messages.get(key, 0) + 1
    best = max(replies, key=lambda k: (replies[k], messages.get(k, 0), latest[k]), default=None)
    return best


def _align(turns: Sequence[MemoryRecord], history: Sequence[tuple[str, str]]) -> list[tuple[int | None, int | None]]:
    """The chat's stored ``turns`` (in order) against the client's ``history``: pairs (turn index,
    exchange index) of the longest common sequence (an exchange matches a turn by its message or
    by its reply), with the turns and exchanges between two matches paired in order where both
    sides have some (an exchange changed through and through) and left alone (None on the other
    side) otherwise. The common start (most of a chat, most of the time) is matched first, so
    the quadratic part is the rest alone."""
    tq, tr = _keys(t.query for t in turns), _keys(t.response for t in turns)
    hq, ha = _keys(q for q, _ in history), _keys(a for _, a in history)

    def match(i: int, j: int) -> bool:
        return bool(tq[i]) and tq[i] == hq[j] or bool(tr[i]) and tr[i] == ha[j]

    n, m = len(turns), len(history)
    start = 0
    while start < min(n, m) and match(start, start):
        start += 1
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, start - 1, -1):
        for j in range(m - 1, start - 1, -1):
            best[i][j] = best[i + 1][j + 1] + 1 if match(i, j) else max(best[i + 1][j], best[i][j + 1])
    matched: list[tuple[int, int]] = [(k, k) for k in range(start)]
    i = j = start
    while i < n and j < m:
        if match(i, j) and best[i][j] == best[i + 1][j + 1] + 1:
            matched.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    out: list[tuple[int | None, int | None]] = []
    i = j = 0
    for mi, mj in [*matched, (n, m)]:
        gap_t, gap_h = list(range(i, mi)), list(range(j, mj))
        paired = min(len(gap_t), len(gap_h)) if matched or mi < n else 0
        out += [(gap_t[k], gap_h[k]) for k in range(paired)]
        out += [(t, None) for t in gap_t[paired:]] + [(None, h) for h in gap_h[paired:]]
        if mi < n:
            out.append((mi, mj))
        i, j = mi + 1, mj + 1
    return out


def place(
    bank: MemoryBank,
    user: str,
    text: str,
    history: Sequence[tuple[str, str]],
    today: date,
    *,
    chat: str | None = None,
    whole: bool = False,
    streaming: Sequence[str] = (),
) -> Placed:
    """Where ``text``, sent after ``history`` (in the client's chat ``chat``, where it names one),
    goes among ``user``'s turns of the last RECENT_DAYS days, and what the history changed in
    the chat's earlier turns. ``whole``: the request shows the chat from its start (it opens with
    the app's greeting, or comes from an app that always sends the whole chat), so a stored
    exchange missing before its first shared one was deleted; ``streaming``: the replies being
    written now (not stored yet)."""
    digest = history_digest(history, chat)
    placed = Placed({CHAT: {"history": digest, SEQ: "0"}})

    def new_chat() -> Placed:
        placed.chat = f"n:{chat}" if chat else f"c:{uuid.uuid4().hex[:16]}"
        placed.extra[CHAT]["id"] = placed.chat
        return placed

    if not bank.has_user(user):
        placed.echo = echoes(text, streaming, history=bool(history))
        return new_chat()
    # the turns without their extra fields, then only the chat's id and place in them (the rest
    # is what each turn's prompt held: kilobytes a turn, read at every request otherwise); those
    # of today and yesterday, and of the whole week where the chat goes back further
    recent = _recent(bank, user, today, 2)
    if history and RECENT_DAYS > 2:
        # a chat that began before yesterday (an evening's chat, continued): its older turns too
        said = set(_keys(t.response for t in recent))
        if any(_norm(a) not in said for _, a in history if a.strip()):
            recent = _recent(bank, user, today, RECENT_DAYS)
    if echoes(text, [*streaming, *(t.response for t in recent)], history=bool(history), own=(t.query for t in recent)):
        placed.echo = True
        return placed
    ids = [t.stored_id for t in recent]
    chats = bank.extra_at(user, ids, (CHAT, "id"))
    if chat:
        key: str | None = f"n:{chat}"
    elif history:
        key = _chat_of(recent, chats, history)
    else:
        key = None
        latest = recent[0] if recent else None
        if latest is not None and _same(latest.query, text):
            key = chats.get(latest.stored_id)
            if key is None:  # a turn stored before chats had ids: its place is its history's digest
                if bank.extra_at(user, [latest.stored_id], (CHAT, "history")).get(latest.stored_id) == digest:
                    placed.replaces = latest
        elif latest is not None and reworded(latest.query, text):
            # the message just sent, edited and sent again (its reply goes with it); checked
            # below to be its chat's only turn: a chat's later first message is a new chat
            key = chats.get(latest.stored_id)
    if key is None:
        return new_chat()
    mine = [t for t in recent if chats.get(t.stored_id) == key]
    if not history and not chat and (not mine or mine[0].stored_id != recent[0].stored_id or len(mine) > 1):
        return new_chat()  # the latest message again, but not its chat's first: another chat's first
    placed.chat = key
    placed.extra[CHAT]["id"] = key
    # in the chat's order: each turn keeps its place in it (an edited exchange takes the old one's)
    seqs = {i: int(v) for i, v in bank.extra_at(user, [t.stored_id for t in mine], (CHAT, SEQ)).items() if v.isdigit()}
    mine.sort(key=lambda t: (seqs.get(t.stored_id, -1), t.created_at, t.day, t.position))
    placed.extra[CHAT][SEQ] = str(max(seqs.values(), default=-1) + 1)
    whole = whole or bool(chat)  # the request shows the chat from its start
    pairs = _align(mine, history)
    first = next((k for k, (ti, hi) in enumerate(pairs) if ti is not None and hi is not None), len(pairs))
    last_h = max((k for k, (_, hi) in enumerate(pairs) if hi is not None), default=-1)
    after: list[MemoryRecord] = []
    for k, (ti, hi) in enumerate(pairs):
        if ti is None:
            continue  # an exchange never stored in this chat: not the person's words to us
        turn = mine[ti]
        if hi is None:
            if k > last_h:
                after.append(turn)  # after the whole history: the new message's place, or gone
            elif k > first or whole:
                placed.changes.append(Change("deleted", turn))
            # else: before what the app still sends (a long chat cut to its latest messages)
            continue
        q, a = history[hi]
        if not _same(turn.query, q):
            extra = {CHAT: {"history": history_digest(history[:hi], chat), "id": key, SEQ: _seq(seqs, turn)}}
            placed.changes.append(Change("edited", turn, q, a, extra))
        elif a.strip() and not _same(turn.response, a):
            placed.changes.append(Change("reply", turn, reply=a.strip()))
    if after:  # the chat's turns after its history: the new message's place, then the gone ones
        head, gone = after[0], after[1:]
        if _same(head.query, text):
            placed.replaces = head
        elif reworded(head.query, text):
            placed.supersedes = head
        else:  # something else said in its place: the person deleted that exchange, then spoke
            placed.changes.append(Change("deleted", head))
        placed.extra[CHAT][SEQ] = _seq(seqs, head)
        placed.changes += [Change("deleted", t) for t in gone]
    return placed


def _recent(bank: MemoryBank, user: str, today: date, days: int) -> list[MemoryRecord]:
    """The user's turns of the last ``days`` days that are not superseded, newest first."""
    when = [today - timedelta(days=d) for d in range(days)]
    turns = bank.records(user, kind=Kind.TURN, days=when, newest_first=True, extra=False)
    return [t for t in turns if t.state != State.SUPERSEDED]


def _seq(seqs: dict[int, int], turn: MemoryRecord) -> str:
    return str(seqs.get(turn.stored_id, 0))


__all__ = ["CHAT", "Change", "Placed", "place", "history_digest", "echoes", "reworded", "RECENT_DAYS"]
