from datetime import date

import pytest

from memory.dates import days_in_query

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
