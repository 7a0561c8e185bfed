"""No false memories: the grounding check of what the companion writes about a person, the day
rollover's way through it (written again with the failure named, grounded sentences kept, the
user's own words, no profile), the memory page's note, and ``eval grounding`` with the packaged
SmolLM2."""

from __future__ import annotations

import json
from datetime import date, datetime

import pytest

from memory.records import Kind
from siliconfriend.core.consolidate import Consolidator, dropped_of, extractive_summary, path_of
from siliconfriend.core.grounding import GroundingChecker, specifics, split_sentences
from siliconfriend.core.prompting import load_prompts
from siliconfriend.web.memory_page import grounding_note

D1 = date(2023, 5, 2)
TURNS_EN = [
    "I adopted a grey cat called Pixel yesterday. She is so tiny!",
    "Aww, Pixel sounds adorable. How is she settling in?",
    "I work night shifts as a nurse, so I sleep during the day and Pixel keeps me company.",
    "Night shifts are hard. Be sure to rest.",
    "I also want to learn the guitar this year. My friend Sam offered to teach me.",
    "That's a great plan! Sam sounds like a good friend.",
]
TURNS_ZH = [
    "我昨天领养了一只灰色的小猫，叫皮克斯。",
    "皮克斯听起来好可爱！它适应得怎么样？",
    "我是护士，要上夜班，白天睡觉的时候皮克斯陪着我。",
    "夜班很辛苦，记得好好休息。",
    "我今年还想学吉他，我的朋友小林说要教我。",
    "好计划！小林真是个好朋友。",
]
# what a strong model writes: true, paraphrased, in the third person or to "you"
TRUE_EN = [
    "Amy adopted a grey kitten named Pixel.",
    "The user got a new cat, Pixel, who keeps her company while she sleeps during the day.",
    "You work night shifts as a nurse.",
    "She is a nurse who works at night.",
    "Amy wants to learn to play the guitar, and her friend Sam will teach her.",
    "On Tuesday, May 2, 2023, Amy told SiliconFriend about her new cat.",
    "Amy plans to take up guitar lessons this year.",
]
# the check's known limit: a paraphrase that shares no word with what was said ("a musical
# instrument" for "the guitar") needs an e5 cosine that invented sentences reach too; it is left
# out (a true sentence lost, never a false one kept)
TRUE_PROFILE_EN = [
    "Amy seems caring and responsible, and SiliconFriend should reply warmly and encourage her.",
    "Amy was excited about her new cat but a bit tired from work.",
]
# what the packaged model wrote (issue 23), and other things never said
FALSE_EN = [
    "During Tuesday, February 3rd in San Francisco, California, she shared with me about her adventures "
    "traveling across Europe this past year.",
    "She mentioned when she first met a local dog called a Polaris.",
    "Amy went to a café and watched the TV news with her mom.",
    "Amy loves hiking in the mountains on weekends.",
    "The Most Amazing Things Happen When Traveling Together: A Day with a Grey Cat #PuppyMommySantaCatchMe.",
    "Amy is getting married next month.",
    "She spent Christmas with her family baking cookies.",
    "Amy enjoys reading mystery novels.",
    "I'll summarize my response based solely on what was mentioned by Amy.",
    "Hi Amy, thank you so much for sharing your night shifts!",
]
TRUE_ZH = [
    "小美领养了一只叫皮克斯的灰色小猫。",
    "用户是一名护士，经常上夜班。",
    "你今年想学吉他，朋友小林会教你。",
    "小美从事医疗工作，晚上上班。",
]
FALSE_ZH = [
    "小美去了北京旅游，见到了她的妈妈。",
    "她和朋友张伟一起去看了电影《泰坦尼克号》。",
    "小美喜欢在周末爬山。",
    "小美下个月要结婚了。",
    "小美的姐姐住在加拿大。",
]


@pytest.fixture(scope="module")
def checker(e5_embedder):
    return GroundingChecker(e5_embedder)


def test_true_sentences_are_kept_and_invented_ones_dropped(checker):
    en = checker.sources(TURNS_EN, allowed=["Amy", "SiliconFriend", "Tuesday, May 2, 2023"])
    zh = checker.sources(TURNS_ZH, allowed=["小美", "SiliconFriend", "2023年5月2日（星期二）"])
    assert checker.check(" ".join(TRUE_EN), en).passed, checker.check(" ".join(TRUE_EN), en).dropped
    assert checker.check(" ".join(TRUE_PROFILE_EN), en, profile=True).passed
    assert checker.check("".join(TRUE_ZH), zh).passed
    assert checker.check("小美的心情很好，SiliconFriend应该温暖地回应她。", zh, profile=True).passed
    false_en, false_zh = checker.check(" ".join(FALSE_EN), en), checker.check("".join(FALSE_ZH), zh)
    assert len(false_en.verdicts) == len(FALSE_EN) and not false_en.kept
    assert len(false_zh.verdicts) == len(FALSE_ZH) and not false_zh.kept
    assert {"February", "San", "Francisco", "California", "Europe", "3"} <= set(false_en.verdicts[0].invented)
    assert false_zh.verdicts[1].invented == ["张伟", "泰坦尼克号"]
    # the names a reply may take from its prompt, and the ones it made up
    assert checker.unsupported_names("Pixel and Sam say hi from Paris!", en) == ["Paris"]
    assert checker.unsupported_names("Precious little one! Oh, I watched TV with Pixel.", en) == ["TV"]


def test_sentences_and_specifics():
    assert split_sentences("Amy adopted Pixel. She is tiny! 她很开心。真的吗？") == [
        "Amy adopted Pixel.",
        "She is tiny!",
        "她很开心。",
        "真的吗？",
    ]
    assert specifics("Feeling tired, Amy met Dr. Smith's dog Rex on May 3rd.") == ["Amy", "Smith", "Rex", "May", "3"]
    assert specifics("小美和张伟去了北京，花了300元。") == ["张伟", "北京", "300"]


@pytest.mark.parametrize(
    "lang,said,opening",
    [
        (
            "en",
            [
                "Hi!",
                "I adopted a grey cat called Pixel.",
                "What should I feed her?",
                "I adopted a grey cat called Pixel!",
            ],
            "You told me: “I adopted",
        ),
        ("zh", ["你好", "我领养了一只叫皮克斯的小猫。", "它该吃什么？"], "你告诉我：“我领养了"),
    ],
)
def test_the_extractive_summary_is_the_users_own_statements(lang, said, opening):
    text = extractive_summary(said, load_prompts(lang))
    assert text.startswith(opening) and text.count("“") == 1  # no greeting, no question, no repeat


class Scripted:
    """A backend that writes what the test gives it (a strong model's summaries, or invented ones),
    one text per call, and records the prompts."""

    name = model = "scripted"
    context_tokens = 4096

    def __init__(self, *texts: str):
        self.texts = list(texts)
        self.prompts: list[str] = []

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1

    def stream(self, messages, *, max_tokens=None):
        self.prompts.append(messages[-1].content)
        yield self.texts.pop(0)


def _day(bank, lines) -> None:
    for i, query in enumerate(lines[::2]):
        bank.add_turn("Amy", query, lines[2 * i + 1], datetime(2023, 5, 2, 19, i))


def test_a_strong_models_summaries_pass_as_written(bank):
    _day(bank, TURNS_EN)
    model = Scripted(" ".join(TRUE_EN[:3]), " ".join(TRUE_PROFILE_EN))
    report = Consolidator(bank, model).run("Amy", datetime(2023, 5, 3, 9))
    assert [w.path for w in report.written] == ["model", "model", "daily", "daily"] and report.dropped == 0
    events = bank.get_summary("Amy", Kind.DAILY_EVENTS, D1)
    assert events.text == " ".join(TRUE_EN[:3]) and path_of(events) == "model" and dropped_of(events) == 0
    assert len(model.prompts) == 2


def test_the_failure_is_named_then_grounded_sentences_kept_then_the_users_own_words(bank):
    _day(bank, TURNS_EN)
    invented = "Amy went to a café and watched the TV news with her mom. She spent Christmas in Paris."
    model = Scripted(
        invented,  # events: invented ...
        f"{TRUE_EN[0]} {TRUE_EN[2]} {TRUE_EN[4]} She flew to Rome.",  # ... then 3 of 4 grounded
        "Amy is a brave warrior princess from Narnia.",  # personality: invented twice
        "Amy fights dragons with her uncle Bob.",
    )
    report = Consolidator(bank, model).run("Amy", datetime(2023, 5, 3, 9))
    assert "TV, Christmas, Paris" in model.prompts[1]  # the retry names what was not said
    assert [(w.kind, w.path) for w in report.written] == [
        (Kind.DAILY_EVENTS, "kept"),
        (Kind.DAILY_PERSONALITY, "none"),
        (Kind.GLOBAL_EVENTS, "daily"),
    ]  # no profile: no global one either
    events = bank.get_summary("Amy", Kind.DAILY_EVENTS, D1)
    assert events.text == f"{TRUE_EN[0]} {TRUE_EN[2]} {TRUE_EN[4]}" and dropped_of(events) == 1
    profile = bank.get_summary("Amy", Kind.DAILY_PERSONALITY, D1)
    assert profile.text.startswith("Too little was said") and path_of(profile) == "none"
    assert bank.get_summary("Amy", Kind.GLOBAL_PERSONALITY) is None
    assert grounding_note({"path": "kept", "dropped": 1}, "en") == "1 unsupported sentence left out"
    assert grounding_note({"path": "kept", "dropped": 2}, "zh") == "略去了 2 句没有依据的话"
    assert "own words" in grounding_note({"path": "extractive", "dropped": 3}, "en")
    assert grounding_note({"path": "model", "dropped": 0}, "en") == "" == grounding_note(None, "zh")


def test_a_summary_invented_twice_becomes_the_users_own_words_in_chinese(bank):
    for i, query in enumerate(TURNS_ZH[::2]):
        bank.add_turn("小美", query, TURNS_ZH[2 * i + 1], datetime(2023, 5, 2, 19, i))
    model = Scripted("小美去了北京旅游。", "小美和张伟去了上海。", "".join(TRUE_ZH[:2]), "")
    report = Consolidator(bank, model).run("小美", datetime(2023, 5, 3, 9), lang="zh")
    assert [w.path for w in report.written][:2] == ["extractive", "model"]
    events = bank.get_summary("小美", Kind.DAILY_EVENTS, D1)
    assert events.text.startswith("你告诉我：“我昨天领养了一只灰色的小猫") and "北京" not in events.text


def test_eval_grounding_with_the_packaged_model(smollm2_backend, e5_embedder, tmp_path):
    """One user, one day, short texts: what the packaged model leaves names nothing not said."""
    from siliconfriend.bench.grounding_eval import evaluate_grounding, format_grounding

    history = [{"query": q, "response": r} for q, r in zip(TURNS_EN[::2], TURNS_EN[1::2])]
    bank_file = tmp_path / "bank.json"
    bank_file.write_text(json.dumps({"Amy": {"name": "Amy", "history": {"2023-05-02": history}}}), encoding="utf-8")
    result = evaluate_grounding(bank_file, e5_embedder, smollm2_backend, users=1, days=1, summary_tokens=12)
    assert result["stored_invented"] == 0
    assert result["summary"]["written"] == 1 and result["personality"]["written"] == 1
    assert sum(result["summary"]["paths"].values()) == 2  # the day's summary and the first global one
    assert 0 <= result["summary"]["grounded"] <= 1 and "grounded" in format_grounding(result)


def test_a_reply_that_names_what_nobody_said_is_marked_not_from_memory(bank, tmp_path):
    from siliconfriend.config import Settings
    from siliconfriend.core.companion import Companion
    from siliconfriend.web.chat import remembered_markdown, remembered_title, stored_remembered

    bank.add_turn("Amy", TURNS_EN[0], TURNS_EN[1], datetime(2023, 5, 2, 19))
    model = Scripted("Pixel and Sam say hi! Say hello to Bella in Paris, too.", "How is Pixel today?")
    companion = Companion(
        bank, model, settings=Settings(home=tmp_path), clock=lambda: datetime(2023, 5, 2, 20), history_turns=20
    )
    # Pixel is today's talk and Sam is in the message: from the prompt; Bella and Paris are not
    result = companion.respond("Amy", "My friend Sam will teach me the guitar.").collect()
    assert result.not_from_memory == ["Bella", "Paris"]
    entries = stored_remembered(bank.get("Amy", result.turn.id))
    panel = remembered_markdown(entries, "en")
    assert "Not from memory: Bella, Paris." in panel and "(0)" in remembered_title(entries, "en")
    assert "不是来自记忆：Bella, Paris" in remembered_markdown(entries, "zh")
    second = companion.respond("Amy", "Thanks!").collect()
    assert second.not_from_memory == [] and "not_from_memory" not in bank.get("Amy", second.turn.id).extra
