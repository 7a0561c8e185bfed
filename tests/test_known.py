""" "What I know about you": the profile and the facts a person stated, each linked to its turn,
sorted, with the names and dates they hold, in English and Chinese; over the API too."""

from __future__ import annotations

from datetime import datetime

from memory.records import Kind
from siliconfriend.core.known import known

DAY = datetime(2024, 5, 3, 18, 40)


def test_the_facts_a_person_stated_each_linked_to_its_turn(bank):
    said = [
        "Hi! How are you?",
        "My sister Lena is getting married on June 14th, and I'm her maid of honour!",
        "I have a job interview next Tuesday at Greenleaf Books.",
        "I really love spicy noodles.",
        "Can you give me some tips to stay calm?",
        "I work night shifts as a nurse.",
        "The weather was grey all week.",
    ]
    ids = [bank.add_turn("maya", text, "ok", DAY.replace(minute=i)).id for i, text in enumerate(said)]
    k = known(bank, "maya")
    assert k.profile is None and "Nothing yet" in k.markdown("en")
    facts = {f.id: f for f in k.facts}
    assert set(facts) == {ids[1], ids[2], ids[3], ids[5]}  # no greeting, question, or talk of the weather
    assert facts[ids[1]].sort == "people" and {"Lena", "My sister"} <= set(facts[ids[1]].names)
    assert facts[ids[1]].dates == ("2024-06-14",)  # a plan: its day lies ahead
    assert facts[ids[2]].sort == "events" and facts[ids[2]].dates == ("2024-05-07",)  # next Tuesday
    assert "Greenleaf Books" in facts[ids[2]].names
    assert facts[ids[3]].sort == "preferences" and facts[ids[5]].sort == "other"
    bank.pin("maya", ids[5])
    bank.set_summary("maya", Kind.GLOBAL_PERSONALITY, "Maya is warm and a little anxious.", DAY)
    k = known(bank, "maya")
    page = k.markdown("en")
    assert page.startswith("### What I know about you\n**Who you are**: Maya is warm and a little anxious.")
    assert "**People and pets**" in page and f"memory #{ids[1]}" in page and "(2024-05-07)" in page
    assert "· pinned" in page and "**About you**" in page
    data = k.as_json("zh")
    assert data["profile"]["text"] == "Maya is warm and a little anxious." and data["sorts"]["people"] == "人和宠物"
    assert {f["memory_id"] for f in data["facts"]} == set(facts) and all(
        f["day"] == "2024-05-03" for f in data["facts"]
    )
    assert known(bank, "nobody").facts == ()


def test_chinese_facts(bank):
    a = bank.add_turn("lin", "我妹妹在台北当护士，下周五要来看我。", "真好", DAY).id
    b = bank.add_turn("lin", "你好", "你好", DAY.replace(minute=1)).id
    c = bank.add_turn("lin", "我特别喜欢吃辣的面条。", "好吃", DAY.replace(minute=2)).id
    k = known(bank, "lin")
    facts = {f.id: f for f in k.facts}
    assert set(facts) == {a, c} and b not in facts
    assert facts[a].sort == "people" and "台北" in facts[a].names and facts[c].sort == "preferences"
    assert facts[a].dates == ("2024-05-10",)
    page = k.markdown("zh")
    assert (
        page.startswith("### 我对你的了解") and "**人和宠物**" in page and f"记忆 #{a}" in page and "**喜好**" in page
    )
