from datetime import date

import pytest

from memory.dates import conversation_days, days_in_query

TODAY = date(2023, 5, 7)  # a Sunday


@pytest.mark.parametrize(
    "text, expected",
    [
        ("On May 4th, I shared some problems with you", [date(2023, 5, 4)]),
        ("What topic did we talk about on April 27th?", [date(2023, 4, 27)]),
        ("on 4 May", [date(2023, 5, 4)]),
        ("Sept 3, 2021 was great", [date(2021, 9, 3)]),
        ("2023-05-01 was a holiday", [date(2023, 5, 1)]),
        ("yesterday and the day before yesterday", [date(2023, 5, 6), date(2023, 5, 5)]),
        ("what did I say last Tuesday?", [date(2023, 5, 2)]),
        ("3 days ago I felt sad", [date(2023, 5, 4)]),
        ("我5月4日和你说过什么？", [date(2023, 5, 4)]),
        ("4月27号那天", [date(2023, 4, 27)]),
        ("前天我去了哪里", [date(2023, 5, 5)]),
        ("大前天呢", [date(2023, 5, 4)]),
        ("昨天", [date(2023, 5, 6)]),
        ("三天前", [date(2023, 5, 4)]),
        ("上周二", [date(2023, 4, 25)]),
        ("What is my favourite movie?", []),
        ("May I ask you something?", []),
    ],
)
def test_days_in_query(text, expected):
    assert days_in_query(text, TODAY) == expected


def test_a_month_day_in_the_future_means_last_year():
    assert days_in_query("on December 25th", TODAY) == [date(2022, 12, 25)]


def test_impossible_dates_are_ignored():
    assert days_in_query("on February 30th", TODAY) == []


TALKED = [date(2023, 4, 26), date(2023, 4, 29), date(2023, 5, 7)]  # the user's days with turns


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Do you remember what we talked about during our first conversation?", [date(2023, 4, 26)]),
        ("What did I tell you the first time we talked?", [date(2023, 4, 26)]),
        ("你还记得我们第一次对话的时候，聊了什么话题吗？", [date(2023, 4, 26)]),
        ("我们刚开始聊天时我说了什么", [date(2023, 4, 26)]),
        # the last conversation before today, not today's
        ("What did we talk about last time we chatted?", [date(2023, 4, 29)]),
        ("In our previous conversation I mentioned a book", [date(2023, 4, 29)]),
        ("上次我们聊了什么？", [date(2023, 4, 29)]),
        # firsts and lasts that are not the conversation with the companion
        ("the first time I met my wife", []),
        ("When did Caroline first go hiking?", []),
        ("The last time I went to the gym was May 1st", []),
        ("我第一次去北京", []),
        ("上次我去健身房", []),
    ],
)
def test_conversation_days(text, expected):
    asked = []

    def talked_on():
        asked.append(True)
        return TALKED

    assert conversation_days(text, talked_on, TODAY) == expected
    assert bool(asked) == bool(expected)  # the user's days are read only for a named conversation


def test_a_conversation_with_no_days_before_it_names_none():
    assert conversation_days("our last conversation", lambda: [TODAY], TODAY) == []
    assert conversation_days("our first conversation", lambda: [], TODAY) == []
