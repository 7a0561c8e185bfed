"""Prompt templates: strict loading and rendering, and fitting a turn into a token budget."""

from __future__ import annotations

from datetime import date

import pytest

from siliconfriend.core.prompting import (
    PROMPTS_DIR,
    TEMPLATE_NAMES,
    PromptError,
    PromptSet,
    Template,
    fit_block,
    fit_chat,
    load_prompts,
    truncate_tokens,
)


def words(text: str) -> int:
    return len(text.split())


META_FIELDS = {
    "trained_prompt",
    "companion_name",
    "user_name",
    "today",
    "persona",
    "global_events",
    "global_personality",
}


def meta_values(**over):
    values = dict(
        trained_prompt="",
        companion_name="SiliconFriend",
        user_name="Maya",
        today="Friday, May 3, 2024",
        persona="",
        global_events="Maya adopted a kitten called Pixel.",
        global_personality="Maya is kind.",
    )
    values.update(over)
    return values


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_template_loads_and_renders(lang):
    prompts = load_prompts(lang)
    assert prompts.templates["meta"].fields == META_FIELDS
    assert prompts.templates["daily_events"].fields == {"user_name", "companion_name", "date", "dialogue"}
    assert prompts.templates["daily_personality"].fields == {"user_name", "companion_name", "date", "dialogue"}
    for name in ("global_events", "global_personality"):
        assert prompts.templates[name].fields == {"user_name", "companion_name", "previous", "days"}
    assert prompts.templates["turn"].fields == {"user_name", "memories", "message"}
    text = prompts.render("meta", **meta_values())
    assert "Maya" in text and "Pixel" in text and "{" not in text
    assert set(TEMPLATE_NAMES) == set(prompts.templates)


def test_languages_share_their_phrases():
    en, zh = load_prompts("en"), load_prompts("zh")
    assert set(en.fragments) == set(zh.fragments)
    for key in set(en.fragments) - {"date"}:  # a date is written with other parts in each language
        assert en.fragments[key].fields == zh.fragments[key].fields, key


def test_dates_are_written_for_each_language():
    assert load_prompts("en").format_date(date(2024, 5, 1)) == "Wednesday, May 1, 2024"
    assert load_prompts("zh").format_date(date(2024, 5, 1)) == "2024年5月1日（星期三）"


def test_a_missing_variable_is_an_error():
    with pytest.raises(PromptError, match="needs .*global_events"):
        load_prompts("en").render("meta", **{k: v for k, v in meta_values().items() if k != "global_events"})
    with pytest.raises(PromptError, match="no 'nope'"):
        load_prompts("en").fragment("nope")
    with pytest.raises(PromptError, match="unknown template"):
        load_prompts("en").render("nope")


@pytest.mark.parametrize(
    "text, why",
    [
        ("{0}", "plain variable"),
        ("{a.b}", "plain variable"),
        ("{x:>5}", "plain variable"),
        ("{x!r}", "plain variable"),
        ("a { b", "literal braces"),
        ("a } b", "literal braces"),
    ],
)
def test_anything_but_a_plain_name_is_an_error(text, why):
    with pytest.raises(PromptError, match=why):
        Template.parse("t", text, "t.txt")


def test_values_are_not_templates_themselves():
    t = Template.parse("t", "say {x} {{literally}}", "t.txt")
    assert t.render(x="{y}") == "say {y} {literally}"


def test_missing_language_file_or_bad_fragment(tmp_path):
    with pytest.raises(PromptError, match="no prompts for language 'fr'; available: en, zh"):
        PromptSet("fr", PROMPTS_DIR)
    (tmp_path / "xx").mkdir()
    with pytest.raises(PromptError, match="meta.txt is missing"):
        PromptSet("xx", tmp_path)
    for name in TEMPLATE_NAMES:
        (tmp_path / "xx" / f"{name}.txt").write_text("{user_name}", encoding="utf-8")
    (tmp_path / "xx" / "fragments.txt").write_text("# comment\nno equals sign here\n", encoding="utf-8")
    with pytest.raises(PromptError, match=r"fragments.txt:2: expected 'key = text'"):
        PromptSet("xx", tmp_path)


# -- fitting --------------------------------------------------------------------------------------
MEMORIES = [f"- memory number {i} " + "word " * 20 for i in range(6)]  # best first
HISTORY = [(f"question {i} " + "word " * 15, f"answer {i} " + "word " * 15) for i in range(6)]  # oldest first


def test_everything_fits_when_there_is_room():
    fitted = fit_chat(load_prompts("en"), meta_values(), MEMORIES, HISTORY, "Hello there", budget=10_000, count=words)
    roles = [m.role for m in fitted.messages]
    assert roles == ["system"] + ["user", "assistant"] * 6 + ["user"]
    assert fitted.kept_memories == 6 and fitted.kept_history == 6 and not fitted.shortened
    # what stays the same all day first (the system message, today's talk); what changes each turn
    # (the memories retrieved for this message, the message) last
    assert not any(m in fitted.messages[0].content for m in MEMORIES)
    last = fitted.messages[-1].content
    assert all(m in last for m in MEMORIES) and last.endswith("\n\nHello there")
    assert fitted.messages[1].content == HISTORY[0][0]
    again = fit_chat(
        load_prompts("en"),
        meta_values(),
        MEMORIES[3:],
        HISTORY + [("Hello there", "Hi!")],
        "Bye",
        budget=10_000,
        count=words,
    )
    assert again.messages[: len(fitted.messages) - 1] == fitted.messages[:-1]


def test_oldest_history_and_lowest_memories_go_first_and_instructions_stay():
    prompts = load_prompts("en")
    full = fit_chat(prompts, meta_values(), MEMORIES, HISTORY, "Hello there", budget=10_000, count=words)
    budget = full.tokens - 300
    fitted = fit_chat(prompts, meta_values(), MEMORIES, HISTORY, "Hello there", budget=budget, count=words)
    assert fitted.tokens <= budget
    assert 0 < fitted.kept_memories < 6 and 0 < fitted.kept_history < 6
    system = fitted.messages[0].content
    kept = [m for m in MEMORIES if m in fitted.messages[-1].content]
    assert kept == MEMORIES[: fitted.kept_memories]  # the best ones stay
    contents = [m.content for m in fitted.messages[1:-1]]
    assert contents[0].startswith(f"question {6 - fitted.kept_history} ")  # the most recent ones stay
    assert contents[-1].startswith("answer 5 ")
    assert "Never invent a memory." in system and "Pixel" in system


def test_when_nothing_else_fits_the_summaries_then_the_message_are_shortened():
    prompts = load_prompts("en")
    long_summary = "Maya likes tea. " * 300
    fitted = fit_chat(
        prompts, meta_values(global_events=long_summary), MEMORIES, HISTORY, "Hello there", budget=400, count=words
    )
    assert fitted.kept_memories == 0 and fitted.kept_history == 0
    assert fitted.shortened == ["global_events"] and fitted.tokens <= 400
    assert "No memories about this yet." in fitted.messages[-1].content
    huge = "start " + "blah " * 30_000 + "the end"
    fitted = fit_chat(prompts, meta_values(), MEMORIES, HISTORY, huge, budget=500, count=words)
    assert fitted.shortened == ["message"] and fitted.tokens <= 500
    message = fitted.messages[-1].content.split("\n\n", 1)[1]
    assert message.startswith("start ") and message.endswith("the end") and "[...]" in message
    assert "Never invent a memory." in fitted.messages[0].content


def test_a_budget_smaller_than_the_instructions_is_an_error():
    with pytest.raises(PromptError, match="instructions alone take"):
        fit_chat(load_prompts("en"), meta_values(), [], [], "hi", budget=50, count=words)


def test_a_turn_without_reply_keeps_roles_alternating():
    fitted = fit_chat(
        load_prompts("en"), meta_values(), [], [("first", ""), ("second", "ok")], "third", budget=10_000, count=words
    )
    assert [(m.role, m.content.split("\n\n")[-1]) for m in fitted.messages[1:]] == [
        ("user", "second"),
        ("assistant", "ok"),
        ("user", "third"),
    ]
    assert fitted.messages[1].content == "first\n\nsecond"


def test_fit_block_cuts_every_item_evenly():
    items = [f"line {i} " + "word " * 100 for i in range(5)]
    text = fit_block(lambda block: f"Summarise:\n{block}\nDone.", items, budget=200, count=words)
    assert words(text) <= 200 and text.endswith("Done.")
    assert all(f"line {i} word" in text for i in range(5))
    assert fit_block(lambda b: f"S:{b}", ["a", "b"], budget=100, count=words) == "S:a\nb"


def test_truncate_tokens():
    text = " ".join(f"w{i}" for i in range(100))
    assert truncate_tokens(text, 200, words) == text
    cut = truncate_tokens(text, 20, words)
    assert words(cut) <= 20 and cut.startswith("w0 ") and cut.endswith("[...]")
    middle = truncate_tokens(text, 20, words, middle=True)
    assert middle.startswith("w0 ") and middle.endswith("w99") and "[...]" in middle
