"""Prompt templates (files under ``prompts/<lang>/``), strict rendering, and fitting into a budget.

A template is a text file with ``{name}`` variables (``{{`` and ``}}`` for literal braces).
Rendering is strict: a variable the template uses but the caller did not give is an error, and so
is anything but a plain name between braces. ``fragments.txt`` holds the short phrases of a
language (``key = text`` lines): how a memory line, a dialogue line or a date is written.

``fit_chat`` builds the chat messages of one turn within a token budget: the oldest history and
the lowest-ranked memories go first, then the global summaries are shortened, then the user's
message (its middle is cut); the instructions are never cut.

The messages are ordered by how long they stay the same: the system message (``meta``: persona,
global summaries, instructions) changes once a day, today's conversation only grows, and what is
new at every turn -- the memories retrieved for this message and the message itself (``turn``) --
comes last. So the prompt of one turn starts with the prompt of the turn before, and a backend
reuses that prefix's work (the local model's KV cache, a server's prefix caching).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Callable, Sequence

from ..backends.base import Message

PROMPTS_DIR: Traversable = resources.files("prompts")  # package data: prompts/<lang>/*.txt
TEMPLATE_NAMES = ("meta", "turn", "daily_events", "daily_personality", "global_events", "global_personality")
MESSAGE_OVERHEAD = 8  # tokens a chat template adds around each message (role markers, newlines)

Counter = Callable[[str], int]


class PromptError(ValueError):
    """A template is missing, malformed, or was rendered without a variable it needs."""


def _fields(text: str, where: str) -> frozenset[str]:
    names = set()
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise PromptError(f"{where}: {exc} (write {{{{ and }}}} for literal braces)") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise PromptError(
                f"{where}: {{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} is not a plain variable name"
            )
        names.add(name)
    return frozenset(names)


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    where: str  # for error messages: the file (and key)
    fields: frozenset[str] = field(default=frozenset())

    @classmethod
    def parse(cls, name: str, text: str, where: str) -> "Template":
        return cls(name, text, where, _fields(text, where))

    def render(self, **values: object) -> str:
        missing = self.fields - values.keys()
        if missing:
            raise PromptError(
                f"{self.where} needs {', '.join(sorted(missing))}; given: {', '.join(sorted(values)) or 'nothing'}"
            )
        return self.text.format_map({k: values[k] for k in self.fields})


def _read(path: Traversable) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(f"prompt file {path} is missing") from None


def _parse_fragments(text: str, where: str) -> dict[str, Template]:
    out: dict[str, Template] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(" = ")
        if not sep or not key.strip().isidentifier():
            raise PromptError(f"{where}:{n}: expected 'key = text', got {line!r}")
        out[key.strip()] = Template.parse(key.strip(), value.strip(), f"{where}:{n} ({key.strip()})")
    return out


class PromptSet:
    """Every template and phrase of one language."""

    def __init__(self, lang: str, root: Traversable = PROMPTS_DIR):
        folder = root / lang
        if not folder.is_dir():
            known = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
            raise PromptError(f"no prompts for language {lang!r}; available: {', '.join(known)}")
        self.lang = lang
        self.folder = folder
        self.templates = {
            name: Template.parse(name, _read(folder / f"{name}.txt").strip(), str(folder / f"{name}.txt"))
            for name in TEMPLATE_NAMES
        }
        self.fragments = _parse_fragments(_read(folder / "fragments.txt"), str(folder / "fragments.txt"))
        self._weekdays = self._names("weekdays", 7)
        self._months = self._names("months", 12)

    def _names(self, key: str, n: int) -> list[str]:
        names = [s.strip() for s in self.fragment(key).split(",")]
        if len(names) != n:
            raise PromptError(f"{self.folder / 'fragments.txt'}: {key} needs {n} comma-separated names")
        return names

    def render(self, name: str, **values: object) -> str:
        try:
            template = self.templates[name]
        except KeyError:
            raise PromptError(f"unknown template {name!r}; templates: {', '.join(TEMPLATE_NAMES)}") from None
        return template.render(**values)

    def fragment(self, key: str, **values: object) -> str:
        try:
            template = self.fragments[key]
        except KeyError:
            raise PromptError(f"{self.folder / 'fragments.txt'} has no {key!r}") from None
        return template.render(**values)

    def format_date(self, d: date) -> str:
        return self.fragment(
            "date",
            year=d.year,
            month=d.month,
            day=d.day,
            weekday=self._weekdays[d.weekday()],
            month_name=self._months[d.month - 1],
        )


@lru_cache(maxsize=8)
def _cached(lang: str, root: Traversable) -> PromptSet:
    return PromptSet(lang, root)


def load_prompts(lang: str = "en", root: Traversable | None = None) -> PromptSet:
    # Traversable declares no __hash__; what files() gives (a Path, a MultiplexedPath) hashes
    return _cached(lang, root or PROMPTS_DIR)  # type: ignore[arg-type]


# -- fitting --------------------------------------------------------------------------------------
def truncate_tokens(text: str, max_tokens: int, count: Counter, *, marker: str = "[...]", middle: bool = False) -> str:
    """``text`` shortened to about ``max_tokens`` tokens: its end is cut (or its middle, keeping the
    head and the tail), with ``marker`` where text was taken out."""
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    keep = len(text)
    for _ in range(12):  # shrink by the measured ratio until it fits
        keep = int(keep * max_tokens / max(count(_cut(text, keep, marker, middle)), 1) * 0.97)
        if keep <= 0:
            return ""
        cut = _cut(text, keep, marker, middle)
        if count(cut) <= max_tokens:
            return cut
    return ""


def _cut(text: str, keep: int, marker: str, middle: bool) -> str:
    if keep >= len(text):
        return text
    if middle:
        head = keep * 2 // 3
        return f"{text[:head].rstrip()} {marker} {text[len(text) - (keep - head) :].lstrip()}"
    return f"{text[:keep].rstrip()} {marker}"


@dataclass
class FittedChat:
    messages: list[Message]
    kept_memories: int  # how many of the memories (best first) are in the prompt
    kept_history: int  # how many of the history turns (most recent) are in the prompt
    shortened: list[str]  # what had to be shortened: "global_events", "message", ...
    tokens: int  # estimated prompt tokens


def fit_chat(
    prompts: PromptSet,
    values: dict[str, str],
    memories: Sequence[str],
    history: Sequence[tuple[str, str]],
    message: str,
    *,
    budget: int,
    count: Counter,
) -> FittedChat:
    """The messages of one turn: the meta-prompt (``values`` fill it), the ``history`` turns
    (oldest first, as (user, reply)), then the user's ``message`` with the ``memories`` retrieved
    for it (the rendered memory lines, best first), all within ``budget`` tokens (as counted by
    ``count``)."""
    values = dict(values)
    no_memories = prompts.fragment("no_memories")
    marker = prompts.fragment("cut")
    user_name = values.get("user_name", "")
    mem = list(memories)
    mem_cost = [count(m) + 1 for m in mem]
    hist = list(history)
    hist_cost = [count(q) + count(r) + 2 * MESSAGE_OVERHEAD for q, r in hist]

    def system_cost() -> int:
        return count(prompts.render("meta", **values)) + MESSAGE_OVERHEAD

    def turn_text(lines: Sequence[str], text: str) -> str:
        block = "\n".join(lines) if lines else no_memories
        return prompts.render("turn", user_name=user_name, memories=block, message=text)

    def fixed_cost() -> int:
        return system_cost() + count(turn_text([], message)) + MESSAGE_OVERHEAD

    fixed = fixed_cost()
    while fixed + sum(mem_cost) + sum(hist_cost) > budget and (mem or hist):
        if hist and (sum(hist_cost) >= sum(mem_cost) or not mem):
            hist.pop(0), hist_cost.pop(0)
        else:
            mem.pop(), mem_cost.pop()
    shortened: list[str] = []
    over = fixed - budget
    for key in sorted(("global_events", "global_personality"), key=lambda k: -count(values.get(k, ""))):
        if over <= 0:
            break
        have = count(values.get(key, ""))
        if have > 8:
            values[key] = truncate_tokens(values[key], max(have - over, 8), count, marker=marker)
            shortened.append(key)
            fixed = fixed_cost()
            over = fixed - budget
    if over > 0:
        room = count(message) - over
        if room < 16:
            raise PromptError(
                f"the instructions alone take {fixed - count(message)} tokens, more than the prompt budget "
                f"of {budget}: use a model with a longer context or lower max_new_tokens"
            )
        message = truncate_tokens(message, room, count, marker=marker, middle=True)
        shortened.append("message")
    messages = [Message("system", prompts.render("meta", **values))]
    for query, reply in hist:
        if messages[-1].role == "user":  # a turn stored without a reply: keep the roles alternating
            messages[-1] = Message("user", f"{messages[-1].content}\n\n{query}")
        else:
            messages.append(Message("user", query))
        if reply.strip():
            messages.append(Message("assistant", reply))
    last = turn_text(mem, message)
    if messages[-1].role == "user":
        messages[-1] = Message("user", f"{messages[-1].content}\n\n{last}")
    else:
        messages.append(Message("user", last))
    tokens = sum(count(m.content) + MESSAGE_OVERHEAD for m in messages)
    return FittedChat(messages, len(mem), len(hist), shortened, tokens)


def fit_block(
    render: Callable[[str], str],
    items: Sequence[str],
    *,
    budget: int,
    count: Counter,
    marker: str = "[...]",
    sep: str = "\n",
) -> str:
    """The prompt ``render(block)`` where ``block`` joins ``items``; when it is over ``budget`` each
    item is cut to the same, largest length that fits, so that every item keeps its beginning."""
    block = sep.join(items)
    text = render(block)
    if count(text) <= budget or not items:
        return text
    room = budget - count(render(""))
    if room < 16:
        raise PromptError(f"the instructions alone take {count(render(''))} tokens, more than the budget of {budget}")
    limit = max(len(i) for i in items)
    while limit > 8:
        limit = int(limit * 0.8)
        block = sep.join(_cut(i, limit, marker, False) for i in items)
        if count(block) + len(items) <= room:
            return render(block)
    return render(truncate_tokens(sep.join(_cut(i, 8, marker, False) for i in items), room, count, marker=marker))
