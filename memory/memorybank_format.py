"""Import and export of the original MemoryBank JSON.

``{user: {"name", "history": {"YYYY-MM-DD": [{"query", "response", "memory_strength"?,
"last_recall_date"?}]}, "summary": {day: {"content"} | str}, "personality": {day: str},
"overall_history": str, "overall_personality": str, "meta_information"?}}``. User keys may carry
stray spaces (" Jason "): names are stripped. The whole file is read and checked before anything
is written, so a broken file imports nothing and the error names the file and the position.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path

from .bank import MemoryBank
from .importance import rate_turn
from .records import Kind, MemoryRecord, State
from .shown import shown


class BankFormatError(ValueError):
    """A MemoryBank file that cannot be read; the message names the file and where."""


@dataclass
class ParsedUser:
    name: str
    # (query, response, when, the file's memory_strength or None, last recall)
    turns: list[tuple[str, str, datetime, float | None, datetime | None]] = field(default_factory=list)
    daily_events: dict[date, str] = field(default_factory=dict)
    daily_personality: dict[date, str] = field(default_factory=dict)
    global_events: str = ""
    global_personality: str = ""


def _day(value: str, where: str) -> date:
    try:
        return date.fromisoformat(value.strip())
    except (ValueError, AttributeError):
        raise BankFormatError(f"{where}: {value!r} is not a date (YYYY-MM-DD)") from None


def _text(value, where: str) -> str:
    if isinstance(value, dict):
        value = value.get("content", "")
    if not isinstance(value, str):
        raise BankFormatError(f"{where}: expected text, found {type(value).__name__}")
    return value


def parse_bank(path: Path | str, only_user: str | None = None) -> list[ParsedUser]:
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BankFormatError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BankFormatError(f"{path}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise BankFormatError(f"{path}: the top level must be an object of users")
    users = []
    for key, body in data.items():
        name = key.strip()
        if only_user is not None and name != only_user.strip():
            continue
        where = f"{path}: user {key!r}"
        if not isinstance(body, dict):
            raise BankFormatError(f"{where}: expected an object")
        parsed = ParsedUser(name=name)
        history = body.get("history", {}) or {}
        if not isinstance(history, dict):
            raise BankFormatError(f"{where}: history must map dates to lists of turns")
        for day_s, turns in history.items():
            day = _day(day_s, f"{where} history")
            if not isinstance(turns, list):
                raise BankFormatError(f"{where} history[{day_s!r}]: expected a list of turns")
            for i, turn in enumerate(turns):
                tw = f"{where} history[{day_s!r}][{i}]"
                if not isinstance(turn, dict) or "query" not in turn:
                    raise BankFormatError(f"{tw}: a turn needs a 'query'")
                query = _text(turn.get("query"), tw)
                response = _text(turn.get("response", "") or "", tw)
                when = (
                    datetime.fromisoformat(turn["created_at"])
                    if turn.get("created_at")
                    else datetime.combine(day, time(12, 0)) + timedelta(minutes=i)
                )
                strength = float(turn["memory_strength"] or 1) if turn.get("memory_strength") is not None else None
                recall = turn.get("last_recall_date")
                last = None
                if recall:
                    rd = _day(str(recall)[:10], tw + " last_recall_date")
                    last = max(datetime.combine(rd, time(12, 0)), when) if rd > day else None
                parsed.turns.append((query, response, when, strength, last))
        for field_name, target in (("summary", parsed.daily_events), ("personality", parsed.daily_personality)):
            section = body.get(field_name, {}) or {}
            if not isinstance(section, dict):
                raise BankFormatError(f"{where}: {field_name} must map dates to text")
            for day_s, value in section.items():
                text = _text(value, f"{where} {field_name}[{day_s!r}]")
                if text.strip():
                    target[_day(day_s, f"{where} {field_name}")] = text
        parsed.global_events = _text(body.get("overall_history", "") or "", f"{where} overall_history")
        parsed.global_personality = _text(body.get("overall_personality", "") or "", f"{where} overall_personality")
        users.append(parsed)
    if only_user is not None and not users:
        raise BankFormatError(
            f"{path}: no user {only_user!r} in the file (users: {', '.join(k.strip() for k in data)})"
        )
    return users


def import_bank(
    bank: MemoryBank, path: Path | str, *, only_user: str | None = None, rename: str | None = None, progress=None
) -> dict[str, int]:
    """Import users from a MemoryBank file; returns turns imported per user. Turns already in
    the user's memory (same day, words and reply) are skipped, so importing twice is harmless.

    The turns are stored and indexed here (their words and their messages' vectors); their
    replies' vectors are made by the bank's reply worker once every turn is in, as a live turn's
    are after its reply, and are complete when ``bank.settle()`` returns (``bank.close()`` waits
    for them too). ``progress`` (tqdm's signature): a bar of the turns stored, then one of the
    reply vectors, which this call then waits for."""
    parsed = parse_bank(path, only_user)
    counts: dict[str, int] = {}
    bar = progress(total=sum(len(p.turns) for p in parsed), desc="importing", unit="turn") if progress else None
    replies = 0
    for p in parsed:
        user = rename or p.name
        existing = {(r.day, r.query, r.response) for r in bank.records(user, kind=Kind.TURN)}
        fresh = [t for t in p.turns if (t[2].date(), t[0], t[1]) not in existing]
        replies += sum(1 for t in fresh if (t[1] or "").strip())
        states = [_state(bank, user, t) for t in fresh]
        stored = 0
        for start in range(0, len(fresh), 256):
            part = fresh[start : start + 256]
            stored += len(
                bank.add_turns(
                    user, [(q, r, w) for q, r, w, _, _ in part], states=states[start : start + 256], replies="queued"
                )
            )
            if bar:
                bar.update(len(part))
        last_day = max((t[2] for t in p.turns), default=datetime(1970, 1, 1))
        summaries: list[tuple[Kind, str, datetime, date | None]] = [
            (Kind.DAILY_EVENTS, text, datetime.combine(day, time(23, 59)), day) for day, text in p.daily_events.items()
        ]
        summaries += [
            (Kind.DAILY_PERSONALITY, text, datetime.combine(day, time(23, 59)), day)
            for day, text in p.daily_personality.items()
        ]
        if p.global_events.strip():
            summaries.append((Kind.GLOBAL_EVENTS, p.global_events, last_day, None))
        if p.global_personality.strip():
            summaries.append((Kind.GLOBAL_PERSONALITY, p.global_personality, last_day, None))
        for start in range(0, len(summaries), 256):  # embedded in batches, like the turns
            bank._set_summaries(user, summaries[start : start + 256])
        counts[user] = stored  # blank turns (no message, no reply) are not stored
    if bar:
        bar.close()
    done = bank.replies_embedded
    for user in counts:
        bank.queue_replies(user)
    if progress and replies:
        _replies_progress(bank, progress, done, replies)
    return counts


def _replies_progress(bank: MemoryBank, progress, done: int, replies: int) -> None:
    """Wait for the reply vectors the import queued, showing them as they are stored (with long
    replies they take longer than the turns themselves)."""
    bar = progress(total=replies, desc="reply vectors", unit="reply")
    waiting = threading.Thread(target=bank.settle, name="sf-import-replies", daemon=True)
    waiting.start()
    shown = 0
    while waiting.is_alive():
        waiting.join(0.5)
        now = min(bank.replies_embedded - done, replies)
        if now > shown:
            bar.update(now - shown)
            shown = now
    bar.close()


def _state(bank: MemoryBank, user: str, turn: tuple) -> MemoryRecord:
    """An imported turn's forgetting state: the strength its importance gives (rated as a new
    turn's is), plus one step for each recall the file's ``memory_strength`` counts beyond 1."""
    query, response, when, strength, last = turn
    importance = rate_turn(query, response)
    recalls = max(0, int(strength) - 1) if strength is not None else 0
    return MemoryRecord(
        user=user,
        kind=Kind.TURN,
        text="",
        created_at=when,
        day=when.date(),
        strength=bank.policy.initial_strength(importance) + recalls * getattr(bank.policy, "step", 1.0),
        importance=importance,
        last_recall=last,
        recall_count=recalls,
    )


def export_user(bank: MemoryBank, user: str, *, include_archived: bool = True) -> dict:
    """One user in the original format, plus our fields (created_at, state, pinned, id)."""
    history: dict[str, list[dict]] = {}
    summary: dict[str, dict] = {}
    personality: dict[str, str] = {}
    out = {
        "name": user,
        "history": history,
        "summary": summary,
        "personality": personality,
        "overall_history": "",
        "overall_personality": "",
    }
    for rec in bank.records(user):
        if rec.state == State.ARCHIVED and not include_archived:
            continue
        day = rec.day.isoformat()
        if rec.kind == Kind.TURN:
            history.setdefault(day, []).append(
                {
                    "query": rec.query,
                    "response": rec.response,
                    "memory_strength": rec.strength,
                    "last_recall_date": (rec.last_recall or rec.created_at).date().isoformat(),
                    "created_at": rec.created_at.isoformat(),
                    "state": rec.state.value,
                    "pinned": rec.pinned,
                    "id": rec.id,
                }
            )
        elif rec.kind == Kind.DAILY_EVENTS:
            summary[day] = {"content": rec.text}
        elif rec.kind == Kind.DAILY_PERSONALITY:
            personality[day] = rec.text
        elif rec.kind == Kind.GLOBAL_EVENTS:
            out["overall_history"] = rec.text
        elif rec.kind == Kind.GLOBAL_PERSONALITY:
            out["overall_personality"] = rec.text
    return out


def export_bank(bank: MemoryBank, users: list[str] | None = None) -> dict:
    return {u: export_user(bank, u) for u in (users if users is not None else bank.users())}


def export_person(bank: MemoryBank, user: str, now: datetime, preferences: dict) -> dict:
    """Everything of ``user``: the original MemoryBank JSON (keyed by the user's name, so
    ``siliconfriend import-memorybank`` reads it back) plus our fields under "siliconfriend": every
    memory with its forgetting state, and the account's ``preferences``. What the web app's and
    the API's exports give."""
    body = (
        export_user(bank, user)
        if bank.has_user(user)
        else {
            "name": user,
            "history": {},
            "summary": {},
            "personality": {},
            "overall_history": "",
            "overall_personality": "",
        }
    )
    memories = []
    if bank.has_user(user):
        policy = bank.policy_for(user)  # the memory page's and the API's (``shown``)
        memories = [shown(r, policy, now).as_export() for r in bank.records(user)]
    body["siliconfriend"] = {
        "format": 1,
        "exported_at": now.isoformat(),
        "account": {"name": user, "preferences": preferences},
        "memories": memories,
    }
    return {user: body}
