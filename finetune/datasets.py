"""Training dialogues from files: SmileChat, {"input","output"} pairs, chat {"messages"} JSONL.

Every record becomes a :class:`Dialogue`: a list of ``{"role": "system"|"user"|"assistant",
"content"}`` messages that alternates user/assistant and holds at least one assistant reply after a
user turn. Formats recognised per record (a ``.jsonl`` line, or a ``.json`` file / list item):

- SmileChat, our subset: ``{"id", "dialogue": [{"role": "client"|"counselor", "content"}, ...]}``
- SmileChat, full set: a ``.json`` file holding the list ``[{"role", "content", "annotation"}, ...]``
- chat: ``{"messages": [{"role": "system"|"user"|"assistant", "content"}, ...]}``
  (ShareGPT ``{"conversations": [{"from": "human"|"gpt", "value"}]}`` too)
- pairs: ``{"input", "output"}`` with optional ``"instruction"``, ``"system"`` and
  ``"history": [[user, assistant], ...]``

Bad records are reported with file and line (``file:line`` or ``file#item``) and skipped.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

ROLE_ALIASES = {
    "user": "user",
    "client": "user",
    "human": "user",
    "seeker": "user",
    "patient": "user",
    "usr": "user",
    "question": "user",
    "assistant": "assistant",
    "counselor": "assistant",
    "counsellor": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "supporter": "assistant",
    "therapist": "assistant",
    "model": "assistant",
    "answer": "assistant",
    "system": "system",
}
DATA_SUFFIXES = (".jsonl", ".json")


class BadRecord(ValueError):
    """A record that cannot be turned into a training dialogue (the message says why)."""


class NoUsableData(ValueError):
    """No file or record given to the trainer could be used."""


@dataclass
class Dialogue:
    messages: list[dict]
    source: str  # where it came from: "file:line" or "file#item"

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


@dataclass
class LoadReport:
    files: list[str] = field(default_factory=list)
    records: int = 0
    bad: list[str] = field(default_factory=list)  # "file:line: reason"

    @property
    def good(self) -> int:
        return self.records - len(self.bad)

    def summary(self) -> str:
        return f"{self.good} dialogues from {len(self.files)} file(s); {len(self.bad)} bad record(s) skipped"


# --------------------------------------------------------------------------- records -> messages


def _message(item: Any, index: int) -> dict | None:
    if not isinstance(item, dict):
        raise BadRecord(f"message {index} is {type(item).__name__}, not an object")
    role = item.get("role", item.get("from"))
    content = item.get("content", item.get("value"))
    if not isinstance(role, str) or role.strip().lower() not in ROLE_ALIASES:
        raise BadRecord(
            f"message {index} has unknown role {role!r} (expected one of client, counselor, user, assistant, system)"
        )
    if content is None:
        raise BadRecord(f"message {index} has no content")
    if not isinstance(content, str):
        raise BadRecord(f"message {index} content is {type(content).__name__}, not text")
    content = content.strip()
    if not content:
        return None  # empty messages are dropped, not fatal
    return {"role": ROLE_ALIASES[role.strip().lower()], "content": content}


def normalise(messages: Sequence[Any]) -> list[dict]:
    """Map roles, drop empty messages, merge consecutive same-role messages, and trim the ends so
    that the dialogue is [system] user assistant user assistant ... ending with an assistant."""
    if not isinstance(messages, (list, tuple)):
        raise BadRecord(f"the dialogue is {type(messages).__name__}, not a list of messages")
    system: list[str] = []
    turns: list[dict] = []
    for i, item in enumerate(messages):
        msg = _message(item, i)
        if msg is None:
            continue
        if msg["role"] == "system":
            if turns:
                raise BadRecord(f"message {i} is a system message after the dialogue started")
            system.append(msg["content"])
        elif turns and turns[-1]["role"] == msg["role"]:
            turns[-1]["content"] += "\n" + msg["content"]
        else:
            turns.append(dict(msg))
    while turns and turns[0]["role"] == "assistant":
        turns.pop(0)
    while turns and turns[-1]["role"] == "user":
        turns.pop()
    if not turns:
        raise BadRecord("no counsellor/assistant reply follows a client/user turn")
    return ([{"role": "system", "content": "\n".join(system)}] if system else []) + turns


def _pair_messages(rec: dict) -> list[dict]:
    out = rec.get("output")
    if not isinstance(out, str) or not out.strip():
        raise BadRecord('"output" is missing or empty')
    prompt = "\n".join(
        str(rec[k]).strip() for k in ("instruction", "input") if isinstance(rec.get(k), str) and rec[k].strip()
    )
    if not prompt:
        raise BadRecord('"input" (and "instruction") are missing or empty')
    msgs: list[dict] = []
    if isinstance(rec.get("system"), str) and rec["system"].strip():
        msgs.append({"role": "system", "content": rec["system"]})
    history = rec.get("history") or []
    if not isinstance(history, list):
        raise BadRecord('"history" must be a list of [user, assistant] pairs')
    for j, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise BadRecord(f'"history" item {j} is not a [user, assistant] pair')
        msgs += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    msgs += [{"role": "user", "content": prompt}, {"role": "assistant", "content": out}]
    return msgs


def record_messages(rec: Any) -> list[dict]:
    """The normalised messages of one record in any supported format (raises BadRecord)."""
    if isinstance(rec, list):
        return normalise(rec)
    if not isinstance(rec, dict):
        raise BadRecord(f"record is {type(rec).__name__}, expected an object or a list of messages")
    for key in ("dialogue", "messages", "conversations", "conversation"):
        if key in rec:
            return normalise(rec[key])
    if "output" in rec or "input" in rec:
        return normalise(_pair_messages(rec))
    raise BadRecord(
        f"unknown record format (keys {sorted(rec)[:6]}); expected 'dialogue', 'messages' or 'input'/'output'"
    )


# --------------------------------------------------------------------------- files -> records


def data_files(paths: Iterable[str | Path]) -> list[Path]:
    """The data files named by ``paths``: files as given, folders searched for .jsonl/.json."""
    files: list[Path] = []
    for p in paths:
        path = Path(p).expanduser()
        if path.is_dir():
            found = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in DATA_SUFFIXES)
            if not found:
                raise NoUsableData(f"{path} holds no .jsonl or .json file")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise NoUsableData(f"data path {path} does not exist")
    return files


def _is_message_list(obj: Any) -> bool:
    return (
        isinstance(obj, list) and bool(obj) and all(isinstance(m, dict) and ("role" in m or "from" in m) for m in obj)
    )


def iter_records(file: Path) -> Iterator[tuple[str, Any]]:
    """(location, record) for each record of ``file``; a record that is not even JSON is yielded
    as a BadRecord instance so that the caller reports it with its line."""
    if file.suffix == ".json":
        try:
            obj = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            yield f"{file}", BadRecord(f"invalid JSON: {exc}")
            return
        if _is_message_list(obj) or isinstance(obj, dict):
            yield f"{file}", obj
        elif isinstance(obj, list):
            for i, item in enumerate(obj):
                yield f"{file}#{i}", item
        else:
            yield f"{file}", obj
        return
    with open(file, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"{file}:{lineno}", json.loads(line)
            except json.JSONDecodeError as exc:
                yield f"{file}:{lineno}", BadRecord(f"invalid JSON: {exc.msg} at column {exc.colno}")


def load_dialogues(
    paths: Iterable[str | Path], *, on_bad: Callable[[str], None] | None = None
) -> tuple[list[Dialogue], LoadReport]:
    """All usable dialogues in ``paths`` (files or folders), and a report of what was skipped.

    ``on_bad`` is called with "location: reason" for each bad record. Raises NoUsableData when no
    record at all could be used."""
    report = LoadReport()
    dialogues: list[Dialogue] = []
    for file in data_files(paths):
        report.files.append(str(file))
        for where, rec in iter_records(file):
            report.records += 1
            try:
                if isinstance(rec, BadRecord):
                    raise rec
                dialogues.append(Dialogue(record_messages(rec), where))
            except BadRecord as exc:
                report.bad.append(f"{where}: {exc}")
                if on_bad is not None:
                    on_bad(f"{where}: {exc}")
    if not dialogues:
        raise NoUsableData(
            f"no usable training dialogue in {', '.join(report.files) or 'the data'}"
            f" ({report.records} record(s), {len(report.bad)} bad)"
        )
    return dialogues, report


def split_eval(
    dialogues: Sequence[Dialogue], eval_split: float, seed: int = 0
) -> tuple[list[Dialogue], list[Dialogue]]:
    """(train, eval): a fraction (0 < x < 1) or a count (x >= 1) of dialogues held out at random.
    At least one dialogue always stays for training."""
    n = len(dialogues)
    k = int(eval_split) if eval_split >= 1 else int(round(n * eval_split))
    k = max(0, min(k, n - 1))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = set(order[:k])
    return ([d for i, d in enumerate(dialogues) if i not in held], [d for i, d in enumerate(dialogues) if i in held])
