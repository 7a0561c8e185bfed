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

What is rated is what the message tells (``told``): the formulas of the talk itself (thanks for
the advice, farewells, "nice to meet you", the companion addressed as "friend" or "AI
companion") say nothing of the person's life and are left out, so that "Thank you for your
advice, friend, see you tomorrow!" is not taken for a person and a plan. A life told in the third
person ("Lisa felt happy painting in art class", "Bart在动物园看到了熊猫") is about a person as
much as "I ..." is: a sentence whose subject is a name counts as the speaker's own.
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

# -- what a message tells: the talk's own formulas left out ---------------------------------------
_SENTENCE = re.compile(r"[^.!?。！？]*[.!?。！？]+[\"'”’)）]*\s*|[^.!?。！？]+$")
_FORMULA_EN = re.compile(
    r"\b(thanks?|thank you|appreciate|grateful)\b.*\b(advice|suggestions?|recommendations?|help|support|"
    r"encouragement|company|listening|tips?|ideas?|chat(ting)?)\b|\bsee you\b|\bbye\b|\bgood ?night\b|"
    r"\b(talk|chat|speak) (to you |with you )?(again )?(later|soon|tomorrow|next time)\b|"
    r"\bhave a (nice|good|great) (day|night|evening)\b|\bnice (to meet|chatting|talking)\b",
    re.I,
)
_FORMULA_ZH = re.compile(
    r"(谢谢|感谢|多谢).*(建议|推荐|陪伴|帮助|支持|鼓励|聆听|倾听|分享)|再见|明天见|下次(再)?(聊|见)|拜拜|晚安|很高兴(认识|和你)"
)
# the companion addressed: "Hi friend", "thank you, my friend", "Hello, AI companion", "你好，朋友"
_ADDRESS_EN = re.compile(
    r"\b(hi|hello|hey|dear|thanks|thank you|bye)[\s,]*(?:my\s+)?(?:dear\s+)?(?:friend|ai companion|companion|buddy)\b|"
    r"[,\s]+(?:my\s+)?(?:dear\s+)?(?:friend|ai companion|companion|buddy)(?=\s*[.!?]|\s*$)|"
    r"^\s*(?:my\s+)?(?:dear\s+)?(?:friend|ai companion|companion)\s*[,!]",
    re.I,
)
_ADDRESS_ZH = re.compile(
    r"(你好|嗨|哈喽|谢谢你|亲爱的)[啊呀呢]?[，,！!]?\s*(朋友|AI伴侣|伴侣)|(朋友|AI伴侣)(?=[！!。，,])"
)


@functools.lru_cache(maxsize=65536)
def told(message: str) -> str:
    """What ``message`` tells of the person: its sentences less those that are formulas of the
    talk (thanks for the advice or the company, farewells, "nice to meet you"), and without the
    companion addressed as "friend" / "AI companion" (朋友, AI伴侣)."""
    zh = bool(_CJK.search(message))
    formula = _FORMULA_ZH if zh else _FORMULA_EN
    kept = "".join(s for s in _SENTENCE.findall(message) if not formula.search(s))
    if zh:
        return _ADDRESS_ZH.sub("", kept).strip()
    return _ADDRESS_EN.sub(lambda m: m.group(1) or "", kept).strip()


# a sentence whose subject is a name: a life told in the third person ("Lisa felt ...", "Bart and
# his cousin went ..."): the name, then a verb in the past or the third person
_SUBJECT_EN = re.compile(
    r"(?:^|[.!?]\s+)([A-Z][a-z]{2,})\s+(?:and\s+(?:his|her|their)\s+\w+(?:\s+[A-Z][a-z]+)?\s+)?"
    r"(?:(?:was|is|were|are|had|has|went|saw|got|took|made|did|found|met|won|lost|gave|came|told|began|"
    r"bought|ran|wrote|ate|drove|flew|left|became|built|caught|chose|drew|fell|heard|held|paid|sang|sent|"
    r"spent|swam|taught|threw|woke|wore|felt|feels)\b|[a-z]+ed\b)"
)
# a Latin name inside Chinese text ("Bart在动物园...")
_LATIN_IN_ZH = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]")
_NOT_A_NAME = frozenset(
    "ai app ok okay hi hello hey the this that these those there then thanks today yesterday tomorrow".split()
)


def named_subject(text: str) -> bool:
    """Whether ``text`` tells of a person by name, as its subject: "Lisa felt happy painting", or
    a Latin name in Chinese text ("Bart在学校...")."""
    if _CJK.search(text):
        return any(w.lower() not in _NOT_A_NAME for w in _LATIN_IN_ZH.findall(text))
    for m in _SUBJECT_EN.finditer(text):
        word = m.group(1)
        # "Sounds great", "Started hitting the gym", "Thanks": a verb or an adverb, not a name
        if word.lower() not in _NOT_A_NAME and not re.search(r"(s|ed|ing|ly)$", word):
            return True
    return False


def about_self(message: str) -> bool:
    """Whether ``message`` tells something of the speaker (I / my / 我) beyond small talk."""
    text = message.strip()
    if not text or _EN_SMALL_TALK.match(text) or _ZH_SMALL_TALK.match(text):
        return False
    return bool((_ZH_SELF if _CJK.search(text) else _EN_SELF).search(text))


def rate_importance(message: str) -> float:
    """0 .. 1: how much ``message`` (the user's words) is worth keeping; see the module's text."""
    text = told(message.strip())
    if not text:
        return 0.0
    subject = named_subject(text)  # told in the third person: the name stands for "I"
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
    self_ = self_ or subject
    score = 0.2 * self_ + 0.25 * (people or names) + 0.2 * plans + 0.2 * feel + 0.25 * substance
    if not self_:
        score *= 0.6  # about the world or the companion, not about the person
    return round(min(1.0, score), 3)


ANSWER_SHARE = 0.5  # an answer the person asked for weighs half as much as their own words


@functools.lru_cache(maxsize=65536)  # a forgetting pass sorts every turn that asks by its answer
def asks(message: str) -> bool:
    """Whether ``message`` ends by asking something (its last sentence is a question)."""
    sentences = _SENTENCE.findall(told(message.strip()))
    return bool(sentences) and sentences[-1].rstrip().rstrip("\"'”’)）").endswith(("?", "？"))


def rate_turn(query: str | None, response: str | None) -> float:
    """A turn's importance: its message's (the person's words), or its reply's where the message
    is blank (a conversation's second speaker opening it holds only the reply's words). A message
    that asks something is worth at least a share (``ANSWER_SHARE``) of the answer it got: what
    the person asked for mattered to them ("what was that book you suggested?")."""
    if not (query and query.strip()):
        return rate_importance(response or "")
    own = rate_importance(query)
    if response and asks(query):
        return max(own, round(ANSWER_SHARE * rate_importance(response), 3))
    return own


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

# a lived episode: something done or lived (a verb in the past after its subject, or a day gone
# by), and what it felt like. Emotional episodes are the ones people keep (and are asked about
# years on: the day at the zoo, the lost match); a plain errand ("I fixed the printer again") is
# not one of them.
_EN_STATES = (
    "interested|tired|stressed|worried|confused|excited|bored|overwhelmed|scared|depressed|frustrated|"
    "exhausted|disappointed|satisfied|surprised|pleased|relaxed|used|supposed|inspired|motivated|amazed|"
    "attached|concerned|determined|embarrassed|annoyed|ashamed|obsessed|obliged|prepared"
)
_EN_DONE = re.compile(
    r"\b(?:(?i:i|we|he|she|they)|[A-Z][a-z]+)\s+(?i:(?:just|also|finally|recently|really|all|both|then|had|"
    r"once|even|still|actually)\s+)?"
    r"(?i:(?:went|saw|got|took|made|did|found|met|won|lost|gave|came|told|began|bought|ran|wrote|ate|"
    r"drove|flew|left|became|built|caught|chose|drew|fell|heard|held|paid|sang|sent|spent|swam|taught|threw|"
    r"woke|wore|felt|had|was|were)|(?!(?:" + _EN_STATES + r")\b)\w+(?<!e)ed)\b"
)
_EN_GONE_BY = re.compile(
    r"\b(yesterday|last (night|week|weekend|month|year|summer|winter|spring|fall|time)|ago|the other day)\b", re.I
)
_EN_EMOTION = re.compile(
    r"\b(happy|happier|glad|sad|excited|exciting|thrilled|proud|disappointed|disappointing|upset|nervous|"
    r"anxious|scared|afraid|surprised|amazing|amazed|awesome|fun|moved|touched|grateful|thankful|relieved|"
    r"heartbroken|lonely|angry|furious|joy|joyful|delighted|cheerful|miserable|terrified|embarrassed|ashamed|"
    r"frustrated|stressed|worried|overwhelmed|inspiring|inspired|powerful|wonderful|fantastic|incredible|"
    r"great time|blast|loved|enjoyed|cried|laughed|felt|feeling|feels)\b",
    re.I,
)
_ZH_DONE = re.compile(r"了|过|感到|觉得")
_ZH_GONE_BY = re.compile(r"昨天|前天|上周|上个月|去年|那天|之前|曾经")
_ZH_EMOTION = re.compile(
    r"开心|高兴|快乐|难过|伤心|悲伤|失望|惊喜|感动|激动|兴奋|愉悦|沮丧|紧张|害怕|焦虑|生气|骄傲|自豪|孤独|"
    r"幸福|满足|感激|遗憾|委屈|尴尬|有趣|好玩|享受|感到|觉得"
)


def lived(text: str) -> bool:
    """Whether ``text`` tells an episode lived and how it felt, in a sentence that is not a
    question: "I went to a support group yesterday and it was so powerful", "Lisa在动物园看到了
    长颈鹿，感到开心"."""
    zh = bool(_CJK.search(text))
    for sentence in _SENTENCE.findall(text):
        if "?" in sentence or "？" in sentence:
            continue
        if zh:
            if (
                (_ZH_DONE.search(sentence) or _ZH_GONE_BY.search(sentence))
                and _ZH_EMOTION.search(sentence)
                and len(_CJK.findall(sentence)) >= 8
            ):
                return True
        elif (_EN_DONE.search(sentence) or _EN_GONE_BY.search(sentence)) and _EN_EMOTION.search(sentence):
            return True
    return False


@functools.lru_cache(maxsize=65536)
def categorize(text: str, names: bool = True) -> str:
    """The sort of memory ``text`` (the person's words) is: one of ``CATEGORIES``. A memory that
    names people (or pets) and an event counts as about people: both fade slowly; an episode lived
    with its feeling (``lived``) is a life event. ``names`` False: a capitalised name is not taken
    for a person (the caller knows who it names). What is sorted is what the text tells (``told``)."""
    text = told(text.strip())
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
    if events or lived(text):
        return "events"
    if prefer:
        return "preferences"
    return "small_talk" if rate_importance(text) < 0.1 else "other"
