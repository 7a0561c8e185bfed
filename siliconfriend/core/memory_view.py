"""A memory as a person sees it, for every front end (the web app's memory page, the API, the
CLI): ``shown`` is the one serializer (``ShownMemory``, with ``as_json`` for the API), ``status``
says its forgetting state in words, ``memory_id`` is the one parser of an id a client sent, and
``search`` the one search a person runs over their memories (with its cut-off: only real matches).

(The "what I remembered" entries a reply keeps with its stored turn are ``companion.used_entry``:
a stored format of their own, cut to what a prompt held.)"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from memory.bank import NO_MEMORY, MemoryBank, UnknownMemory
from memory.cjk import IDEOGRAPH, has_ideographs
from memory.forgetting import ForgettingPolicy
from memory.message import Message, Said
from memory.records import Kind, MemoryRecord, State
from memory.retrieval import Hit

MAX_MEMORY_ID = 2**63 - 1  # ids are 64-bit signed integers in every store

# A person's search shows a memory only when it really matches: it shares words with the search
# (a Chinese word of the search, one character or more, found in its text counts: jieba cuts
# "我的狗叫旺财" into 狗叫, which the lexical index alone would never meet with 狗), is on a day
# the search names, or its meaning is close both absolutely and against the rest. e5-small puts
# any two short texts at 0.77-0.85 (measured on ten turns, en and zh: "banana", "zzqxj", "quantum
# physics" reach 0.83 in English; Chinese runs higher: "宠物" -> an unrelated "我昨天去公园跑步了。"
# 0.852, "小猫" -> "我今天开始学小提琴了。" 0.848), while real matches by meaning only reach
# 0.85-0.91 ("kitten" -> "My cat is called Pixel" 0.851, "小猫" -> "我的猫叫小白" 0.907, "宠物" -> it
# 0.881, "音乐" -> the violin 0.873). So a match by meaning needs a cosine of at least
# SEARCH_MIN_SIMILARITY (a search with Chinese characters: SEARCH_MIN_SIMILARITY_ZH) and
# SEARCH_MARGIN above the median of the memories found. The price: weak true matches by meaning
# alone ("mountains" -> "hiking in the Alps", 0.835) are left out. With another embedder (MiniLM's
# cosines are far lower) the search is by words and days only.
SEARCH_MIN_SIMILARITY = 0.845
SEARCH_MIN_SIMILARITY_ZH = 0.865
SEARCH_MARGIN = 0.04
SEARCH_CANDIDATES = 50  # the retrieval's candidates that the cut-off is applied to


def real_matches(hits: list[Hit], query: str = "", words: Sequence[str] = ()) -> list[Hit]:
    """The hits of a person's search for ``query`` that match it (see SEARCH_MIN_SIMILARITY),
    best first; ``words``: the search's Chinese words, found in a memory's text."""
    dense = sorted(h.dense for h in hits if h.dense)
    median = dense[len(dense) // 2] if dense else 0.0
    floor = SEARCH_MIN_SIMILARITY_ZH if has_ideographs(query or "") else SEARCH_MIN_SIMILARITY
    return [
        h
        for h in hits
        if h.lexical > 0
        or h.on_named_day
        or any(w in h.record.text for w in words)
        or (h.dense >= floor and h.dense >= median + SEARCH_MARGIN)
    ]


def search(
    bank: MemoryBank, user: str, query: str, now: datetime, *, limit: int = SEARCH_CANDIDATES, include_archived: bool
) -> list[Hit]:
    """The memories of ``user`` that match ``query``, best first (at most ``limit``): the memory
    page's search and the API's, alike."""
    query = query.strip()
    hits = bank.search_text(user, query, now, k=SEARCH_CANDIDATES, include_archived=include_archived)
    words = [w for w in bank.tokenizer.tokenize(query) if IDEOGRAPH.match(w)]
    return real_matches(hits, query, words)[:limit]


def memory_id(value: Any) -> int:
    """A memory id from a client (a number, or its digits as text): a positive integer a store
    can hold, else UnknownMemory."""
    if isinstance(value, bool):
        raise UnknownMemory(NO_MEMORY(id=str(value)[:40]))
    if isinstance(value, str):
        text = value.strip()
        number = int(text) if text.isdigit() and len(text) <= 19 else 0
    elif isinstance(value, numbers.Integral):  # also numpy's, as a table's cell gives
        number = int(value)
    elif isinstance(value, numbers.Real):
        real = float(value)
        number = int(real) if math.isfinite(real) and real == int(real) and abs(real) < 2**64 else 0
    else:
        number = 0
    if not 1 <= number <= MAX_MEMORY_ID:
        raise UnknownMemory(NO_MEMORY(id=str(value)[:40]))
    return number


# a memory's forgetting state in words (the page, the API, the CLI)
PINNED = Message("status.pinned", en="pinned: never fades", zh="已钉住：永不淡忘")
GLOBAL = Message("status.global", en="global summary: never fades", zh="总体摘要：永不淡忘")
FADED_SINCE = Message(
    "status.faded_since",
    en="faded since {day}: back only on a strong cue, or restore it",
    zh="自 {day} 起已淡忘：只有强烈的提示才会想起，也可以恢复它",
)
FADED = Message(
    "status.faded",
    en="faded: back only on a strong cue, or restore it",
    zh="已淡忘：只有强烈的提示才会想起，也可以恢复它",
)
SUPERSEDED_BY = Message(
    "status.superseded_by",
    en="superseded ({why}) by #{by}: kept, never used again",
    zh="已被取代（{why}），取代它的是 #{by}：保留，但不再使用",
)
SUPERSEDED = Message(
    "status.superseded", en="superseded ({why}): kept, never used again", zh="已被取代（{why}）：保留，但不再使用"
)
SUPERSEDED_WHY = {
    "edited": Message("superseded.edited", en="edited", zh="已编辑"),
    "deleted": Message("superseded.deleted", en="deleted", zh="已删除"),
    "regenerated": Message("superseded.regenerated", en="regenerated", zh="已重新生成"),
    "replaced": Message("superseded.replaced", en="replaced", zh="已替换"),
}
ACTIVE = Message("status.active", en="active", zh="活跃")
FADES_IN_1 = Message(
    "status.fades_in_1", en="active: fades in 1 day unless recalled", zh="活跃：如果不被想起，1 天后淡忘"
)
FADES_IN = Message(
    "status.fades_in", en="active: fades in {n} days unless recalled", zh="活跃：如果不被想起，{n} 天后淡忘"
)
FADES_NEXT = Message("status.fades_next", en="active: fades at the next rollover", zh="活跃：下一次日终整理时淡忘")


def status(rec: MemoryRecord, policy: ForgettingPolicy, now: datetime) -> Said:
    """The memory's forgetting state, in words."""
    if rec.pinned:
        return PINNED()
    if rec.kind.is_global:
        return GLOBAL()
    if rec.state == State.ARCHIVED:
        return FADED_SINCE(day=rec.archived_at.date().isoformat()) if rec.archived_at else FADED()
    if rec.state == State.SUPERSEDED:
        info = rec.extra.get("superseded") or {}
        reason = info.get("reason") or "replaced"
        why = SUPERSEDED_WHY[reason]() if reason in SUPERSEDED_WHY else str(reason)
        return SUPERSEDED_BY(why=why, by=str(info["by"])) if info.get("by") else SUPERSEDED(why=why)
    fades = policy.fades_at(rec)
    if fades is None:
        return ACTIVE()
    days = (fades - now).total_seconds() / 86400
    if days <= 0:
        return FADES_NEXT()
    n = f"{days:.0f}"
    return FADES_IN_1() if n == "1" else FADES_IN(n=n)


@dataclass(frozen=True)
class ShownMemory:
    id: int
    kind: str
    day: str | None  # None: a global summary, which has no day
    text: str
    query: str  # a turn's message (empty for a summary)
    response: str  # a turn's reply
    state: str
    pinned: bool
    strength: float
    retention: float  # at the time it is shown
    recall_count: int
    importance: float  # 0 small talk .. 1 a personal fact, rated when written
    status: str  # the forgetting state in words (``status``: a Said, its English as a str)
    created_at: datetime
    last_recall: datetime | None
    stopped: bool | None = None  # a turn whose reply was stopped before its end (None: not a turn)
    superseded: dict | None = None  # an edited message's old turn: by what, and why
    why: str = ""  # why a search (or a reply) found it
    score: float | None = None  # the search's score

    def as_json(self) -> dict:
        """The API's ``memory`` object."""
        out: dict[str, Any] = {
            "id": self.id,
            "object": "memory",
            "kind": self.kind,
            "day": self.day,
            "text": self.text,
            "query": self.query,
            "response": self.response,
            "created_at": self.created_at.isoformat(),
            "state": self.state,
            "pinned": self.pinned,
            "strength": self.strength,
            "retention": self.retention,
            "recall_count": self.recall_count,
            "last_recall": self.last_recall.isoformat() if self.last_recall else None,
            "importance": self.importance,
            "status": self.status,
        }
        if self.kind == Kind.TURN.value:
            out["stopped"] = self.stopped
            out["superseded"] = self.superseded
        if self.score is not None:
            out["score"] = self.score
            out["why"] = self.why
        return out


def shown(
    rec: MemoryRecord, policy: ForgettingPolicy, now: datetime, *, hit: Hit | None = None, why: str | None = None
) -> ShownMemory:
    """``rec`` as a person sees it at ``now``; ``hit``: the search hit that found it (its score,
    and its reasons as ``why`` unless ``why`` is given)."""
    turn = rec.kind == Kind.TURN
    return ShownMemory(
        id=rec.stored_id,
        kind=rec.kind.value,
        day=None if rec.kind.is_global else rec.day.isoformat(),
        text=rec.text,
        query=rec.query,
        response=rec.response,
        state=rec.state.value,
        pinned=rec.pinned,
        strength=round(rec.strength, 3),
        retention=round(policy.retention(rec, now), 4),
        recall_count=rec.recall_count,
        importance=round(rec.importance, 2),
        status=status(rec, policy, now),
        created_at=rec.created_at,
        last_recall=rec.last_recall,
        stopped=bool(rec.extra.get("stopped")) if turn else None,
        superseded=rec.extra.get("superseded") if turn and rec.state == State.SUPERSEDED else None,
        why=why if why is not None else "; ".join(hit.reasons) if hit is not None else "",
        score=round(hit.score, 4) if hit is not None else None,
    )
