"""What a memory names: people, pets, places, named things, the people of a life by their tie
("my sister", "我妈妈"), and the days it refers to.

Memories that name the same rare thing are linked (``memory/links.py``): "Mei loved the kite"
and, months later, "Mei starts school" belong together though they share no other word. The
names are found without a model, in both languages:

- English by its written forms: a capitalised word or run of them that does not open a sentence
  ("I told Mei", "we went to Gulangyu Island"), or one that opens it as a possessive or a run
  ("Mei's kite", "New York was loud"); the first word of a sentence alone is mostly an ordinary
  word ("Yesterday", "Thanks"). A possessive's mark is dropped ("Mei's" is "Mei"). A person named
  by their tie to the speaker ("my sister", "our dog") is an entity too: it is who they are to
  this user.
- Chinese with jieba's part-of-speech tags, as the grounding check reads them: person names (nr,
  nrfg, nrt), places (ns), organisations (nt), other proper nouns (nz), two characters at least,
  less the words jieba's dictionary tags so that are no names ("聊天"); and the ties of kinship
  and pets ("妈妈", "姐姐", "狗").
- Dates: the days a memory's words refer to, resolved against its own day ("yesterday" said on
  May 8th, "5月4日"), as the lexical side indexes them.

What an entity is worth as a link depends on how rare it is for this user (``rarity``): the
user's own name, or their partner's in a life told around them, is in half their memories and
links nothing; a place named twice links those two.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date

from .cjk import IDEOGRAPH, IDEOGRAPH_RUN, has_ideographs
from .dates import days_in_query
from .lexical import EN_STOP, Tokenizer

# an entity's kind: how it was found (the living memory of a person groups them so)
PERSON, PLACE, ORGANISATION, NAME, TIE, DAY = "person", "place", "organisation", "name", "tie", "day"

_ZH_KINDS = {"nr": PERSON, "nrfg": PERSON, "nrt": PERSON, "ns": PLACE, "nt": ORGANISATION, "nz": NAME}

# a capitalised word, with its possessive mark if any ("Mei's", "James’")
_CAPITAL = re.compile(r"\b[A-Z][a-zA-Z-]*(?:['’]s\b|['’](?=\s))?|\b[A-Z]\b")
_SENTENCE_END = re.compile(r"[.!?;:\"“”()\[\]\n]\s*$")
# capitalised words that are no names wherever they stand: pronouns, greetings, exclamations, the
# words of a calendar (a day is an entity of its own, resolved), titles
_NOT_NAMES = frozenset(
    """
i i'm i've i'd i'll let ok okay hi hello hey dear yes no oh ohh wow aww aw ah ahh yay hmm haha sure
well sorry great awesome lovely congratulations thanks thank please mr mrs ms dr mom dad
monday tuesday wednesday thursday friday saturday sunday january february march april may june
july august september october november december today tonight tomorrow yesterday
""".split()
)
# the people and animals of a life, as the speaker names them by their tie
_TIES_EN = frozenset(
    """
mom mum mother dad father parents sister brother sibling wife husband partner son daughter kids
children baby grandma grandmother grandpa grandfather granny aunt uncle cousin niece nephew
girlfriend boyfriend fiance fiancee friend bestie boss colleague coworker roommate neighbor
neighbour teacher coach therapist dog puppy cat kitten pet
""".split()
)
_TIE_EN = re.compile(r"\b(?:my|our)\s+(?:(?:best|little|big|older|younger|new|old)\s+)?([a-z]+)\b", re.I)
_TIES_ZH = (
    "妈妈 母亲 老妈 爸爸 父亲 老爸 姐姐 妹妹 哥哥 弟弟 老婆 妻子 老公 丈夫 儿子 女儿 孩子 宝宝 奶奶 爷爷 外婆 外公 姥姥 "
    "姥爷 阿姨 叔叔 舅舅 姑姑 表姐 表妹 表哥 表弟 堂姐 堂妹 堂哥 堂弟 男朋友 女朋友 男友 女友 闺蜜 室友 同事 老板 "
    "老师 邻居 小狗 狗狗 小猫 猫咪"
).split()
_TIE_ZH = re.compile("|".join(sorted(_TIES_ZH, key=len, reverse=True)))
# words jieba's dictionary tags as proper nouns that name nothing of a person's life: the talk
# itself, moods, common activities
_NOT_NAMES_ZH = frozenset(
    """
聊天 对话 交流 心情 情绪 感觉 开心 快乐 攀岩 健身 跑步 工作 学习 生活 朋友 家人 中文 英文 英语 汉语 今天 明天 昨天
""".split()
)
_LATIN_IN_ZH = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]")


@dataclass(frozen=True, slots=True)
class Entity:
    """One thing a text names: ``key`` is what links (lower-case, without a possessive mark; a
    day as ``day:YYYY-MM-DD``; a tie as ``tie:sister``), ``text`` as it was written, ``kind``
    (``PERSON``, ``PLACE``, ``ORGANISATION``, ``NAME``, ``TIE``, ``DAY``)."""

    key: str
    text: str
    kind: str


def _english(text: str) -> list[Entity]:
    found: list[Entity] = []
    latin = IDEOGRAPH_RUN.sub(" . ", text)
    matches = list(_CAPITAL.finditer(latin))
    n = 0
    while n < len(matches):
        # a run of capitalised words, each after the one before with one space between
        run = [matches[n]]
        while (
            n + len(run) < len(matches)
            and latin[run[-1].end() : matches[n + len(run)].start()] == " "
            and not re.search(r"['’]s?$", run[-1].group(0))
        ):
            run.append(matches[n + len(run)])
        n += len(run)
        words = [re.sub(r"['’]s?$", "", m.group(0)) for m in run]
        possessive = bool(re.search(r"['’]s?$", run[-1].group(0)))
        # the words that are no names leave the run (at its ends: "Hi Mei", "Mei Monday")
        while words and words[0].lower() in _NOT_NAMES | EN_STOP:
            words.pop(0)
            run.pop(0)
        while words and words[-1].lower() in _NOT_NAMES | EN_STOP:
            words.pop()
            run.pop()
            possessive = False
        if not words:
            continue
        before = latin[: run[0].start()]
        opens = not before.strip() or bool(_SENTENCE_END.search(before))
        if opens and len(words) == 1 and not possessive:
            continue  # the first word of a sentence, alone: mostly an ordinary word
        name = " ".join(words)
        if len(name) < 2:
            continue
        found.append(Entity(name.lower(), name, NAME))
    for m in _TIE_EN.finditer(latin):
        tie = m.group(1).lower()
        if tie in _TIES_EN:
            found.append(Entity(f"tie:{tie}", m.group(0), TIE))
    return found


def _chinese(text: str, tokenizer: Tokenizer) -> list[Entity]:
    found: list[Entity] = []
    for piece in IDEOGRAPH_RUN.findall(text):
        for p in tokenizer.tagger.cut(piece):
            kind = _ZH_KINDS.get(p.flag)
            word = p.word
            if kind and len(word) >= 2 and IDEOGRAPH.match(word[:1]) and word not in _NOT_NAMES_ZH:
                found.append(Entity(word, word, kind))
    for m in _TIE_ZH.finditer(text):
        found.append(Entity(f"tie:{m.group(0)}", m.group(0), TIE))
    # Latin words inside Chinese text are names or titles, lower-case ones too ("iPhone", "Taylor")
    for word in _LATIN_IN_ZH.findall(text):
        if word.lower() not in EN_STOP and word.lower() not in _NOT_NAMES:
            found.append(Entity(word.lower(), word, NAME))
    return found


def entities(text: str, tokenizer: Tokenizer, day: date | None = None) -> list[Entity]:
    """What ``text`` names, each key once, in the order first named. ``tokenizer``: the one whose
    jieba tagger reads Chinese (the bank's). ``day``: the day it was said, against which the days
    it refers to are resolved (none without it); its own day is not one of them."""
    found = _chinese(text, tokenizer) if has_ideographs(text) else []
    if not has_ideographs(text) or re.search(r"[A-Z]", text):
        found += [e for e in _english(text) if not has_ideographs(text) or e.kind != TIE]
    if day is not None:
        found += [Entity(f"day:{d.isoformat()}", d.isoformat(), DAY) for d in days_in_query(text, day) if d != day]
    seen: dict[str, Entity] = {}
    for e in found:
        seen.setdefault(e.key, e)
    return list(seen.values())


# an entity held by more than this share of a user's memories links nothing: it is the user, their
# companion, the person their life is told around; whatever it joins, it joins everything
MAX_SHARE = 0.05


def rarity(holding: int, total: int) -> float:
    """What an entity is worth as a link, in [0, 1]: its inverse document frequency over this
    user's memories (``holding`` of ``total`` name it), scaled by the rarest possible (held by
    two: the least that links anything); 0 for one held by more than ``MAX_SHARE`` of them, or by
    fewer than two."""
    if holding < 2 or total < 2 or holding > max(2.0, MAX_SHARE * total):
        return 0.0
    top = math.log(total / 2)
    return math.log(total / holding) / top if top > 0 else 1.0
