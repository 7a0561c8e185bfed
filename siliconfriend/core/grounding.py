"""Is what the companion wrote about a person grounded in what was said?

No LLM is needed: a written sentence (of a daily summary or personality, of a global one, of a
reply) is checked against its sources (the day's turns; the daily summaries a global one rolls
up; the prompt of a reply) in two ways:

- **specifics**: every name, place, number and date it carries must appear in the sources
  (English: capitalised words and digits; Chinese: jieba's person, place, organisation and other
  proper nouns, numerals and Latin words). The user's and the companion's names and the words of
  the day's own date are always allowed: the prompt gives them.
- **meaning**: its content words (``memory.lexical.Tokenizer``: English stems, jieba words) must
  mostly occur in the sources, or its e5 vector must be close to one of theirs (a paraphrase
  shares few words: "I adopted a kitten" -> "Amy got a new cat"). Words that a summary or a profile
  uses to speak *about* a conversation ("shared", "mood", "should reply warmly") are not claims
  about the person and are left out of the count.

A sentence that fails either is unsupported. The thresholds were calibrated on hand-written
summaries (true ones, paraphrased, in the third person) and invented ones; see
``tests/test_grounding.py`` and docs/benchmarks.md, "No false memories: the grounding check".
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from memory.cjk import IDEOGRAPH, has_ideographs
from memory.embedders import Embedder, chunk_text, normalise
from memory.lexical import EN_STOP, Tokenizer

# A sentence is close enough in meaning to one of its sources when this share of its content
# words occurs in them, or else at these e5 cosines (query side on both: e5's symmetric
# similarity), by language: e5-small puts unrelated Chinese sentences closer than English ones.
# Below LOW_OVERLAP the words are mostly foreign to the sources and a clearly closer meaning is
# needed. Calibrated on hand-written true (paraphrased) and invented sentences
# (tests/test_grounding.py): invented ones reached 0.841 (en) and 0.891 (zh).
MIN_OVERLAP = 0.5
LOW_OVERLAP = 0.25
COSINE = {"en": (0.85, 0.88), "zh": (0.885, 0.90)}  # (overlap >= LOW_OVERLAP, overlap < LOW_OVERLAP)
# what a summary or a profile of a person never says: the writer speaking as itself ("I'll
# summarise...", "我觉得"), a greeting or a letter to the person ("Hi Emily,")
_FIRST_PERSON = re.compile(r"(?<![\w'’])I(?:['’](?:m|ll|ve|d))?(?![\w'’])|^\s*我(?!们)")
_GREETING = re.compile(r"^\W*(hi|hello|hey|dear|thanks|thank you|你好|亲爱的|谢谢)\b", re.I)

# the replacement character: bytes a model wrote that make no character (a tiny model's output, or
# one cut at its token limit mid-character), never something a person said
BROKEN = "\ufffd"
# what opens a list item ("1.", "**2.**", "3)", "- "): how a model lays out its points, not a claim
_LIST_MARK = re.compile(r"^[\s*#>•-]*(?:\d{1,2}[.)、:：](?!\d)[\s*]*)?")
_SENTENCE = re.compile(r"(?<=[.!?。！？；;])[\s\"'”’)）]*|\n+")
_CAPITALISED = re.compile(r"\b[A-Z][a-zA-Z'’-]*[a-zA-Z]\b|\b[A-Z]\b")
_DIGITS = re.compile(r"\d+")
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_ZH_NUMERALS = set("二三四五六七八九十百千万两")

# capitalised words that are not names: sentence starters, pronouns, words about the talk itself
_NOT_NAMES = frozenset(
    """
i i'm i've i'd i'll ai ok okay user the a an he she they we you it his her their our your my me
today tonight tomorrow yesterday overall also however after before later then finally first
lastly next during while when in on at for with as but and or so if though although because
this that these those there here what who why how where which both each all some many most
one two three four five six seven eight nine ten dear hi hello yes no not mr mrs ms dr
oh ohh wow aww aw ah ahh yay hmm hey haha sure well sorry great awesome lovely congratulations
""".split()
)


def _fixed_words(text: str) -> frozenset[str]:
    """The tokens of a fixed word list, cut by jieba's default dictionary (the one its tagger,
    which finds the names these lists are held against, uses)."""
    return frozenset(Tokenizer().tokenize(text, drop_stopwords=False))


# words that speak about the conversation or describe a person in general: not claims to find
# in what was said
_ABOUT_TALK_EN = _fixed_words(
    """
user conversation conversations chat chatted talk talked talking discuss discussed discussing
share shared sharing tell told telling mention mentioned say said express expressed expressing
ask asked day today tonight seem seems seemed appear appears feel feels felt feeling feelings
personality character trait traits mood moods emotion emotional emotions person people someone
reply replies respond responds response responses should could would might may approach tone
strategy best way show shows showed showing interest interested open openness
warm warmly kind kindly supportive support supporting empathy empathetic empathize understanding
understand encourage encouraging encouragement patient patience gentle gently listen listening
caring care friendly positive negative calm curious thoughtful honest optimistic reflective
attentive considerate sensitive generally general often usually overall also very quite really
generally tends tend likely value values valuing appreciate appreciates important well good
"""
)
# what a personality profile says of anyone: traits and moods (a profile's claims are checked on
# what is left: the things and people it names)
_TRAITS = _fixed_words(
    """
responsible independent creative sociable outgoing introverted extroverted shy confident ambitious
hardworking diligent passionate enthusiastic cheerful humorous funny polite sincere compassionate
loving dedicated determined resilient anxious stressed worried nervous excited happy sad lonely
tired upset frustrated relaxed content grateful hopeful energetic busy motivated eager sweet
adventurous artistic active lively friendly social introspective playful affectionate devoted
性格 开朗 外向 内向 害羞 自信 努力 勤奋 热情 幽默 礼貌 认真 负责 独立 敏感 焦虑 紧张 担心 兴奋 开心 快乐 高兴
难过 孤单 孤独 疲惫 累 沮丧 放松 满足 感激 充满 活力 忙碌 有爱心 细腻 坚强 好奇 好奇心 富有 爱心 创造力
"""
)
_ABOUT_TALK_ZH = _fixed_words(
    """
用户 对话 聊天 交流 谈到 分享 表达 表示 提到 询问 今天 当天 这天 似乎 看起来 感觉 感到 感受 性格 个性 特点
心情 情绪 情感 回复 回应 应该 应当 可以 方式 策略 语气 态度 温暖 温和 友好 耐心 支持 鼓励 理解 倾听 关心 关怀
积极 消极 乐观 真诚 体贴 善良 细心 开朗 比较 非常 一些 表现 显得 给予 需要 注意 重视 喜欢 希望 保持 总体 整体
"""
)
# jieba's proper-noun tags: person, transliterated, place, organisation, other proper noun
_ZH_NAME_TAGS = {"nr", "nrfg", "nrt", "ns", "nt", "nz"}
_ZH_NUMBER_TAGS = {"m", "t", "mq"}


@dataclass
class Verdict:
    """What the check found for one sentence."""

    sentence: str
    invented: list[str] = field(default_factory=list)  # names / numbers not in the sources
    voice: bool = False  # the writer speaking as itself or to the person: not a statement about them
    overlap: float = 1.0  # share of its content words found in the sources
    cosine: float = 1.0  # its best e5 cosine to a source
    checked_words: int = 0  # content words counted

    @property
    def grounded(self) -> bool:
        return not self.invented and not self.voice and self._meaning_ok

    @property
    def _meaning_ok(self) -> bool:
        if self.checked_words == 0 or self.overlap >= MIN_OVERLAP:
            return True
        some, few = COSINE["zh" if has_ideographs(self.sentence) else "en"]
        return self.cosine >= (few if self.overlap < LOW_OVERLAP else some)

    def why(self) -> str:
        """The failure in a few words (for a log line and a regeneration's note)."""
        if self.invented:
            return "names not said: " + ", ".join(self.invented)
        if self.voice:
            return "not a statement about the person"
        return f"not said (word overlap {self.overlap:.2f}, cosine {self.cosine:.2f})"


@dataclass
class Check:
    """The verdicts of a whole text, in order."""

    verdicts: list[Verdict]

    @property
    def kept(self) -> list[str]:
        return [v.sentence for v in self.verdicts if v.grounded]

    @property
    def dropped(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.grounded]

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and not self.dropped

    @property
    def invented(self) -> list[str]:
        return list(dict.fromkeys(name for v in self.verdicts for name in v.invented))

    def kept_text(self) -> str:
        return join_sentences(self.kept)


def split_sentences(text: str) -> list[str]:
    """Sentences of a written text (English and Chinese end marks, line breaks), without the
    marks that open list items."""
    pieces = (_LIST_MARK.sub("", s).strip() for s in _SENTENCE.split(text) if s)
    return [s for s in pieces if re.search(r"\w", s)]


def join_sentences(sentences: Sequence[str]) -> str:
    out = ""
    for s in sentences:
        if out and not has_ideographs(out[-1:]) and not has_ideographs(s[:1]):
            out += " "
        out += s
    return out


_lock = threading.Lock()
_posseg = None


def _zh_tagged(text: str) -> list[tuple[str, str]]:
    global _posseg
    if _posseg is None:
        with _lock:
            if _posseg is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)  # quietly, as the lexical side does
                jieba.initialize()
                import jieba.posseg

                _posseg = jieba.posseg
    return [(p.word, p.flag) for p in _posseg.cut(text)]


def specifics(sentence: str, *, initial: bool = True) -> list[str]:
    """The names, places, numbers and dates a sentence carries (what must appear in its sources).
    ``initial``: also a capitalised word that opens the sentence (in a summary it is mostly a name;
    in a chatty reply mostly an exclamation, "Precious little one!")."""
    found: list[str] = []
    latin = re.sub(f"[{_ideographs()}]+", " ", sentence)
    for m in _CAPITALISED.finditer(latin):
        word = re.sub(r"['’]s?$", "", m.group(0)) or m.group(0)
        low = word.lower().replace("’", "'")
        if low in _NOT_NAMES or low in EN_STOP:
            continue
        start = latin[: m.start()].strip()
        at_start = not start or start[-1] in '.!?:;"“(' or (start.endswith(",") and len(start) < 3)
        if at_start and (low.endswith(("ing", "ed", "ly", "ful")) or low in _ABOUT_TALK_EN or not initial):
            continue  # a sentence that opens with an ordinary word ("Feeling tired, ...")
        found.append(word)
    if has_ideographs(sentence):
        for word, flag in _zh_tagged(sentence):
            if not IDEOGRAPH.match(word[:1]):
                continue
            if flag in _ZH_NAME_TAGS and len(word) >= 2:
                # jieba's dictionary gives some common words a proper-noun tag ("聊天" nz, "攀岩"
                # ns): one that speaks about the talk or of a trait is never a name
                if word not in _ABOUT_TALK_ZH and word not in _TRAITS:
                    found.append(word)
            elif flag in _ZH_NUMBER_TAGS and _ZH_NUMERALS & set(word):
                found.append(word)
        # Latin words inside Chinese text are names or titles (lower-case ones too)
        if not _CAPITALISED.search(latin):
            found += [w for w in _LATIN_WORD.findall(latin) if w.lower() not in EN_STOP and len(w) > 1]
    found += _DIGITS.findall(sentence)
    return list(dict.fromkeys(found))


def _ideographs() -> str:
    from memory.cjk import IDEOGRAPHS

    return IDEOGRAPHS


class Sources:
    """What a text may draw on: its source texts (turns, daily summaries, a prompt), tokenised and
    embedded once. ``allowed``: more words that may be named (the user's and companion's names,
    the day's date as the prompt wrote it). ``task``: the words of the request the text answers
    (its instructions, without the conversation): a sentence made of them only echoes the task
    ("…是什么样的人", "what Amy said") and says nothing about the person."""

    def __init__(
        self,
        texts: Sequence[str],
        embedder: Embedder | None,
        *,
        allowed: Iterable[str] = (),
        task: str = "",
        tokenizer: Tokenizer | None = None,
    ):
        self.tokenizer = tokenizer or Tokenizer()
        self.texts = [t for t in texts if t and t.strip()]
        allowed = [a for a in allowed if a and a.strip()]
        # longest first, so that a name is taken out whole before a part of it ("小美" of "小美的")
        self.allowed = sorted(allowed, key=len, reverse=True)
        self._joined = "\n".join([*self.texts, *allowed])
        self.lower = self._joined.lower()
        self._allowed_text = " ".join(allowed)
        self._task_text = task
        self.embedder = embedder
        self._vectors: np.ndarray | None = None

    # the word sets are made when first asked for: a reply's names are mostly found in the
    # sources' text as it is (``has``), and tokenising a whole prompt costs more than the rest
    # of a reply's check
    @cached_property
    def tokens(self) -> set[str]:
        return set(self.tokenizer.tokenize(self._joined, drop_stopwords=False))

    @cached_property
    def ignored(self) -> set[str]:
        return set(self.tokenizer.tokenize(self._allowed_text, drop_stopwords=False))

    @cached_property
    def task(self) -> set[str]:
        return set(self.tokenizer.tokenize(self._task_text)) - self.ignored

    def vectors(self) -> np.ndarray:
        if self._vectors is None:
            assert self.embedder is not None
            units = [c for t in self.texts for c in chunk_text(t)]
            for t in self.texts:  # long turns also by sentence, so a short claim meets its part
                parts = split_sentences(t)
                if len(parts) > 1:
                    units += parts
            if len(self.texts) > 1:
                units += chunk_text(" ".join(self.texts))
            self._vectors = normalise(self.embedder.embed(units, kind="query")) if units else np.zeros((0, 1))
        return self._vectors

    def has(self, word: str) -> bool:
        low = word.lower()
        if has_ideographs(low):
            if low in self.lower:
                return True
        elif re.search(rf"(?<![a-z0-9]){re.escape(low)}" + (r"(?![0-9])" if low.isdigit() else ""), self.lower):
            return True
        # an English name said in another form ("Pixel's", "Emma") -> its stem among the tokens
        toks = self.tokenizer.tokenize(word, drop_stopwords=False)
        return bool(toks) and all(t in self.tokens for t in toks)


class GroundingChecker:
    """Checks written texts against their sources. ``embedder``: the bank's (e5 by default);
    without one only the specifics and the word overlap are checked. ``tokenizer``: the bank's
    (its own without one)."""

    def __init__(self, embedder: Embedder | None, tokenizer: Tokenizer | None = None):
        self.embedder = embedder
        self.tokenizer = tokenizer or Tokenizer()

    def sources(self, texts: Sequence[str], *, allowed: Iterable[str] = (), task: str = "") -> Sources:
        return Sources(texts, self.embedder, allowed=list(allowed), task=task, tokenizer=self.tokenizer)

    def check(self, text: str, sources: Sources, *, profile: bool = False, about: bool = True) -> Check:
        """The verdict of each sentence of ``text``. ``profile``: a personality profile, whose
        words for traits and moods are not claims to find in the sources. ``about``: the text is
        about the person (a summary, a profile), so a sentence in the writer's own voice fails."""
        sentences = split_sentences(text)
        verdicts = [self._specifics(s, sources) for s in sentences]
        for v in verdicts:
            if BROKEN in v.sentence:  # whatever the sources hold: a model's garbled reply can too
                v.invented.append(BROKEN)
        for v in verdicts:
            unquoted = re.sub(r"[\"“][^\"”]*[\"”]", "", v.sentence)
            v.voice = about and bool(_FIRST_PERSON.search(unquoted) or _GREETING.match(unquoted))
        todo = []
        for v in verdicts:
            words = [
                w
                for w in sources.tokenizer.tokenize(v.sentence)
                if w not in sources.ignored and w not in _about_talk(w) and not (profile and w in _TRAITS)
            ]
            v.checked_words = len(words)
            if about and words and sources.task and _echoes(words, sources):
                v.voice = True  # the request said back ("You can write here what kind of person Amy is")
            if words:
                v.overlap = sum(w in sources.tokens for w in words) / len(words)
            if not v.invented and v.checked_words and v.overlap < MIN_OVERLAP:
                todo.append(v)
        if todo and self.embedder is not None and sources.texts:
            vecs = normalise(self.embedder.embed([v.sentence for v in todo], kind="query"))
            best = (vecs @ sources.vectors().T).max(axis=1)
            for v, c in zip(todo, best):
                v.cosine = float(c)
        elif todo:
            for v in todo:
                v.cosine = 0.0
        return Check(verdicts)

    def unsupported_names(self, text: str, sources: Sources) -> list[str]:
        """The names (people, pets, places) and numbers of ``text`` that its sources never mention
        (a reply's: a capitalised word that opens a sentence is not taken for a name)."""
        found = (self._specifics(s, sources, initial=False).invented for s in split_sentences(text))
        return list(dict.fromkeys(w for names in found for w in names))

    @staticmethod
    def _specifics(sentence: str, sources: Sources, *, initial: bool = True) -> Verdict:
        plain = sentence
        for name in sources.allowed:  # the prompt's own names, out before jieba reads the rest
            plain = plain.replace(name, " " if not has_ideographs(name) else "，")
        return Verdict(sentence, invented=[w for w in specifics(plain, initial=initial) if not sources.has(w)])


def _echoes(words: list[str], sources: Sources) -> bool:
    """Half or more of the words are the request's, and none of the others was said."""
    own = [w for w in words if w not in sources.task]
    return len(own) * 2 <= len(words) and not any(w in sources.tokens for w in own)


def _about_talk(word: str) -> frozenset[str]:
    return _ABOUT_TALK_ZH if IDEOGRAPH.match(word[:1]) else _ABOUT_TALK_EN
