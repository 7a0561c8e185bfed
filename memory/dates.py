"""Days named in a query ("on May 4th", "last Tuesday", "yesterday", "5月4日", "前天").

``days_in_query`` returns the days a query refers to, resolved against ``today``: a month-day
without a year is the latest such day not after today. ``conversation_days`` resolves the
conversations a query names ("our first conversation", "the last time we talked", "第一次聊天",
"上次我们聊") against the days the user has talked on.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Callable, Sequence

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_WEEKDAYS = {
    name: i
    for i, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_NUM = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}

_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_EN_MONTH_DAY = re.compile(
    rf"\b(?P<m>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(?P<y>\d{{4}}))?", re.I
)
_EN_DAY_MONTH = re.compile(
    rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m>{_MONTH_RE})\b(?:,?\s*(?P<y>\d{{4}}))?", re.I
)
_ISO = re.compile(r"\b(?P<y>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})\b")
_ZH_DATE = re.compile(r"(?:(?P<y>\d{4})年)?(?P<m>\d{1,2})月(?P<d>\d{1,2})(?:日|号|號)")
_EN_AGO = re.compile(r"\b(?P<n>\d+|one|two|three|four|five|six|seven)\s+days?\s+ago\b", re.I)
_ZH_AGO = re.compile(r"(?P<n>\d+|[一二两三四五六七八九十])\s*天(?:前|以前|之前)")
_EN_LAST_WEEKDAY = re.compile(
    rf"\b(?:last|on|this past)\s+(?P<w>{'|'.join(sorted(_WEEKDAYS, key=len, reverse=True))})\b", re.I
)
_ZH_WEEKDAY = re.compile(r"(?P<last>上个?)?(?:周|星期|礼拜)(?P<w>[一二三四五六日天])")
_TALK_EN = r"(?:conversation|chat|talk)s?"
_TALKED_EN = r"(?:talked|chatted|spoke|met)"
_EN_FIRST_TALK = re.compile(
    rf"\b(?:(?:our|the)\s+(?:very\s+)?first\s+{_TALK_EN}|first\s+time\s+(?:we|you\s+and\s+i)\s+{_TALKED_EN}"
    rf"|when\s+we\s+first\s+{_TALKED_EN})\b",
    re.I,
)
_EN_LAST_TALK = re.compile(
    rf"\b(?:(?:our|the)\s+(?:last|previous|most\s+recent)\s+{_TALK_EN}"
    rf"|(?:the\s+)?last\s+time\s+(?:we|you\s+and\s+i)\s+{_TALKED_EN})\b",
    re.I,
)
_TALK_ZH = "(?:我们|咱们|我和你|你和我)?的?(?:对话|聊天|谈话|交谈|聊|谈|说话)"
_ZH_FIRST_TALK = re.compile(f"(?:第一次|头一次|首次|初次|最初|刚开始|一开始){_TALK_ZH}")
_ZH_LAST_TALK = re.compile(f"(?:上次|上一次|最近一次){_TALK_ZH}")
_EN_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def _month_day(today: date, month: int, day: int, year: int | None) -> date | None:
    try:
        if year:
            return date(year, month, day)
        d = date(today.year, month, day)
        return d if d <= today else date(today.year - 1, month, day)
    except ValueError:
        return None


def _last_weekday(today: date, weekday: int) -> date:
    delta = (today.weekday() - weekday) % 7 or 7
    return today - timedelta(days=delta)


def days_in_query(text: str, today: date) -> list[date]:
    """The days named in ``text``, in order of appearance, without duplicates."""
    found: list[tuple[int, date]] = []

    def add(pos: int, d: date | None):
        if d is not None:
            found.append((pos, d))

    for rx in (_EN_MONTH_DAY, _EN_DAY_MONTH, _ISO, _ZH_DATE):
        for m in rx.finditer(text):
            month = m.group("m")
            month_num = int(month) if month.isdigit() else _MONTHS[month.lower()]
            year = int(m.group("y")) if m.group("y") else None
            add(m.start(), _month_day(today, month_num, int(m.group("d")), year))
    lower = text.lower()
    for word, back in (("day before yesterday", 2), ("yesterday", 1), ("today", 0), ("tonight", 0)):
        i = lower.find(word)
        if i >= 0:
            add(i, today - timedelta(days=back))
            lower = lower.replace(word, " " * len(word))
    for word, back in (("大前天", 3), ("前天", 2), ("昨天", 1), ("昨晚", 1), ("昨日", 1), ("今天", 0), ("今晚", 0)):
        i = text.find(word)
        if i >= 0 and not (word == "前天" and i > 0 and text[i - 1] == "大"):
            add(i, today - timedelta(days=back))
    for m in _EN_AGO.finditer(text):
        n = m.group("n").lower()
        add(m.start(), today - timedelta(days=int(n) if n.isdigit() else _EN_WORDS[n]))
    for m in _ZH_AGO.finditer(text):
        n = m.group("n")
        add(m.start(), today - timedelta(days=int(n) if n.isdigit() else _ZH_NUM[n]))
    for m in _EN_LAST_WEEKDAY.finditer(text):
        add(m.start(), _last_weekday(today, _WEEKDAYS[m.group("w").lower()]))
    for m in _ZH_WEEKDAY.finditer(text):
        wd = _ZH_WEEKDAYS[m.group("w")]
        if m.group("last"):
            monday = today - timedelta(days=today.weekday())
            add(m.start(), monday - timedelta(days=7 - wd))
        else:
            add(m.start(), _last_weekday(today, wd) if wd != today.weekday() else today)
    seen: set[date] = set()
    out: list[date] = []
    for _, d in sorted(found, key=lambda p: p[0]):
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def conversation_days(text: str, talked_on: Callable[[], Sequence[date]], today: date) -> list[date]:
    """The days of the conversations ``text`` names: the first one ("our first conversation",
    "when we first talked", "第一次对话") is the first day with turns; the last one ("our last
    chat", "the last time we talked", "上次聊天") is the latest such day before ``today``.
    ``talked_on`` gives the user's days with turns, in order; it is asked only when the text names
    a conversation."""
    first = bool(_EN_FIRST_TALK.search(text) or _ZH_FIRST_TALK.search(text))
    last = bool(_EN_LAST_TALK.search(text) or _ZH_LAST_TALK.search(text))
    if not (first or last):
        return []
    days = list(talked_on())
    out: list[date] = []
    if first and days:
        out.append(days[0])
    before = [d for d in days if d < today]
    if last and before and before[-1] not in out:
        out.append(before[-1])
    return out


_EN_AHEAD = re.compile(
    rf"\b(?P<rel>tomorrow|day after tomorrow)\b|\b(?:next|this|on|coming)\s+(?P<w>{'|'.join(sorted(_WEEKDAYS, key=len, reverse=True))})\b",
    re.I,
)
_ZH_AHEAD = re.compile(r"(?P<rel>明天|后天)|(?P<next>下个?|这个?|本)?(?:周|星期|礼拜)(?P<w>[一二三四五六日天])")


def days_ahead(text: str, said: date) -> list[date]:
    """The days a plan names ("tomorrow", "next Tuesday", "on June 14th", "下周五", "6月14日"),
    resolved forward from the day it was ``said``: a month-day without a year is the next such
    day, a weekday the next one (in Chinese, a week further with 下; English "next Friday" is the
    coming Friday). A plan's counterpart of
    ``days_in_query``, which looks back."""
    found: list[date] = []
    for m in _EN_AHEAD.finditer(text):
        if m.group("rel"):
            found.append(said + timedelta(days=2 if m.group("rel").lower().startswith("day after") else 1))
        else:
            weekday = _WEEKDAYS[m.group("w").lower()]
            ahead = (weekday - said.weekday()) % 7 or 7
            found.append(said + timedelta(days=ahead))
    for m in _ZH_AHEAD.finditer(text):
        if m.group("rel"):
            found.append(said + timedelta(days=1 if m.group("rel") == "明天" else 2))
        else:
            weekday = _ZH_WEEKDAYS[m.group("w")]
            start = said - timedelta(days=said.weekday())  # this week's Monday
            week = 7 if (m.group("next") or "").startswith("下") else 0
            day = start + timedelta(days=week + weekday)
            found.append(day if day > said else day + timedelta(days=7))
    for pattern in (_EN_MONTH_DAY, _EN_DAY_MONTH, _ZH_DATE):
        for m in pattern.finditer(text):
            month = _MONTHS[m.group("m").lower()] if pattern is not _ZH_DATE else int(m.group("m"))
            try:
                year = int(m.group("y")) if m.group("y") else said.year
                day = date(year, month, int(m.group("d")))
                if not m.group("y") and day < said:
                    day = date(year + 1, month, int(m.group("d")))
            except ValueError:
                continue
            found.append(day)
    return sorted(set(found))
