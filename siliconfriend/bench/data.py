"""Synthetic, realistic dialogue for the benchmarks: English and Chinese, a fixed seed.

A user talks about their life (work, family, pets, travel, food, health, books, films, study,
hobbies) with named people, places and things drawn from large pools, so that the words spread
over the memories as in real conversations: a few very common, most rare. Replies run from one
sentence to several, as a companion's do. Some live messages name a day ("on May 4th", "前天"),
so the named-day path of retrieval is exercised. Everything comes from ``random.Random(seed)``:
the same seed gives the same dialogue on every machine.
"""

from __future__ import annotations

import random
from datetime import date, datetime, time, timedelta
from typing import Iterator

# -- English -----------------------------------------------------------------------------------
EN_PEOPLE = [
    "my sister Anna",
    "my brother Leo",
    "my mom",
    "my dad",
    "my grandmother",
    "my friend Priya",
    "my roommate Jake",
    "my boss Mr. Chen",
    "my colleague Sofia",
    "my neighbour Tom",
    "my cousin Mia",
    "my husband Daniel",
    "my best friend Olivia",
    "my teacher Mrs. Park",
    "my son Max",
    "my daughter Lily",
    "my uncle Omar",
    "my friend Hiro",
    "my coach Ben",
    "my aunt Rosa",
]
EN_PLACES = [
    "Xiamen",
    "Kyoto",
    "Lisbon",
    "the lake house",
    "Chengdu",
    "Barcelona",
    "the mountains near Denver",
    "Vancouver",
    "my hometown",
    "the night market",
    "Hangzhou",
    "Iceland",
    "the old library",
    "the seaside in Qingdao",
    "Seoul",
    "Gulangyu Island",
    "the museum downtown",
    "Paris",
    "Yunnan",
    "the hiking trail behind our house",
    "Singapore",
    "the farmers market",
    "Edinburgh",
    "Guilin",
]
EN_THINGS = {
    "pet": [
        "a cat named Miso",
        "a golden retriever called Biscuit",
        "two goldfish",
        "a parrot named Kiwi",
        "a rescue dog called Pepper",
        "a hamster named Bao",
        "a tortoise called Sheldon",
    ],
    "book": [
        "The Three-Body Problem",
        "Pride and Prejudice",
        "Sapiens",
        "One Hundred Years of Solitude",
        "Atomic Habits",
        "The Little Prince",
        "Norwegian Wood",
        "Dune",
        "The Kite Runner",
        "Educated",
    ],
    "film": [
        "Spirited Away",
        "Interstellar",
        "Parasite",
        "La La Land",
        "Coco",
        "Inception",
        "Everything Everywhere All at Once",
        "Your Name",
        "The Godfather",
        "Up",
    ],
    "food": [
        "hot pot",
        "dumplings",
        "sourdough bread",
        "mapo tofu",
        "ramen",
        "a lemon cake",
        "beef noodles",
        "sushi",
        "curry",
        "mooncakes",
        "pancakes",
        "tomato and egg stir-fry",
        "lasagna",
    ],
    "hobby": [
        "painting",
        "playing the piano",
        "tea tasting",
        "rock climbing",
        "photography",
        "knitting",
        "running",
        "chess",
        "gardening",
        "calligraphy",
        "yoga",
        "baking",
        "learning Spanish",
        "playing the guitar",
        "birdwatching",
        "swimming",
    ],
    "work": [
        "a presentation for the quarterly review",
        "a deadline on the new app release",
        "an interview for a data analyst job",
        "the night shifts at the hospital",
        "a tough client meeting",
        "my thesis proposal",
        "the marketing campaign",
        "a budget report",
        "the team reorganisation",
        "a job offer from a startup",
        "my exams in organic chemistry",
    ],
    "health": [
        "a headache that won't go away",
        "trouble sleeping",
        "a sprained ankle",
        "a cold",
        "back pain from sitting all day",
        "feeling anxious before meetings",
        "a new diet",
        "my knee surgery recovery",
        "seasonal allergies",
    ],
}
EN_FEELINGS = [
    "really happy",
    "a bit stressed",
    "exhausted",
    "excited",
    "nervous",
    "proud",
    "lonely",
    "relaxed",
    "frustrated",
    "grateful",
    "worried",
    "curious",
    "sad",
    "hopeful",
]
EN_TIMES = [
    "this morning",
    "last weekend",
    "yesterday",
    "tonight",
    "after work",
    "on Saturday",
    "during lunch",
    "last month",
    "over the holiday",
    "this afternoon",
]

EN_STATEMENTS = [
    "I went to {place} {when} with {person}, and honestly I felt {feeling} the whole time.",
    "I've been {feeling} lately because of {work}.",
    "{person_cap} and I tried to make {food} {when}; it turned out better than expected.",
    "I finally finished reading {book}. Have you read it?",
    "We watched {film} {when}. {person_cap} cried at the end.",
    "I adopted {pet} {when}!",
    "I started {hobby} {when} and I think I really like it.",
    "I've had {health} for a few days, it's getting annoying.",
    "Do you have any good book recommendations? I liked {book} a lot.",
    "Can you suggest something fun to do in {place}? {person_cap} is visiting next week.",
    "I'm {feeling} about {work}. Any advice?",
    "{person_cap} called me {when} and we talked for two hours about {hobby}.",
    "My favourite food is {food}, especially the way {person} makes it.",
    "I keep thinking about moving to {place}. Is that crazy?",
    "Guess what, {person} got a new job and we celebrated with {food}.",
    "I'm planning a trip to {place} for {hobby}. What should I pack?",
    "I've been trying {hobby} to deal with {health}.",
    "Today was long. {work_cap} took everything out of me.",
    "I lost my keys {when} and found them in the fridge, can you believe it?",
    "I want to learn more about {hobby}. Where should I start?",
]
EN_REPLIES = [
    "That sounds wonderful!",
    "I'm sorry you're going through that.",
    "How exciting!",
    "It makes sense that you feel that way.",
    "Thank you for telling me.",
    "That's a lovely memory.",
    "I'm really glad you shared this with me.",
    "Oh no, that must have been hard.",
]
EN_FOLLOW = [
    "{place} is famous for its food and old streets, and spring is a great time to visit.",
    "Many people find that {hobby} helps them relax after a long day.",
    "If you liked {book}, you might also enjoy {book2}; it has a similar feeling.",
    "For {health}, rest, water and a regular routine often help, and a doctor can check if it lasts.",
    "When you feel {feeling}, it can help to write down what is on your mind before bed.",
    "Breaking {work} into small steps and celebrating each one can make it feel lighter.",
    "{film} is a beautiful choice; the music alone is worth it.",
    "Cooking {food} together is such a nice way to spend time with family.",
    "Taking care of {pet} is a big responsibility, but it brings a lot of joy.",
    "You could start with a beginner class, or a short video each day, and see how it feels.",
    "I remember you mentioned {hobby} before; it seems to really matter to you.",
]
EN_QUESTIONS = [
    "What did you enjoy the most?",
    "How are you feeling about it now?",
    "Would you like some tips?",
    "Do you want to tell me more?",
    "What happened next?",
    "Is there anything I can do to help?",
    "How did {person} react?",
]
EN_PROBES = [
    "Do you remember what I told you about {place}?",
    "What book did you recommend to me?",
    "What was the name of my pet?",
    "How was I feeling about {work}?",
    "What do I like to eat?",
    "What did {person} and I do {when}?",
    "Remind me what hobby I started.",
    "What did we talk about on {month} {day}?",
    "What did I tell you yesterday?",
    "Any ideas for this weekend? I'm feeling {feeling}.",
    "I'm back from {place}! It was amazing.",
    "Can you recommend a film like {film}?",
    "My {health} is better today.",
]
EN_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]

# -- Chinese -----------------------------------------------------------------------------------
ZH_PEOPLE = [
    "我妹妹小雨",
    "我哥哥阿明",
    "我妈妈",
    "我爸爸",
    "我奶奶",
    "我的朋友小林",
    "我室友阿杰",
    "我的老板陈总",
    "我同事苏菲",
    "邻居王叔叔",
    "我表妹米娅",
    "我老公大伟",
    "我闺蜜晓晓",
    "我的老师朴老师",
    "我儿子豆豆",
    "我女儿莉莉",
    "我舅舅",
    "我的朋友浩然",
    "我的教练",
    "我姑姑",
]
ZH_PLACES = [
    "厦门",
    "京都",
    "成都",
    "鼓浪屿",
    "杭州西湖",
    "青岛海边",
    "云南大理",
    "桂林",
    "老家",
    "夜市",
    "首尔",
    "北京故宫",
    "上海外滩",
    "西安",
    "三亚",
    "丽江古城",
    "香港",
    "苏州园林",
    "重庆",
    "哈尔滨",
]
ZH_THINGS = {
    "pet": ["一只叫米索的猫", "一只金毛叫饼干", "两条金鱼", "一只叫奇异果的鹦鹉", "一只叫胡椒的小狗", "一只仓鼠叫包子"],
    "book": [
        "《三体》",
        "《活着》",
        "《人类简史》",
        "《百年孤独》",
        "《原子习惯》",
        "《小王子》",
        "《挪威的森林》",
        "《平凡的世界》",
        "《围城》",
        "《追风筝的人》",
    ],
    "film": [
        "《千与千寻》",
        "《星际穿越》",
        "《寄生虫》",
        "《你的名字》",
        "《寻梦环游记》",
        "《霸王别姬》",
        "《流浪地球》",
        "《哪吒》",
        "《盗梦空间》",
    ],
    "food": [
        "火锅",
        "饺子",
        "麻婆豆腐",
        "拉面",
        "柠檬蛋糕",
        "牛肉面",
        "寿司",
        "月饼",
        "番茄炒蛋",
        "小笼包",
        "烤鸭",
        "酸菜鱼",
        "螺蛳粉",
    ],
    "hobby": [
        "画画",
        "弹钢琴",
        "品茶",
        "攀岩",
        "摄影",
        "织毛衣",
        "跑步",
        "下象棋",
        "种花",
        "书法",
        "瑜伽",
        "烘焙",
        "学西班牙语",
        "弹吉他",
        "游泳",
        "钓鱼",
    ],
    "work": [
        "季度汇报的演讲",
        "新版本上线的截止日期",
        "数据分析师的面试",
        "医院的夜班",
        "一个难缠的客户",
        "毕业论文开题",
        "市场推广活动",
        "预算报告",
        "部门调整",
        "一家创业公司的offer",
        "有机化学考试",
    ],
    "health": [
        "头疼一直不好",
        "失眠",
        "脚踝扭伤",
        "感冒",
        "久坐腰疼",
        "开会前很焦虑",
        "在节食",
        "膝盖手术后的恢复",
        "过敏",
    ],
}
ZH_FEELINGS = [
    "特别开心",
    "有点压力",
    "很累",
    "很兴奋",
    "紧张",
    "很自豪",
    "孤单",
    "放松",
    "烦躁",
    "很感激",
    "担心",
    "好奇",
    "难过",
    "充满希望",
]
ZH_TIMES = ["今天早上", "上周末", "昨天", "今晚", "下班后", "周六", "午饭时", "上个月", "放假的时候", "今天下午"]

ZH_STATEMENTS = [
    "我{when}和{person}去了{place}，整个过程都觉得{feeling}。",
    "最近因为{work}，我{feeling}。",
    "{person}和我{when}一起做了{food}，比想象的好吃。",
    "我终于看完了{book}，你读过吗？",
    "我们{when}看了{film}，{person}看哭了。",
    "我{when}领养了{pet}！",
    "我{when}开始学{hobby}，感觉挺喜欢的。",
    "我这几天{health}，有点烦。",
    "你有什么好书推荐吗？我很喜欢{book}。",
    "{place}有什么好玩的？{person}下周要来看我。",
    "我对{work}感到{feeling}，你有什么建议吗？",
    "{person}{when}给我打电话，我们聊了两个小时{hobby}。",
    "我最喜欢吃{food}，特别是{person}做的。",
    "我一直在想要不要搬去{place}，是不是很疯狂？",
    "告诉你，{person}找到新工作了，我们吃{food}庆祝。",
    "我打算去{place}{hobby}，要带些什么？",
    "为了缓解{health}，我开始{hobby}。",
    "今天好漫长，{work}把我累坏了。",
    "我想多了解一下{hobby}，应该从哪里开始？",
]
ZH_REPLIES = [
    "听起来真棒！",
    "很抱歉你经历了这些。",
    "太令人兴奋了！",
    "你这样想很正常。",
    "谢谢你告诉我。",
    "这是很美好的回忆。",
    "很高兴你愿意和我分享。",
    "哎呀，那一定很辛苦。",
]
ZH_FOLLOW = [
    "{place}以美食和老街闻名，春天去特别合适。",
    "很多人发现{hobby}能帮助他们在忙碌的一天后放松。",
    "如果你喜欢{book}，也许也会喜欢{book2}，它们的感觉很像。",
    "{health}的话，多休息、多喝水、规律作息会有帮助，如果持续要去看医生。",
    "感到{feeling}的时候，睡前把心里的事写下来会好一些。",
    "把{work}拆成小步骤，每完成一步就奖励一下自己，会轻松很多。",
    "{film}是个很好的选择，光是配乐就值得一看。",
    "和家人一起做{food}是很温馨的事情。",
    "照顾{pet}是一份责任，但也会带来很多快乐。",
    "可以先报一个入门班，或者每天看一个短视频，慢慢来。",
    "我记得你之前提到过{hobby}，看得出来你很在意它。",
]
ZH_QUESTIONS = [
    "你最喜欢哪一部分？",
    "你现在感觉怎么样？",
    "需要我给你一些建议吗？",
    "愿意多和我说说吗？",
    "后来怎么样了？",
    "有什么我能帮你的吗？",
    "{person}是什么反应？",
]
ZH_PROBES = [
    "你还记得我说过的{place}吗？",
    "你给我推荐过什么书？",
    "我的宠物叫什么名字？",
    "我对{work}是什么感觉？",
    "我喜欢吃什么？",
    "{person}和我{when}做了什么？",
    "提醒我一下，我开始了什么爱好？",
    "{month}月{day}日我们聊了什么？",
    "我前天跟你说了什么？",
    "这个周末有什么建议吗？我{feeling}。",
    "我从{place}回来啦！太棒了。",
    "能推荐一部像{film}的电影吗？",
    "我的{health}今天好多了。",
]


class DialogueGenerator:
    """Dialogue turns, live messages and daily summaries; ``zh_share`` of them in Chinese."""

    def __init__(self, seed: int = 0, zh_share: float = 0.5):
        self.rng = random.Random(seed)
        self.zh_share = zh_share

    def lang(self) -> str:
        return "zh" if self.rng.random() < self.zh_share else "en"

    def _slots(self, lang: str) -> dict[str, str]:
        r = self.rng
        things = ZH_THINGS if lang == "zh" else EN_THINGS
        person = r.choice(ZH_PEOPLE if lang == "zh" else EN_PEOPLE)
        books = r.sample(things["book"], 2)
        work = r.choice(things["work"])
        return {
            "person": person,
            "person_cap": person[:1].upper() + person[1:],
            "place": r.choice(ZH_PLACES if lang == "zh" else EN_PLACES),
            "when": r.choice(ZH_TIMES if lang == "zh" else EN_TIMES),
            "feeling": r.choice(ZH_FEELINGS if lang == "zh" else EN_FEELINGS),
            "book": books[0],
            "book2": books[1],
            "film": r.choice(things["film"]),
            "food": r.choice(things["food"]),
            "hobby": r.choice(things["hobby"]),
            "pet": r.choice(things["pet"]),
            "health": r.choice(things["health"]),
            "work": work,
            "work_cap": work[:1].upper() + work[1:],
            "month": str(r.randint(1, 12)) if lang == "zh" else r.choice(EN_MONTHS),
            "day": str(r.randint(1, 28)),
        }

    def turn(self, lang: str | None = None) -> tuple[str, str]:
        """One exchange (the user's words, the companion's reply); replies of 1 to 5 sentences."""
        lang = lang or self.lang()
        r, s = self.rng, self._slots(lang)
        zh = lang == "zh"
        first = r.choice(ZH_STATEMENTS if zh else EN_STATEMENTS)
        query = first.format(**s)
        if r.random() < 0.3:  # a second sentence now and then
            query += ("" if zh else " ") + r.choice(ZH_STATEMENTS if zh else EN_STATEMENTS).format(**self._slots(lang))
        parts = [r.choice(ZH_REPLIES if zh else EN_REPLIES)]
        for _ in range(r.choice((0, 1, 1, 2, 2, 3))):
            parts.append(r.choice(ZH_FOLLOW if zh else EN_FOLLOW).format(**s))
        if r.random() < 0.6:
            parts.append(r.choice(ZH_QUESTIONS if zh else EN_QUESTIONS).format(**s))
        return query, ("" if zh else " ").join(parts)

    def message(self, lang: str | None = None) -> str:
        """A live user message: a new statement or a question about the past (some name a day)."""
        lang = lang or self.lang()
        if self.rng.random() < 0.5:
            return self.turn(lang)[0]
        return self.rng.choice(ZH_PROBES if lang == "zh" else EN_PROBES).format(**self._slots(lang))

    def reply(self, lang: str) -> str:
        return self.turn(lang)[1]

    def summary(self, turns: list[tuple[str, str]], lang: str) -> str:
        """A daily event summary in the style of the LLM's: the day's first sentences, condensed."""
        said = [q.split("。")[0].split(". ")[0] for q, _ in turns[:4]]
        if lang == "zh":
            return "用户今天聊到：" + "；".join(said) + "。AI给予了鼓励和建议。"
        return "The user talked about: " + "; ".join(said) + ". The AI listened and offered suggestions."

    def personality(self, lang: str) -> str:
        s = self._slots(lang)
        if lang == "zh":
            return f"用户今天{s['feeling']}，喜欢{s['hobby']}。回复策略：多倾听，给予温暖的鼓励。"
        return (
            f"The user seemed {s['feeling']} and keeps coming back to {s['hobby']}. "
            "Reply strategy: listen first, then encourage warmly."
        )

    def days(
        self, n_memories: int, start: date, per_day: tuple[int, int] = (8, 30), summaries: bool = True
    ) -> Iterator[tuple[date, str, list[tuple[str, str]], str, str]]:
        """Days of history until ``n_memories`` memories (turns, plus two summaries a day when
        ``summaries``): (day, language, turns, daily event summary, daily personality)."""
        made, day = 0, start
        while made < n_memories:
            lang = self.lang()
            count = min(self.rng.randint(*per_day), n_memories - made)
            turns = [self.turn(lang) for _ in range(count)]
            made += count
            events = personality = ""
            if summaries and n_memories - made >= 2:
                events, personality = self.summary(turns, lang), self.personality(lang)
                made += 2
            yield day, lang, turns, events, personality
            day += timedelta(days=self.rng.choice((1, 1, 1, 2, 3)))

    def memorybank_file(self, users: int, turns_per_user: int, start: date = date(2023, 3, 1)) -> dict:
        """A file in the original MemoryBank format (what ``import-memorybank`` reads)."""
        out = {}
        for u in range(users):
            history: dict[str, list[dict]] = {}
            summary: dict[str, dict] = {}
            personality: dict[str, str] = {}
            for day, lang, turns, _events, _persona in self.days(turns_per_user, start, summaries=False):
                history[day.isoformat()] = [{"query": q, "response": a} for q, a in turns]
                summary[day.isoformat()] = {"content": self.summary(turns, lang)}
                personality[day.isoformat()] = self.personality(lang)
            out[f"user{u:03d}"] = {
                "name": f"user{u:03d}",
                "history": history,
                "summary": summary,
                "personality": personality,
                "overall_history": "",
                "overall_personality": "",
            }
        return out


def turn_times(day: date, count: int) -> list[datetime]:
    """Times for ``count`` turns on ``day``, a few minutes apart from the evening on."""
    start = datetime.combine(day, time(19, 0))
    return [start + timedelta(minutes=3 * i) for i in range(count)]
