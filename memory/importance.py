"""How much a message matters to remember, rated when it is written: 0 small talk .. 1 a personal fact.

The rating raises a memory's initial strength (``EbbinghausPolicy.initial_strength``), so that what a
person tells about themselves, the people in their life, their plans and their feelings lasts months
while "hi, how are you?" fades in a couple of weeks. A strong LLM backend can rate instead (the
companion passes its rating to ``MemoryBank.add_turn``); this is the cheap rule used otherwise: it
counts cues of self-disclosure, in English and Chinese, and has no knowledge of any data set.

Cues (each adds to the score, capped at 1):
- the speaker talks about themselves (I / my / 我) rather than only asking the companion;
- people and relations (family words, names: capitalised words inside a sentence);
- plans, events and dates (tomorrow, next week, a weekday, a number, 明天, 下周, 月/号);
- feelings and preferences (love, hate, afraid, favourite, 喜欢, 难过);
- substance: a message of some length says more than a greeting.
"""

from __future__ import annotations

import functools
import re

_EN_SELF = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|our|us)\b", re.I)
_EN_PEOPLE = re.compile(
    r"\b(mom|mum|mother|dad|father|parents?|sister|brother|son|daughter|kids?|children|child|wife|husband|"
    r"girlfriend|boyfriend|partner|friend|friends|grandma|grandpa|grandmother|grandfather|aunt|uncle|cousin|"
    r"colleague|boss|teacher|neighbou?r|family|baby|dog|cat|pet|puppy)s?\b",
    re.I,
)
_EN_PLANS = re.compile(
    r"\b(tomorrow|yesterday|tonight|next|last|weekend|week|month|year|birthday|anniversary|wedding|plan|"
    r"planning|going to|will|trip|travel|exam|interview|job|work|school|university|college|moved?|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
    r"july|august|september|october|november|december)\b|\d",
    re.I,
)
_EN_FEEL = re.compile(
    r"\b(love|loved|hate|hated|like|liked|enjoy|enjoyed|favou?rite|afraid|scared|worried|anxious|sad|"
    r"happy|excited|angry|upset|lonely|stressed|depressed|proud|miss|missed|hope|dream|allergic|"
    r"diagnosed|sick|ill|hurt|feel|feeling|felt)\b",
    re.I,
)
_EN_NAME = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}")
_EN_SMALL_TALK = re.compile(
    r"^\s*(hi|hello|hey|good (morning|evening|night|afternoon)|thanks?|thank you|ok(ay)?|bye|goodbye|"
    r"see you|how are you|what'?s up|lol|haha|nice|cool|great|sure|yes|no)\b[\s!.?,]*$",
    re.I,
)

_ZH_SELF = re.compile(r"我|咱")
_ZH_PEOPLE = re.compile(
    r"妈|爸|父母|父亲|母亲|姐|妹|哥|弟|儿子|女儿|孩子|老婆|老公|妻子|丈夫|男朋友|女朋友|"
    r"对象|朋友|同学|同事|老板|老师|邻居|家人|奶奶|爷爷|外婆|外公|姥姥|姥爷|宝宝|狗|猫|宠物"
)
_ZH_PLANS = re.compile(
    r"明天|昨天|今晚|下周|上周|周末|下个月|上个月|明年|去年|生日|纪念日|婚礼|计划|打算|准备|"
    r"旅行|旅游|考试|面试|工作|上班|学校|大学|搬家|星期|周[一二三四五六日天]|\d|月|号"
)
_ZH_FEEL = re.compile(
    r"喜欢|爱|讨厌|害怕|担心|焦虑|难过|伤心|开心|高兴|兴奋|生气|孤独|压力|抑郁|骄傲|想念|"
    r"希望|梦想|过敏|生病|病了|感觉|觉得|心情"
)
_ZH_SMALL_TALK = re.compile(r"^\s*(你好|嗨|哈喽|早上好|晚上好|晚安|谢谢|好的|嗯+|哈+|再见|拜拜|在吗)[\s!！。？?，,]*$")
_CJK = re.compile(r"[\u3400-\u9fff]")


def about_self(message: str) -> bool:
    """Whether ``message`` tells something of the speaker (I / my / 我) beyond small talk."""
    text = message.strip()
    if not text or _EN_SMALL_TALK.match(text) or _ZH_SMALL_TALK.match(text):
        return False
    return bool((_ZH_SELF if _CJK.search(text) else _EN_SELF).search(text))


def rate_importance(message: str) -> float:
    """0 .. 1: how much ``message`` (the user's words) is worth keeping; see the module's text."""
    text = message.strip()
    if not text:
        return 0.0
    if _CJK.search(text):
        if _ZH_SMALL_TALK.match(text):
            return 0.0
        self_, people, plans, feel = (bool(p.search(text)) for p in (_ZH_SELF, _ZH_PEOPLE, _ZH_PLANS, _ZH_FEEL))
        substance = min(1.0, len(_CJK.findall(text)) / 40)
        names = False
    else:
        if _EN_SMALL_TALK.match(text):
            return 0.0
        self_, people, plans, feel = (bool(p.search(text)) for p in (_EN_SELF, _EN_PEOPLE, _EN_PLANS, _EN_FEEL))
        substance = min(1.0, len(text.split()) / 25)
        names = bool(_EN_NAME.search(text))
    score = 0.2 * self_ + 0.25 * (people or names) + 0.2 * plans + 0.2 * feel + 0.25 * substance
    if not self_:
        score *= 0.6  # about the world or the companion, not about the person
    return round(min(1.0, score), 3)


# -- what a memory is about: each sort fades at its own pace (``EbbinghausPolicy.decay``) --------
# people and pets, life events and plans: what a companion is expected to remember for years;
# preferences change more often; small talk is forgotten fastest; the rest ("other") between.
CATEGORIES = ("people", "events", "preferences", "other", "small_talk")

_EN_EVENTS = re.compile(
    r"\b(wedding|married|marry|engaged|divorced?|birthday|anniversary|graduat\w*|exams?|tests?|interview\w*|"
    r"new job|hired|fired|quit|promot\w*|retir\w*|moved|moving|move to|trip|travel\w*|vacation|holiday|"
    r"concert|party|funeral|died|passed away|born|pregnan\w*|surgery|hospital|accident|competition|"
    r"tournament|contest|won|award|festival|christmas|new year|thanksgiving|plan|planning|going to|"
    r"tomorrow|tonight|next (week|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"appointment|deadline|first day|last day|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|june|july|august|september|october|november|december)\b",
    re.I,
)
_EN_PREFER = re.compile(
    r"\b(love|loves|loved|hate|hates|like|likes|liked|enjoy|enjoys|favou?rite|prefer\w*|fan of|into|"
    r"can't stand|allergic|vegetarian|vegan|hobby|hobbies)\b",
    re.I,
)
_ZH_EVENTS = re.compile(
    r"婚礼|结婚|订婚|离婚|生日|纪念日|毕业|考试|面试|入职|辞职|升职|退休|搬家|旅行|旅游|度假|演唱会|聚会|"
    r"派对|葬礼|去世|出生|怀孕|手术|住院|事故|比赛|获奖|得奖|春节|圣诞|新年|中秋|计划|打算|准备|明天|"
    r"下周|下个月|明年|今晚|预约|截止|第一天|周[一二三四五六日天]|星期|\d+月"
)
_ZH_PREFER = re.compile(r"喜欢|爱吃|爱看|爱好|讨厌|最爱|偏爱|不爱|兴趣|过敏|素食")


@functools.lru_cache(maxsize=65536)
def categorize(text: str, names: bool = True) -> str:
    """The sort of memory ``text`` (the person's words) is: one of ``CATEGORIES``. A memory that
    names people (or pets) and an event counts as about people: both fade slowly. ``names``
    False: a capitalised name is not taken for a person (the caller knows who it names)."""
    text = text.strip()
    if not text:
        return "small_talk"
    if _CJK.search(text):
        if _ZH_SMALL_TALK.match(text) or len(_CJK.findall(text)) < 4:
            return "small_talk"
        people, events, prefer = (bool(p.search(text)) for p in (_ZH_PEOPLE, _ZH_EVENTS, _ZH_PREFER))
    else:
        if _EN_SMALL_TALK.match(text) or len(text.split()) < 4:
            return "small_talk"
        found = (m for m in _EN_NAME.findall(text) if not _EN_EVENTS.fullmatch(m))  # not "Friday", "June"
        people = bool(_EN_PEOPLE.search(text) or (names and next(found, None)))
        events, prefer = bool(_EN_EVENTS.search(text)), bool(_EN_PREFER.search(text))
    if people:
        return "people"
    if events:
        return "events"
    if prefer:
        return "preferences"
    return "small_talk" if rate_importance(text) < 0.1 else "other"
