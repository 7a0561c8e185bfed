"""The chat and memory handlers as the page calls them, without a browser (``ChatHandlers``,
``MemoryHandlers``), with the real companion (e5-small, SmolLM2 with short replies): nothing
typed is lost, the panel says what was used, one refusal leaves the page alone, the search shows
only real matches, Chinese mode reaches the plot."""

from __future__ import annotations

import copy
import io
import warnings
from datetime import timedelta

import pytest

from siliconfriend.core.companion import HISTORY_CHARS
from siliconfriend.web.chat import ChatHandlers, stored_remembered
from siliconfriend.web.memory_page import MemoryHandlers, grounding_note
from siliconfriend.web.plot import cjk_font

FILTERS = ("all", "all", "all", "", True)


def run(gen) -> list:
    """Every value a handler yields, as the page received it at the time (a handler updates its
    list of messages in place between yields)."""
    return [copy.deepcopy(out) for out in gen]


def skipped(values) -> bool:
    return all(isinstance(v, dict) and v.get("__type__") == "update" and len(v) == 1 for v in values)


@pytest.fixture
def amy(web_service):
    return web_service, web_service.signup("amy", "amy-password").token


def test_too_long_and_empty_messages_are_refused_and_kept(amy):
    service, token = amy
    chat = ChatHandlers(service)
    for text in ("x" * 100_000, "   \n  "):
        (out,) = run(chat.send(token, text, {}))
        assert skipped(out)  # nothing changes on screen: the text stays in the box
    with pytest.raises(ValueError, match="100,000 characters.*split it"):
        service.check_message("x" * 100_000)
    assert service.memories(token) == [] and not service.companion.backend.calls
    assert "⚠️" in chat.count(token, "x" * 100_000) and "20,000" in chat.count(token, "hi")


def test_same_day_recall_shows_todays_lines_and_a_long_message_stops_weighing(amy):
    service, token = amy
    chat = ChatHandlers(service)
    backend = service.companion.backend
    long = ("My dog is called Rex. " + "And then we walked on and on. " * 700)[:19_000]
    # the long turn as an earlier reply stored it (its own reply is not what is tested here)
    service.bank.add_turn("amy", long, "What a walk!", service.now(), extra={"used": [], "today": []})
    outs = run(chat.send(token, "What is my dog's name? <img src=x>", {}))
    msgs, _, panel, _, view = outs[-1]
    assert "Today's conversation" in panel and "My dog is called Rex" in panel
    assert "today's conversation: 1" in msgs[-2]["metadata"]["title"]
    assert msgs[-3]["content"] == "What is my dog's name? &lt;img src=x&gt;"  # shown literally
    prompt = "\n".join(m.content for m in backend.calls[-1])
    assert "My dog is called Rex" in prompt and len(prompt) < 19_000 // 4 + 4 * HISTORY_CHARS
    # after a reload the restored turns keep their fold-outs, today's lines included
    restored = chat.restore(token)[0]
    titles = [m["metadata"]["title"] for m in restored if m.get("metadata")]
    assert len(titles) == 2 and "today's conversation: 1" in titles[1]
    turn = service.today(token)[-1]
    assert stored_remembered(turn)[-1]["kind"] == "today"


def test_the_waiting_reply_shows_its_place(two_users):
    service, alice, bob = two_users
    first = service.respond(alice, "Hello, I am first.")  # registered, not yet generating
    outs = run(ChatHandlers(service).send(bob, "And I am second.", {}))
    shown = [str(o[0][-1]["content"]) for o in outs if isinstance(o[0], list)]
    assert any("Waiting for the model: 1" in s for s in shown), shown
    assert service.ahead(bob) == 0  # bob's reply finished
    first.collect()
    service.finished(alice, first)
    assert service.ahead(alice) == 0


@pytest.fixture
def two_users(web_service):
    return (
        web_service,
        web_service.signup("alice", "alice-password").token,
        web_service.signup("bob", "bob-password").token,
    )


def test_search_shows_only_real_matches_and_refusals_leave_the_page(amy, web_clock):
    service, token = amy
    chat, page = ChatHandlers(service), MemoryHandlers(service)
    for text in ("My cat is called Pixel and she loves tuna.", "I planted tomatoes in the garden.", "Hello there."):
        run(chat.send(token, text, {}))
    web_clock.now += timedelta(days=1)
    for query in ("zzqxj", "quantum chromodynamics"):
        out = page.search(token, "all", "all", "all", query, True)
        assert out[1]["data"] == [] and out[-1] == "No memories match."
    out = page.search(token, "all", "all", "all", "Pixel", True)
    assert len(out[1]["data"]) == 1 and "Pixel" in out[1]["data"][0][8] and out[-1] == ""
    out = page.search(token, "all", "all", "all", "kitten", True)  # by meaning
    assert [r[8] for r in out[1]["data"]] == ["My cat is called Pixel and she loves tuna."] or all(
        "Pixel" in r[8] for r in out[1]["data"]
    )
    # a failed action: the page is left as it was, the status line says why
    for bad in ("999", "99999999999999999999999999", "-1", "abc"):
        out = page.pin(token, bad, *FILTERS)
        assert skipped(out[:8]) and out[8].startswith("⚠️ no memory") and skipped(out[9:])
    # restore is for archived memories only
    rid = service.memories(token)[0].id
    out = page.restore(token, str(rid), *FILTERS)
    assert "not archived" in out[8]
    # delete asks, then deletes what it asked about
    status, row, pending = page.ask_delete(token, str(rid))
    assert "for good?" in status and row["visible"] is True and len(service.memories(token)) == 3
    assert "Nothing was deleted" in page.cancel_delete(token)[0] and len(service.memories(token)) == 3
    out = page.confirm_delete(token, pending, *FILTERS)
    assert "deleted" in out[8] and len(service.memories(token)) == 2


def test_chinese_mode_translates_the_page_and_plots_with_a_cjk_font(amy):
    service, token = amy
    if cjk_font() is None:
        pytest.fail("no CJK font: run .ci/browser-deps (installs fonts-wqy-microhei)")
    service.save_prefs(token, lang="zh")
    run(ChatHandlers(service).send(token, "我今天去公园散步了。", {}))
    page = MemoryHandlers(service)
    day, table, fig, *_ = page.refresh(token)
    assert table["headers"][:4] == ["编号", "日期", "类型", "状态"] and table["data"][0][2] == "对话"
    assert table["data"][0][3] == "活跃" and day["choices"][0] == ("全部", "all")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert not missing, missing
    assert any(t.get_text() == "现在" for t in fig.axes[0].get_legend().get_texts())


def test_the_embedded_model_does_not_loop(smollm2_backend):
    """The smollm2 preset's generation defaults: no 4-gram of tokens twice in a reply."""
    from siliconfriend.backends.base import Message
    from siliconfriend.backends.hf.loader import PRESETS

    gen = PRESETS["smollm2"]["generation"]
    assert gen["no_repeat_ngram_size"] == 4 and gen["repetition_penalty"] > 1.1
    reply = "".join(smollm2_backend.stream([Message("user", "Describe your big dog, again and again.")], max_tokens=60))
    ids = smollm2_backend.tokenizer(reply, add_special_tokens=False)["input_ids"]
    grams = [tuple(ids[i : i + 4]) for i in range(len(ids) - 3)]
    assert reply.strip() and len(grams) == len(set(grams)), reply


def test_summarise_now_reports_each_day(amy, web_clock):
    """Days not summarised yet (an imported history, and today) are summarised one by one."""
    service, token = amy
    service.bank.add_turn("amy", "I baked bread.", "Lovely!", web_clock.now - timedelta(days=2))
    service.bank.add_turn("amy", "I painted the fence.", "Nice work.", web_clock.now - timedelta(days=1))
    steps = []
    page = MemoryHandlers(service)
    out = page.summarise(token, *FILTERS, progress=lambda done, desc: steps.append((done, desc)))
    assert [s[0] for s in steps] == [(0, 2), (1, 2)]
    assert "2024-05-02" in steps[0][1] and "2024-05-03" in steps[1][1]
    assert "Summarised: 2024-05-02, 2024-05-03" in out[-1]
    # under each summary, what the grounding check left out of it (or that these are her own words)
    events = page.summary_values(token, "2024-05-03")[1]
    info = service.summaries(token, "2024-05-03")["grounding"]["daily_events"]
    assert events["value"] and events["info"] == grounding_note(info, "en")
