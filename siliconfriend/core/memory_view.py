"""What every front end (the web app's memory page, the API, the CLI) asks of a person's memories:
``memory_id`` is the one parser of an id a client sent, ``search`` the one search a person runs
over their memories (with its cut-off: only real matches). A memory as it is shown, and as a
reply used it, are ``memory/shown.py``'s records."""

from __future__ import annotations

import math
import numbers
from datetime import datetime
from typing import Any, Sequence

from memory.bank import NO_MEMORY, MemoryBank, UnknownMemory
from memory.cjk import IDEOGRAPH, has_ideographs
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
