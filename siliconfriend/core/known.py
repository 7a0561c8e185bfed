""" "What I know about you": the core of a person's memory made visible.

The profile (the global personality, as consolidation wrote it: the model's where grounded, the
person's own words otherwise) and the facts the person stated about themselves, each one a turn
of theirs, linked by its id: the people and pets of their life, their life events and plans (with
the dates they named), their likes, and the rest they told about themselves. A fact is the
person's own words (questions left out), sorted as forgetting sorts memories
(``importance.categorize``); the names and dates in it are the entities the links between
memories are written from (``memory/entities.py``). It is edited and pinned as the memory it is.

Read without a model, in both languages; shown at the top of the memory page and by
``GET /v1/memories/known``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from memory.bank import MemoryBank
from memory.dates import days_ahead
from memory.entities import DAY, PERSON, TIE, entities
from memory.importance import about_self, categorize, rate_importance
from memory.records import Kind, MemoryRecord, State

from .consolidate import statements

SORTS = ("people", "events", "preferences", "other")  # in the order shown; small talk is no fact
TITLES = {
    "people": {"en": "People and pets", "zh": "人和宠物"},
    "events": {"en": "Life events and plans", "zh": "经历和计划"},
    "preferences": {"en": "Likes and dislikes", "zh": "喜好"},
    "other": {"en": "About you", "zh": "关于你"},
}
WORDS = {
    "title": {"en": "What I know about you", "zh": "我对你的了解"},
    "profile": {"en": "Who you are", "zh": "你是怎样的人"},
    "no_profile": {"en": "Nothing yet: tell me about yourself.", "zh": "还没有：跟我说说你自己吧。"},
    "pinned": {"en": "pinned", "zh": "已置顶"},
    "archived": {"en": "faded", "zh": "已淡忘"},
    "turn": {"en": "memory #{id}", "zh": "记忆 #{id}"},
}
# a statement of a plan: its dates lie ahead of the day it was said ("on June 14th" is next June)
PLAN = re.compile(
    r"\b(will|going to|gonna|plan|planning|next|tomorrow|getting|'ll|coming)\b|明天|后天|下周|下个|要|打算|准备|将",
    re.I,
)
FACT_CHARS = 200  # a fact's words shown (its first statements)
PER_SORT = 8  # facts shown per sort: the pinned first, then the most important, the newest
READ = 2000  # the newest turns read for facts (a long life's oldest facts are on the table below)


@dataclass(frozen=True)
class Fact:
    id: int  # the turn it comes from
    sort: str
    text: str
    day: date
    names: tuple[str, ...]  # the people, pets, places and things it names
    dates: tuple[str, ...]  # the days it refers to (a plan's date), YYYY-MM-DD
    pinned: bool
    state: str
    importance: float

    def as_json(self) -> dict:
        return {
            "memory_id": self.id,
            "sort": self.sort,
            "text": self.text,
            "day": self.day.isoformat(),
            "names": list(self.names),
            "dates": list(self.dates),
            "pinned": self.pinned,
            "state": self.state,
        }


@dataclass(frozen=True)
class Known:
    profile: MemoryRecord | None
    facts: tuple[Fact, ...]

    def by_sort(self) -> dict[str, list[Fact]]:
        return {sort: [f for f in self.facts if f.sort == sort] for sort in SORTS}

    def as_json(self, lang: str = "en") -> dict:
        p = self.profile
        return {
            "profile": None if p is None else {"memory_id": p.id, "text": p.text, "updated": p.created_at.isoformat()},
            "facts": [f.as_json() for f in self.facts],
            "sorts": {sort: TITLES[sort][lang] for sort in SORTS},
        }

    def markdown(self, lang: str = "en") -> str:
        lines = [f"### {WORDS['title'][lang]}", f"**{WORDS['profile'][lang]}**: "]
        lines[-1] += self.profile.text.strip() if self.profile is not None else WORDS["no_profile"][lang]
        for sort, facts in self.by_sort().items():
            if not facts:
                continue
            lines.append(f"\n**{TITLES[sort][lang]}**")
            for f in facts:
                marks = [f.day.isoformat(), WORDS["turn"][lang].format(id=f.id)]
                marks += [WORDS["pinned"][lang]] if f.pinned else []
                marks += [WORDS["archived"][lang]] if f.state == State.ARCHIVED.value else []
                dates = f" ({', '.join(f.dates)})" if f.dates else ""
                lines.append(f"- {f.text}{dates} · {' · '.join(marks)}")
        return "\n".join(lines)


def fact_of(rec: MemoryRecord, bank: MemoryBank) -> Fact | None:
    """The fact a turn states about the person, or None (a question, small talk, about others)."""
    said = statements(rec.query).strip()
    if not said or not about_self(said):
        return None
    found = entities(said, bank.tokenizer, rec.day)
    # a name that the entities do not know for a person's (a shop, a book) makes no fact about people
    sort = categorize(said, names=any(e.kind in (PERSON, TIE) for e in found))
    if sort not in SORTS:
        return None
    text = said if len(said) <= FACT_CHARS else said[:FACT_CHARS].rstrip() + "…"
    return Fact(
        id=rec.stored_id,
        sort=sort,
        text=text,
        day=rec.day,
        names=tuple(e.text for e in found if e.kind != DAY),
        dates=tuple(d.isoformat() for d in days_ahead(said, rec.day))
        if PLAN.search(said)
        else tuple(e.text for e in found if e.kind == DAY),
        pinned=rec.pinned,
        state=rec.state.value,
        importance=rec.importance or rate_importance(said),
    )


def known(bank: MemoryBank, user: str, *, per_sort: int = PER_SORT) -> Known:
    """What ``user``'s memory holds about them: the profile and their facts by sort."""
    if not bank.has_user(user):
        return Known(None, ())
    turns = bank.records(user, kind=Kind.TURN, limit=READ, newest_first=True, extra=False)
    facts = [f for t in turns if t.state != State.SUPERSEDED and (f := fact_of(t, bank)) is not None]
    chosen: list[Fact] = []
    for sort in SORTS:
        mine = [f for f in facts if f.sort == sort]
        mine.sort(key=lambda f: (not f.pinned, f.state != State.ACTIVE.value, -f.importance, -f.day.toordinal()))
        chosen += mine[:per_sort]
    return Known(bank.get_summary(user, Kind.GLOBAL_PERSONALITY), tuple(chosen))
