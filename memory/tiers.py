"""The prompt's memory budget, shared out between the tiers of memory.

Four tiers (``forgetting.TIERS``): core (pinned memories, what the person confirmed, and the
profile, which the system message carries), active (retrieved by the cue, fresh), long-term
(retrieved, fading: between the two thresholds), archive (retrieved although archived: only a
strong cue gets one past the archive's penalty). Each tier has its share of the memory budget
(``DEFAULT_SHARES``, the design notes' 40 / 35 / 20 / 5; ``Settings.memory_tier_shares``).

A share is what its tier is sure to get when it has memories to fill it; what a tier leaves
unused goes to the others, core first, then active, long-term, archive, each in its own order
(best first). So a prompt whose core is empty still carries every retrieved memory that fits, and
a user with a hundred pinned memories cannot push the cue's memories out: the core takes its
share and the rest only when the others are done.

Nothing is cut mid-sentence: a memory that does not fit whole is shortened to its first whole
sentences that fit (``whole_sentences``), or left out when not even its first sentence does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .forgetting import TIERS
from .message import Message

Counter = Callable[[str], int]

DEFAULT_SHARES: dict[str, float] = {"core": 0.40, "active": 0.35, "long_term": 0.20, "archive": 0.05}

# the cue of a core memory the message did not find: it is in the prompt because it is core
CORE_CUE = "core"
WHY_PINNED = Message("why.pinned", en="pinned: always in mind", zh="已置顶：一直记着")
WHY_CONFIRMED = Message("why.confirmed", en="you confirmed it: always in mind", zh="你确认过：一直记着")

# a sentence ends at . ! ? (followed by a space, a quote or the end) or at a Chinese end mark
_SENTENCE_END = re.compile(r"[.!?…](?=[\s\"'”’)）]|$)[\"'”’)）]*|[。！？；][”’」』）]*")


def parse_shares(items: Sequence[str] | Mapping[str, float]) -> dict[str, float]:
    """Shares from ``tier=share`` items (``("core=0.4", "active=0.35", ...)``) or a mapping: every
    tier named once, each share in [0, 1], summing to 1 (within 0.01)."""
    pairs: dict[str, float] = {}
    if isinstance(items, Mapping):
        pairs = {str(k): float(v) for k, v in items.items()}
    else:
        for item in items:
            name, sep, value = str(item).partition("=")
            try:
                pairs[name.strip()] = float(value) if sep else float("nan")
            except ValueError:
                pairs[name.strip()] = float("nan")
    bad = [n for n, v in pairs.items() if n not in TIERS or not 0.0 <= v <= 1.0]
    if bad or set(pairs) != set(TIERS) or abs(sum(pairs.values()) - 1.0) > 0.01:
        raise ValueError(
            f"memory tier shares: give each of {', '.join(TIERS)} once as tier=share, shares in [0, 1] "
            f"summing to 1 (got {', '.join(f'{n}={v}' for n, v in pairs.items()) or 'nothing'})"
        )
    return {t: pairs[t] for t in TIERS}


def split_sentences(text: str) -> list[str]:
    """``text`` in sentences, each with its end mark and the blank after it (joined, they give
    ``text`` back)."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        end = m.end()
        while end < len(text) and text[end].isspace():
            end += 1
        out.append(text[start:end])
        start = end
    if start < len(text):
        out.append(text[start:])
    return [s for s in out if s]


def whole_sentences(text: str, fits: Callable[[str], bool]) -> str | None:
    """The longest run of ``text``'s first whole sentences for which ``fits`` holds, or None when
    not even the first one does. ``fits`` is a bound on a length or a token count, which grows
    with the run: the runs are searched by halves, a few counts for a long reply instead of one
    a sentence (this is on every turn's path, for each memory shortened)."""
    sentences = split_sentences(text)
    best, low, high = None, 1, len(sentences)
    while low <= high:
        n = (low + high) // 2
        candidate = "".join(sentences[:n]).rstrip()
        if fits(candidate):
            best, low = candidate, n + 1
        else:
            high = n - 1
    return best


@dataclass(frozen=True)
class Line:
    """One memory for the prompt: its tier, and its text in parts (a turn: the person's words
    and the reply), each of which may be shortened to whole sentences; ``render`` makes the
    prompt's line from the parts."""

    tier: str
    parts: tuple[str, ...]
    render: Callable[[Sequence[str]], str]

    def text(self, parts: Sequence[str] | None = None) -> str:
        return self.render(self.parts if parts is None else parts)


@dataclass(frozen=True)
class Placed:
    index: int  # the line's place in the list given
    text: str  # as it goes into the prompt (shortened or whole)
    tier: str
    shortened: bool


def _shorten(line: Line, room: int, count: Counter) -> str | None:
    """``line`` in whole sentences within ``room`` tokens: the last part (a reply) is shortened
    first, then the ones before it; None when even one sentence of each part does not fit."""
    firsts = [(split_sentences(p)[:1] or [p])[0].rstrip() for p in line.parts]
    if count(line.text(firsts)) > room:
        # the shortest line it could be does not fit, so neither does a longer one: once the
        # budget is nearly spent, most of a turn's memories end here, each at one count
        return None
    parts = list(line.parts)
    for i in range(len(parts) - 1, -1, -1):
        if count(line.text(parts)) <= room:
            return line.text(parts)

        def fits(s: str, i: int = i) -> bool:
            return count(line.text([*parts[:i], s, *parts[i + 1 :]])) <= room

        kept = whole_sentences(parts[i], fits)
        if kept is None:
            first = split_sentences(parts[i])[:1]
            if not first:
                continue
            parts[i] = first[0].rstrip()  # this part at its first sentence: shorten the ones before
            continue
        return line.text([*parts[:i], kept, *parts[i + 1 :]])
    return line.text(parts)  # every part at its first sentence: the shortest form, which fits


def allot(
    lines: Sequence[Line],
    budget: int,
    count: Counter,
    shares: Mapping[str, float] = DEFAULT_SHARES,
    *,
    spent: Mapping[str, int] | None = None,
) -> list[Placed]:
    """The lines that go into a memory budget of ``budget`` tokens, in the order given: each tier
    first within its share, then what is left of the budget to the lines left out, tier by tier
    (``TIERS``' order). ``spent``: tokens a tier already holds elsewhere (the profile in the
    system message: the core's), taken from its share and from the budget. A line costs its
    tokens and one for its line break."""
    spent = spent or {}
    total = max(0, budget - sum(spent.values()))
    room = {t: max(0, int(shares.get(t, 0.0) * budget) - spent.get(t, 0)) for t in TIERS}
    placed: dict[int, Placed] = {}
    used = 0

    def place(i: int, line: Line, limit: int) -> int:
        whole = line.text()
        cost = count(whole) + 1
        if cost <= limit:
            placed[i] = Placed(i, whole, line.tier, False)
            return cost
        short = _shorten(line, limit - 1, count) if limit > 1 else None
        if short is None:
            return 0
        placed[i] = Placed(i, short, line.tier, True)
        return count(short) + 1

    for tier in TIERS:  # each tier within its own share
        for i, line in enumerate(lines):
            if line.tier == tier and room[tier] > 0:
                cost = place(i, line, min(room[tier], total - used))
                room[tier] -= cost
                used += cost
    for tier in TIERS:  # what is left, to the lines left out or shortened, tier by tier
        for i, line in enumerate(lines):
            if line.tier != tier or total - used <= 1 or (i in placed and not placed[i].shortened):
                continue
            before = placed.pop(i, None)
            had = count(before.text) + 1 if before else 0
            cost = place(i, line, total - used + had)
            if cost:
                used += cost - had
            elif before:
                placed[i] = before
    return [placed[i] for i in sorted(placed)]
