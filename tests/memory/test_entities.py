from datetime import date

import pytest

from memory.entities import DAY, NAME, PERSON, PLACE, TIE, entities, rarity
from memory.lexical import Tokenizer

TOKENIZER = Tokenizer()
DAY_SAID = date(2023, 5, 8)


def keys(text: str) -> list[str]:
    return [e.key for e in entities(text, TOKENIZER, DAY_SAID)]


@pytest.mark.parametrize(
    "text, expected",
    [
        # a name mid-sentence, a possessive, a run of capitalised words
        ("I told Mei about it", ["mei"]),
        ("Mei's kite flew over Gulangyu Island.", ["mei", "gulangyu island"]),
        ("We finally saw New York", ["new york"]),
        # the first word of a sentence alone is no name; a greeting or a day is left out of a run
        ("Yesterday was long. Thanks for asking!", ["day:2023-05-07"]),
        ("Hey Caroline! Good to see you!", ["caroline"]),
        ("Yesterday Caroline went to Paris", ["caroline", "paris", "day:2023-05-07"]),
        ("That sounds great, Caroline.", ["caroline"]),
        ("Let's hope it rains. What's up? It's late", []),
        # a person by their tie to the speaker
        ("My sister and my best friend came along", ["tie:sister", "tie:friend"]),
        ("my work and my week", []),
        # days the words refer to, resolved against the day it was said (not that day itself)
        ("On May 4th we went hiking", ["day:2023-05-04"]),
        ("I feel fine today", []),
    ],
)
def test_english_names(text, expected):
    assert keys(text) == expected


def test_chinese_names_ties_and_days():
    found = {e.key: e.kind for e in entities("我和妈妈去了厦门，小明也来了。昨天很开心。", TOKENIZER, DAY_SAID)}
    assert found["厦门"] == PLACE
    assert found["小明"] == PERSON
    assert found["tie:妈妈"] == TIE
    assert found["day:2023-05-07"] == DAY
    # the words about the talk and moods that jieba tags as proper nouns are no names
    assert "聊天" not in {e.key for e in entities("今天和你聊天很开心", TOKENIZER)}


def test_latin_words_in_chinese_text_and_kinds():
    found = entities("我用iPhone给Taylor拍照", TOKENIZER)
    assert [(e.key, e.kind) for e in found if e.kind == NAME] == [("iphone", NAME), ("taylor", NAME)]


def test_each_key_once_in_order():
    assert keys("Mei, Mei and Mei's mother met Tom") == ["mei", "tom"]


def test_rarity_links_the_rare_and_never_the_everywhere():
    total = 400
    assert rarity(1, total) == 0.0  # held by one memory: nothing to link to
    assert rarity(2, total) == 1.0  # the rarest that links
    assert 0.0 < rarity(10, total) < rarity(3, total) < 1.0
    assert rarity(200, total) == 0.0  # the user's own name: in half of it, links nothing
    assert rarity(2, 2) == 1.0
