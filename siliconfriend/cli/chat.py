"""``siliconfriend chat | replay | probe | consolidate``: talking with the companion from a terminal.

chat         an interactive session, streaming; /memories /summary /regenerate /quit
replay       a scripted multi-day session (JSONL: {"date", "text", optional "time", "user"})
probe        answer probing questions (the paper's evaluation) without storing them; JSONL out
consolidate  summarise finished days and fold them into the global summaries, then forget
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from .jsonl_files import read_jsonl

FIRST_TURN = time(9, 0)  # a scripted line without "time" is said at 09:00, 09:02, ...
TURN_GAP = timedelta(minutes=2)


# -- shared plumbing ------------------------------------------------------------------------------
class Clock:
    """A clock that scripts set: ``clock()`` is the time it was last set to (or the real time)."""

    def __init__(self, now: datetime | None = None):
        self.now = now

    def set(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now or datetime.now()


def _add_common(p: argparse.ArgumentParser, *, model_options: bool = True) -> None:
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.add_argument("--lang", choices=["en", "zh"], help="language of the prompts (default: settings, en)")
    if model_options:
        p.add_argument(
            "--backend",
            help="openai | hf | langchain (default: openai if OPENAI_API_KEY is set, else the embedded SmolLM2)",
        )
        p.add_argument("--model", help="model name, Hugging Face id, path or preset (smollm2, qwen, chatglm, belle)")
        p.add_argument("--adapter", help="LoRA adapter folder (hf backend)")
        p.add_argument("--max-new-tokens", type=int, help="longest reply or summary, in tokens")


def _settings(args: argparse.Namespace):
    from ..config import Settings

    return Settings.load(
        home=getattr(args, "home", None),
        backend=getattr(args, "backend", None),
        model=getattr(args, "model", None),
        adapter=getattr(args, "adapter", None),
        lang=getattr(args, "lang", None),
        max_new_tokens=getattr(args, "max_new_tokens", None),
    )


def _companion(args: argparse.Namespace, clock: Clock, *, lazy: bool = False):
    """The companion for a command; ``lazy``: load the model only if something is generated."""
    from .. import factory

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    settings = _settings(args)
    backend = factory.build_backend(settings, lazy=lazy)
    return factory.build_companion(settings, clock=clock, backend=backend)


def _parse_date(text: str, what: str = "date") -> date:
    try:
        return date.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be YYYY-MM-DD, not {text!r}") from None


def _parse_when(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"a time must be YYYY-MM-DD[THH:MM], not {text!r}") from None


def _stream_reply(stream, out=None) -> Any:
    """Print the reply as it comes; Ctrl-C stops it (what came so far is kept)."""
    out = out or sys.stdout
    chunks = iter(stream)
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except KeyboardInterrupt:
            stream.stop()
            continue
        out.write(chunk)
        out.flush()
    out.write("\n")
    return stream.result


def _memory_lines(hits) -> list[str]:
    return [
        f"  [{h.record.day.isoformat()} {h.record.kind.value} S={h.record.strength:.1f} R={h.retention:.2f} "
        f"score={h.score:.2f}] {' '.join(h.record.text.split())[:160]}"
        for h in hits
    ]


def _report_rollover(report, out=None) -> None:
    out = out or sys.stdout
    if report is None:
        return
    if report.summarised:
        out.write(
            f"  (summarised {', '.join(d.isoformat() for d in report.summarised)}"
            f"{'; ' + str(report.archived) + ' memories faded' if report.archived else ''})\n"
        )
    _report_failures(report, out)


def _report_failures(report, out=None) -> None:
    out = out or sys.stdout
    for day, why in report.failed.items():
        out.write(f"  (summary of {day.isoformat()} failed, will retry: {why})\n")
    for kind, why in report.global_failed.items():
        out.write(f"  ({kind.value} failed, will retry: {why})\n")


# -- chat -----------------------------------------------------------------------------------------
HELP = (
    "/memories  what was remembered for the last reply (S strength, R retention)\n"
    "/summary   what I know about you\n/regenerate  a new reply to your last message\n/quit"
)


def cmd_chat(args: argparse.Namespace) -> int:
    companion = _companion(args, Clock())
    name = companion.settings.companion_name
    print(f"{name}: talking with {args.user}. Type /help for commands, /quit to leave.")
    for turn in companion.today(args.user):
        print(f"{args.user}: {turn.query}\n{name}: {turn.response}")
    last = None
    while True:
        try:
            line = input(f"{args.user}: ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            break
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        if line == "/help":
            print(HELP)
            continue
        if line == "/memories":
            if last is None:
                print("(no reply yet)")
            else:
                print("\n".join(_memory_lines(last.used)) or "  (no memory was used)")
            continue
        if line == "/summary":
            _print_profile(companion.profile(args.user))
            continue
        try:
            stream = companion.regenerate(args.user) if line == "/regenerate" else companion.respond(args.user, line)
        except ValueError as exc:
            print(f"({exc})")
            continue
        print(f"{name}: ", end="", flush=True)
        last = _stream_reply(stream)
        _report_rollover(stream.consolidation)
        if last is None:
            print("(stopped: nothing was stored)")
        elif last.error:
            print(f"({last.error})")
    return 0


def _print_profile(profile: dict, out=None) -> None:
    out = out or sys.stdout
    out.write(f"What happened so far: {profile['global_events'] or '(nothing summarised yet)'}\n")
    out.write(f"Personality: {profile['global_personality'] or '(nothing summarised yet)'}\n")
    for day in profile["daily"][-3:]:
        out.write(f"  {day['day']}: {day['events']}\n")


# -- replay ---------------------------------------------------------------------------------------
def read_script(path: Path, default_user: str | None) -> list[tuple[str, datetime, str]]:
    """(user, when, text) for each line of a replay script, in order; errors name the line."""
    lines: list[tuple[str, datetime, str]] = []
    next_time: dict[tuple[str, date], datetime] = {}
    last: dict[str, datetime] = {}
    for n, item in read_jsonl(path):
        if not isinstance(item, dict) or not str(item.get("text", "")).strip() or "date" not in item:
            raise ValueError(f'{path}:{n}: each line needs "date" (YYYY-MM-DD) and "text"')
        user = default_user or item.get("user")
        if not user:
            raise ValueError(f'{path}:{n}: no user: give --user or a "user" field')
        day = _parse_date(str(item["date"]), f"{path}:{n}: date")
        if item.get("time"):
            try:
                when = datetime.combine(day, time.fromisoformat(str(item["time"])))
            except ValueError:
                raise ValueError(f"{path}:{n}: time must be HH:MM[:SS], not {item['time']!r}") from None
        else:
            when = next_time.get((user, day), datetime.combine(day, FIRST_TURN))
        if user in last and when < last[user]:
            raise ValueError(f"{path}:{n}: {when} is earlier than the line before it for {user}")
        last[user] = when
        next_time[(user, day)] = when + TURN_GAP
        lines.append((user, when, str(item["text"])))
    if not lines:
        raise ValueError(f"{path}: the script has no lines")
    return lines


def cmd_replay(args: argparse.Namespace) -> int:
    script = read_script(Path(args.script), args.user)
    clock = Clock()
    companion = _companion(args, clock)
    name = companion.settings.companion_name
    failures = 0
    shown_day: dict[str, date] = {}
    brought = {"offered": 0, "taken up": 0}  # memories offered to bring up, and those the reply used
    for user, when, text in script:
        clock.set(when)
        if shown_day.get(user) != when.date():
            print(f"\n=== {user} · {when.date().isoformat()} ({when.strftime('%A')}) ===")
            shown_day[user] = when.date()
        print(f"{user}: {text}")
        stream = companion.respond(user, text)
        print(f"{name}: ", end="", flush=True)
        result = _stream_reply(stream)
        _report_rollover(stream.consolidation)
        if args.show_memories:
            print("\n".join(_memory_lines(result.used)) or "  (no memory was used)")
        if result.not_from_memory:
            print(f"  (not from memory: {', '.join(result.not_from_memory)})")
        if result.error:
            failures += 1
            print(f"  ({result.error})", file=sys.stderr)
        for taken in _brought_up(companion, result):
            brought["offered"] += 1
            brought["taken up"] += taken
    print(f"\nbrought up: {brought['offered']} offered, {brought['taken up']} taken up by the reply")
    if args.finish:
        for user in dict.fromkeys(u for u, _, _ in script):
            end = max(w for u, w, _ in script if u == user)
            clock.set(end + TURN_GAP)
            report = companion.consolidation(user, until=end.date())
            _report_rollover(report)
            failures += len(report.failed) + len(report.global_failed)
    return 1 if failures else 0


def _brought_up(companion, result) -> list[bool]:
    """For each memory the turn's prompt offered to bring up, whether the reply used it."""
    from memory.activation import reply_uses, words

    from ..core.bring_up import BRING_UP_CUE

    said = words(companion.bank.tokenizer, result.reply)
    return [reply_uses(companion.bank.tokenizer, h.record, said) for h in result.used if h.cue == BRING_UP_CUE]


# -- probe ----------------------------------------------------------------------------------------
def read_questions(path: Path, user: str | None) -> list[tuple[str, str, date | None]]:
    """(user, question, date or None) from JSONL lines: {"question", optional "user", "date"}, a
    plain JSON string, or the original MemoryBank form {"Name": ["question", ...]}."""
    out = []
    for n, item in read_jsonl(path):
        if isinstance(item, str):
            item = {"question": item}
        if not isinstance(item, dict):
            raise ValueError(f'{path}:{n}: expected {{"question": ...}}')
        if "question" in item:
            who = item.get("user") or user
            if not who:
                raise ValueError(f'{path}:{n}: no user: give --user or a "user" field')
            if user and item.get("user") and item["user"] != user:
                continue
            day = _parse_date(str(item["date"]), f"{path}:{n}: date") if item.get("date") else None
            out.append((who, str(item["question"]), day))
            continue
        for who, questions in item.items():  # {"Name": [questions]}
            if user and who != user:
                continue
            if not isinstance(questions, list):
                raise ValueError(f"{path}:{n}: {who!r} should map to a list of questions")
            out.extend((who, str(q), None) for q in questions)
    if not out:
        raise ValueError(f"{path}: no questions{' for ' + user if user else ''}")
    return out


def _probe_time(companion, user: str, day: date | None, default: datetime | None) -> datetime:
    """When a question is asked: its date, --date, or the day after the user's last conversation."""
    if day is not None:
        return datetime.combine(day, time(12, 0))
    if default is not None:
        return default
    days = companion.bank.days(user) if companion.bank.has_user(user) else []
    now = datetime.now()
    if days and days[-1] < now.date():
        return datetime.combine(days[-1] + timedelta(days=1), time(12, 0))
    return now


def cmd_probe(args: argparse.Namespace) -> int:
    questions = read_questions(Path(args.questions), args.user)
    clock = Clock()
    companion = _companion(args, clock)
    default = _parse_when(args.date) if args.date else None
    if default is not None and len(args.date) <= 10:
        default = default.replace(hour=12)
    out_path = Path(args.out) if args.out else None
    if out_path is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out_path = companion.settings.home / "probes" / f"probe-{stamp}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    failures = 0
    with out_path.open("w", encoding="utf-8") as fh:
        for user, question, day in questions:
            if not companion.bank.has_user(user):
                print(f"({user} has no memories here: answering without any)", file=sys.stderr)
            when = _probe_time(companion, user, day, default)
            clock.set(when)
            print(f"{user} [{when.date().isoformat()}]: {question}")
            stream = companion.respond(user, question, store=False)
            print(f"{companion.settings.companion_name}: ", end="", flush=True)
            result = _stream_reply(stream)
            if result.error:
                failures += 1
                print(f"  ({result.error})", file=sys.stderr)
            record = {
                "user": user,
                "question": question,
                "date": when.date().isoformat(),
                "answer": result.reply,
                "error": result.error,
                "memories": [h.as_dict() for h in result.used],
            }
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
    print(f"answers written to {out_path}")
    return 1 if failures else 0


# -- consolidate ----------------------------------------------------------------------------------
def cmd_consolidate(args: argparse.Namespace) -> int:
    clock = Clock(_parse_when(args.now) if args.now else None)
    companion = _companion(args, clock, lazy=True)
    until = _parse_date(args.date) if args.date else None
    users = [args.user] if args.user else companion.bank.users()
    if not users:
        print("no users yet")
        return 0
    failures = 0
    for user in users:
        if not companion.bank.has_user(user):
            raise ValueError(f"no memories for user {user!r} in {companion.settings.home}")
        report = companion.consolidation(user, until=until)
        done = ", ".join(d.isoformat() for d in report.summarised) or "nothing new"
        glob = ", ".join(k.value for k in report.global_updated)
        print(
            f"{user}: summarised {done}"
            + (f"; updated {glob}" if glob else "")
            + (f"; {report.archived} memories faded" if report.forgot else "")
        )
        _report_failures(report)
        failures += len(report.failed) + len(report.global_failed)
        if args.show:
            _print_profile(companion.profile(user))
    return 1 if failures else 0


def register(sub: Any) -> None:
    p = sub.add_parser("chat", help="talk with the companion (interactive, streaming)")
    p.add_argument("--user", required=True, help="who is talking")
    _add_common(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("replay", help="play a scripted multi-day session (JSONL)")
    p.add_argument(
        "script",
        help='JSONL, one message a line: {"date": "YYYY-MM-DD", "text": ..., optional "time": "HH:MM", "user": ...}',
    )
    p.add_argument("--user", help='the user for every line (default: each line\'s "user")')
    p.add_argument("--show-memories", action="store_true", help="print the memories used for each reply")
    p.add_argument("--finish", action="store_true", help="also summarise the last day at the end")
    _add_common(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("probe", help="answer probing questions with memories (nothing is stored)")
    p.add_argument("questions", help='JSONL: {"question": ..., optional "user", "date"} or {"Name": [questions]}')
    p.add_argument("--user", help="only this user's questions (and the user of lines that name none)")
    p.add_argument("--date", help="when the questions are asked (default: the day after the user's last conversation)")
    p.add_argument("--out", help="where to write the answers as JSONL (default: HOME/probes/probe-TIME.jsonl)")
    _add_common(p)
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("consolidate", help="summarise finished days, update the global summaries, forget")
    p.add_argument("--user", help="the user (default: every user)")
    p.add_argument("--date", help="summarise the days up to this one, inclusive (default: every day before today)")
    p.add_argument("--now", help="the time to do it at (default: now): scripted sessions")
    p.add_argument("--show", action="store_true", help="print the summaries afterwards")
    _add_common(p)
    p.set_defaults(func=cmd_consolidate)
