"""No false memories: the grounding check of what the companion writes about a person, the day
rollover's way through it (written again with the failure named, grounded sentences kept, the
user's own words, no profile), the memory page's note, and ``eval grounding`` with the packaged
SmolLM2."""

from __future__ import annotations

import json
import os
from datetime import date, datetime
from pathlib import Path

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
# what the packaged model wrote, and other things never said
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
    # a true sentence cut mid-character (bytes that make no character), though a garbled reply
    # among the sources holds the same broken character
    broken = checker.sources([*TURNS_ZH, "技手武行人拨几个青线子, \ufffdядка"], allowed=["小美"])
    cut = checker.check(TRUE_ZH[0][:-2] + "\ufffd", broken)
    assert not cut.kept and cut.verdicts[0].invented[-1] == "\ufffd"
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
    # a list's numbers are not sentences; "I’ll" (curly) is the writer, not a name; jieba's
    # proper-noun tag on a word about the talk ("聊天" nz) does not make it a name
    assert split_sentences("1. Amy adopted Pixel. **2.** She is tiny.\n3) 她很开心。") == [
        "Amy adopted Pixel.",
        "She is tiny.",
        "她很开心。",
    ]
    assert specifics("I’ll say Amy met Rex.") == ["Amy", "Rex"] and specifics("小美第一次和AI伴侣聊天。") == ["小美"]


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
        (Kind.DAILY_PERSONALITY, "extractive"),
        (Kind.GLOBAL_EVENTS, "daily"),
        (Kind.GLOBAL_PERSONALITY, "daily"),
    ]  # no grounded profile: Amy's own words about herself instead, and so a global one
    events = bank.get_summary("Amy", Kind.DAILY_EVENTS, D1)
    assert events.text == f"{TRUE_EN[0]} {TRUE_EN[2]} {TRUE_EN[4]}" and dropped_of(events) == 1
    profile = bank.get_summary("Amy", Kind.DAILY_PERSONALITY, D1)
    assert profile.text.startswith("What Amy said about themselves: “I adopted a grey cat called Pixel")
    assert "night shifts as a nurse" in profile.text and path_of(profile) == "extractive"
    assert "Narnia" not in profile.text and "dragons" not in profile.text
    assert "night shifts as a nurse" in bank.get_summary("Amy", Kind.GLOBAL_PERSONALITY).text
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


def test_retrieval_as_used_with_the_summaries_the_packaged_model_writes(smollm2_backend, e5_embedder, tmp_path):
    """`eval retrieval --as-used --backend`: the days lived with the summaries the backend writes
    (checked, and the user's own words where the check fails) find the turns as well as without."""
    from siliconfriend.bench.retrieval_eval import evaluate_label_sets

    history = {"2023-05-02": [{"query": q, "response": r} for q, r in zip(TURNS_EN[::2], TURNS_EN[1::2])]}
    bank_file = tmp_path / "bank.json"
    bank_file.write_text(json.dumps({"Amy": {"name": "Amy", "history": history}}), encoding="utf-8")
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps({"bank_user": "Amy", "question": q, "evidence": [{"date": d, "turn": t}]})
            for q, d, t in [
                ("What is my cat called?", "2023-05-02", 0),
                ("Who will teach me an instrument?", "2023-05-02", 2),
                ("What is my job?", "2023-05-02", 1),
            ]
        ),
        encoding="utf-8",
    )
    common = dict(as_used=True, users=1, days=1)
    (without,) = evaluate_label_sets(bank_file, [labels], e5_embedder, **common)
    (written,) = evaluate_label_sets(
        bank_file, [labels], e5_embedder, backend=smollm2_backend, summary_tokens=12, **common
    )
    assert written["n"] == without["n"] == 3
    assert written["recall@2"] >= without["recall@2"] and written["recall@5"] >= 0.95 * without["recall@5"]
    ends = written["summaries"]
    assert sum(n for k, n in ends.items() if k.startswith("daily_events")) == 1, ends  # the day was summarised


# the shared data sit beside the checkout; SILICONFRIEND_SHARED_DATA names them elsewhere
SHARED = (
    Path(os.environ.get("SILICONFRIEND_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
    / "memorybank_eval"
)
# what a strong model writes of real bank days (written by hand, as the paper's ChatGPT summaries
# are: paraphrased, third person, the companion's advice): (lang, user, day) -> (events, profile)
HUMAN_SUMMARIES = {
    ("en", "Emily", "2023-04-27"): (
        "Emily introduced herself on our first day. She enjoys painting, playing the piano and tea tasting, and asked for book recommendations. She prefers artistic works such as The Great Gatsby, so the AI companion recommended The Little Prince and Pride and Prejudice, which she plans to read.",
        "Emily is artistic, with a love of painting, piano and tea. She appreciates charming literature full of emotion. The AI companion should keep suggesting artistic books and ask what she thought of them.",
    ),
    ("en", "Emily", "2023-04-28"): (
        "Emily took a walk in Green Meadow Park, where she saw a beautiful blooming cherry blossom and a cute squirrel, and she recommended the park. She is reading a love novel called Silent Separation. She finds the main character's change from melancholy to optimism and confidence the most interesting part.",
        "Emily was cheerful and eager to share the beauty she saw. She is emotional and enjoys stories about love.",
    ),
    ("en", "Frank", "2023-04-27"): (
        "Frank introduced himself in our first chat. His hobbies are hiking, long-distance running, basketball, military history research and rock climbing. Today he ran for an hour in a nearby park, and he likes running with music or friends. He was unsure which rock climbing equipment to choose, and the AI companion suggested reviews on rock climbing forums or trying gear in a store.",
        "Frank is active and energetic, with many hobbies in sports and history. Music and friends keep him motivated, and he appreciates practical advice.",
    ),
    ("en", "Frank", "2023-04-28"): (
        "Frank has been studying world history but finds it hard, and asked how to learn more efficiently. He reads the textbook, watches study videos and discusses with his teachers and classmates; the AI companion suggested history podcasts and games like Civilization. Frank is also learning to cook and made Kung Pao Chicken yesterday. He recommended the CCTV show Home Cooking and food bloggers on TikTok.",
        "Frank is curious and eager to improve, and open to advice about learning. He enjoys cooking as a pleasure and a challenge, and hopes to stay in touch.",
    ),
    ("zh", "张曼婷", "2023-04-27"): (
        "张曼婷第一次和AI伴侣聊天，做了自我介绍。她喜欢绘画、弹钢琴和品茶，想找一些书来读。她偏爱像《了不起的盖茨比》这样的文艺作品，AI伴侣推荐了《小王子》和《傲慢与偏见》，她说会去看看。",
        "张曼婷热爱艺术，喜欢充满情调的文艺作品。AI伴侣可以多和她聊书和艺术。",
    ),
    ("zh", "张曼婷", "2023-04-28"): (
        "张曼婷今天去绿禾公园散步，看到了开得很美的樱花和一只可爱的松鼠，还推荐AI伴侣去走走。她最近在读爱情小说《何以笙箫默》，觉得主角从消沉变得乐观自信的情感变化最有意思。",
        "张曼婷心情愉快，乐于分享生活中的美好。她情感细腻，喜欢爱情小说。",
    ),
    ("zh", "王峰", "2023-04-27"): (
        "王峰第一次和AI伴侣聊天。他喜欢徒步、长跑、打篮球、研究军事史和攀岩。今天他在附近的公园慢跑了一个小时，觉得很舒畅，平时喜欢听音乐或和朋友一起跑步。他不知道该选哪种攀岩装备，AI伴侣建议他看攀岩论坛的评测或去装备店试用。",
        "王峰热爱运动，兴趣广泛，精力充沛。和朋友一起运动让他更有动力，他也乐于接受实用的建议。",
    ),
    ("zh", "王峰", "2023-04-28"): (
        "王峰最近在学习世界历史，但觉得难懂，想提高学习效率。他会看历史教材和学习视频，也和老师同学讨论；AI伴侣建议他听世界历史播客、玩《文明》这样的游戏。他还在学做菜，昨天晚上做了一道宫保鸡丁，并推荐了中央电视台的《回家吃饭》和抖音上的美食博主。",
        "王峰好学，愿意听取建议。他把做菜当作乐趣和挑战，希望和AI伴侣继续保持联系。",
    ),
}


class _Strong(Scripted):
    """The day's events or its profile, by what the prompt asks for (the same text when asked again)."""

    def __init__(self, events: str, profile: str, lang: str):
        super().__init__(events, profile)
        self.asks_profile = (
            load_prompts(lang)
            .render("daily_personality", user_name="", companion_name="", date="", dialogue="")
            .strip()
            .splitlines()[-1][:12]
        )

    def stream(self, messages, *, max_tokens=None):
        self.prompts.append(messages[-1].content)
        yield self.texts[1] if self.asks_profile in messages[-1].content else self.texts[0]


def test_well_written_summaries_of_real_bank_days_pass(checker, e5_embedder, tmp_path):
    """The rollover's check on summaries a strong model would write of the MemoryBank eval banks'
    days (two users x two days, en and zh; given to the Consolidator as its backend's texts):
    nothing is taken for a name that was not said, and what is left out is only the check's known
    limit (a paraphrase sharing no word with what was said)."""
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores

    if not SHARED.exists():
        pytest.skip("shared evaluation data not present")
    banks = {
        "en": json.loads((SHARED / "en" / "memory_bank_en.json").read_text(encoding="utf-8")),
        "zh": json.loads((SHARED / "cn" / "memory_bank_cn.json").read_text(encoding="utf-8")),
    }
    kept = {"en": 0, "zh": 0}
    total = {"en": 0, "zh": 0}
    for n, ((lang, user, day), (events, profile)) in enumerate(HUMAN_SUMMARIES.items()):
        turns = banks[lang][next(k for k in banks[lang] if k.strip() == user)]["history"][day]
        bank = MemoryBank(SqliteStores(tmp_path / f"home{n}"), e5_embedder)
        try:
            when = datetime.combine(date.fromisoformat(day), datetime.min.time()).replace(hour=20)
            bank.add_turns(user, [(t["query"], t["response"], when.replace(minute=i)) for i, t in enumerate(turns)])
            written = Consolidator(bank, _Strong(events, profile, lang), checker=checker).run(
                user, when.replace(day=when.day + 1, hour=9), lang=lang
            )
        finally:
            bank.close()
        for w in written.written[:2]:
            first = w.attempts[0]
            assert not first.invented and not any(v.voice for v in first.verdicts), (user, day, first.dropped)
            kept[lang] += len(first.kept)
            total[lang] += len(first.verdicts)
    assert kept["en"] == total["en"] == 24 and total["zh"] == 21 and kept["zh"] >= 20, (kept, total)
    sources = checker.sources(
        [t["query"] for t in turns],
        allowed=[user],
        task=load_prompts("zh").render(
            "daily_personality", user_name=user, companion_name="SiliconFriend", date=day, dialogue=""
        ),
    )
    # what SmolLM2 wrote for a Chinese profile: the request said back, nothing about the person
    echo = checker.check("你可以在这里说明，王峰是什么样的人！", sources, profile=True)
    assert user == "王峰" and echo.verdicts[0].voice and not echo.kept


def test_a_profile_rests_on_the_users_words_not_on_the_companions_reply(bank):
    """A small model's reply is stored with the turn; a profile that repeats it says nothing of the
    person (its sentences about how the companion should reply may still draw on the whole talk)."""
    bank.add_turn(
        "Amy", TURNS_EN[0], "Here is the Law of the Fourth Technique by Professor Vane.", datetime(2023, 5, 2, 19)
    )
    bank.add_turn("Amy", TURNS_EN[2], TURNS_EN[3], datetime(2023, 5, 2, 19, 5))
    invented = "Amy follows the Law of the Fourth Technique of Professor Vane."
    model = Scripted(TRUE_EN[0], invented, invented)
    report = Consolidator(bank, model).run("Amy", datetime(2023, 5, 3, 9))
    assert [(w.kind, w.path) for w in report.written][:2] == [
        (Kind.DAILY_EVENTS, "model"),
        (Kind.DAILY_PERSONALITY, "extractive"),  # her own words instead
    ]
    assert set(report.written[1].attempts[0].invented) >= {"Law", "Fourth", "Technique", "Vane"}
    assert "Vane" not in report.written[1].text and "night shifts as a nurse" in report.written[1].text
    for i, query in enumerate(TURNS_EN[::2]):
        bank.add_turn("Bo", query, TURNS_EN[2 * i + 1], datetime(2023, 5, 2, 19, i))
    strategy = (
        "Bo works night shifts as a nurse. SiliconFriend should say that night shifts are hard and remind Bo to rest."
    )
    again = Consolidator(bank, Scripted("Bo adopted a grey kitten named Pixel.", strategy)).run(
        "Bo", datetime(2023, 5, 3, 9)
    )
    assert [w.path for w in again.written][:2] == ["model", "model"], [w.attempts[0].dropped for w in again.written]
