"""Tokens for the lexical (BM25) side of retrieval: words for English, jieba words for Chinese.

Text is reduced to lower-case word tokens; CJK runs are cut by jieba (search mode, so that both
words and their parts match); common function words are dropped; English words get a light
suffix stemming so that "movies" meets "movie" and "recommended" meets "recommend".

A conversation used as a cue keeps fewer words (``Tokenizer.situation_terms``): in Chinese, the
words jieba's part-of-speech tagger reads as nouns, verbs, places, times and set phrases, the
parts of a situation (who, what was done, where, when); its adjectives and adverbs ("热闹",
"愉快", "都") are left out, for how a day felt fits most memories of a life alike. The tagger is
statistical: a word of feeling it reads as a verb ("开心") stays.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from datetime import date
from typing import Any, Iterable

from .cjk import IDEOGRAPH, IDEOGRAPHS

_WORD = re.compile(f"[a-z0-9]+(?:'[a-z]+)?|[{IDEOGRAPHS}]+", re.I)

EN_STOP = frozenset(
    """
a about above after again against all am an and any are aren't as at be because been before being
below between both but by can can't could did didn't do does doesn't doing don't down during each
few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
let's me more most mustn't my myself no nor not of off on once only or other ought our ours
ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that
that's the their theirs them themselves then there there's these they they'd they'll they're
they've this those through to too under until up very was wasn't we we'd we'll we're we've were
weren't what what's when when's where where's which while who who's whom why why's with won't
would wouldn't you you'd you'll you're you've your yours yourself yourselves
remember recall tell told ask asked mention mentioned say said talk talked know right once ever
before recently still also just really yes okay ok hi hello thank thanks please
""".split()
)

ZH_STOP = frozenset(
    """
的 了 是 我 你 他 她 它 们 我们 你们 吗 呢 吧 啊 呀 哦 嗯 和 与 及 也 都 就 还 又 在 有 这 那 这个 那个 什么
怎么 怎样 哪些 哪个 哪 一个 一些 一下 一起 一点 个 些 过 着 给 对 把 被 让 从 到 向 为 为了 以 而 但 但是 如果
所以 因为 然后 可以 能 会 要 想 说 讲 提 提到 提过 记得 还记得 告诉 问 曾经 之前 以前 最近 上次 那天 时候 时
吗？ 不 没 没有 很 非常 特别 太 真 真的 好 好的 谢谢 你好 请 呀 啦 么 哈 嘛 及其 关于 曾 当时 几 多少 已经
""".split()
)


# jieba's part-of-speech flags kept in a conversation's cue: nouns (n, nr names, ns places, nt
# organisations, nz other proper nouns), verbs (v, vn verbal nouns, vd...), places (s), times (t),
# idioms and set phrases (i, l), abbreviations (j) and Latin words (eng)
_SITUATION_FLAGS = frozenset("s t i l j eng".split())


def _is_situation(flag: str) -> bool:
    return flag[:1] in ("n", "v") or flag in _SITUATION_FLAGS


def _stem(word: str) -> str:
    if word.isdigit() or len(word) <= 3:
        return word
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: len(word) - len(suffix)] + repl
            break
    return word


def day_token(day: date) -> str:
    """The token that stands for a calendar day in the lexical table ("day20230507")."""
    return f"day{day:%Y%m%d}"


class Tokenizer:
    """Text to lexical tokens, with jieba's cuts of Chinese remembered. The factory makes one per
    process and hands it to the banks it builds (their stores index with it, their retrieval
    searches with it); a bank made without one has its own.

    ``words``: more words for jieba's dictionary (a user dictionary): such a tokenizer has a jieba
    dictionary of its own; one without them uses jieba's default one (``jieba.dt``, which jieba's
    part-of-speech tagger shares), left as jieba loads it.
    """

    def __init__(self, *, words: Iterable[str] = (), cached: int = 16384):
        self.words = tuple(words)
        self._own = frozenset(self.words)
        self._jieba: Any = None
        self._lock = threading.Lock()
        # a turn tokenizes much of what the turn before it did (today's talk, the prompt's fixed
        # parts, the memories found again): the cuts of runs of Han characters are remembered
        self._cut = functools.lru_cache(maxsize=cached)(self._cut_now)
        self._tagger: Any = None
        self._kept = functools.lru_cache(maxsize=cached)(self._kept_now)

    @property
    def jieba(self) -> Any:
        """The jieba tokenizer (a ``jieba.Tokenizer``), its dictionary loaded on first use."""
        if self._jieba is None:
            with self._lock:
                if self._jieba is None:
                    import jieba

                    jieba.setLogLevel(logging.WARNING)
                    if self.words:
                        cutter = jieba.Tokenizer()
                        cutter.initialize()
                        for word in self.words:
                            cutter.add_word(word)
                    else:
                        jieba.initialize()
                        cutter = jieba.dt
                    self._jieba = cutter
        return self._jieba

    def _cut_now(self, text: str) -> tuple[str, ...]:
        return tuple(self.jieba.lcut_for_search(text))

    def cut(self, text: str) -> tuple[str, ...]:
        """jieba's words (search mode) of a run of Han characters."""
        return self._cut(text)

    @property
    def tagger(self) -> Any:
        """jieba's part-of-speech tagger over this tokenizer's dictionary (made on first use)."""
        if self._tagger is None:
            cutter = self.jieba
            with self._lock:
                if self._tagger is None:
                    import jieba.posseg

                    self._tagger = (
                        jieba.posseg.dt if cutter is jieba.posseg.dt.tokenizer else jieba.posseg.POSTokenizer(cutter)
                    )
        return self._tagger

    def _kept_now(self, text: str) -> tuple[str, ...]:
        # a word of the user dictionary has no tag of jieba's: a name, or a thing of the user's own
        return tuple(p.word for p in self.tagger.cut(text) if _is_situation(p.flag) or p.word in self._own)

    def situation_terms(self, text: str) -> list[str]:
        """The distinct terms of a conversation's line kept as a cue: its Chinese words that are
        nouns, verbs, places, times or set phrases (each cut as ``tokenize`` cuts it, so that it
        meets the stored words and their parts), and its other words as ``query_terms`` has
        them (English has no tagger here)."""
        seen: list[str] = []
        for m in _WORD.finditer(text.lower()):
            piece = m.group(0)
            words = self._kept(piece) if IDEOGRAPH.match(piece) else (piece,)
            for word in words:
                seen += [t for t in self.tokenize(word) if t not in seen]
        return seen

    def tokenize(self, text: str, *, drop_stopwords: bool = True) -> list[str]:
        out: list[str] = []
        for m in _WORD.finditer(text.lower()):
            piece = m.group(0)
            if IDEOGRAPH.match(piece):
                for w in self._cut(piece):
                    w = w.strip()
                    if w and not (drop_stopwords and w in ZH_STOP):
                        out.append(w)
            else:
                if drop_stopwords and piece in EN_STOP:
                    continue
                out.append(_stem(piece.replace("'", "")))
        return out

    def fts_document(self, text: str, days: Iterable[date] = ()) -> str:
        """The token string stored in the lexical table (space-joined, stop words kept out), plus
        a token for each day the text refers to (``days``: "yesterday" said on May 8th is May
        7th), so that a question naming that day finds it."""
        return " ".join([*self.tokenize(text), *(day_token(d) for d in days)])

    def query_terms(self, text: str, days: Iterable[date] = ()) -> list[str]:
        """The distinct terms a query searches for: the tokens of the days it names, then its own
        tokens in order (empty if nothing is left)."""
        seen: list[str] = [day_token(d) for d in days]
        for tok in self.tokenize(text):
            if tok not in seen:
                seen.append(tok)
        return seen
