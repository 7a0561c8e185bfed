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

from memory.records import Kind
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
    return web_service, web_service.account.signup("amy", "amy-password").token


def test_too_long_and_empty_messages_are_refused_and_kept(amy):
    service, token = amy
    chat = ChatHandlers(service)
    for text in ("x" * 100_000, "   \n  "):
        (out,) = run(chat.send(token, text, {}))
        assert skipped(out)  # nothing changes on screen: the text stays in the box
    with pytest.raises(ValueError, match="100,000 characters.*split it"):
        service.chat.check_message("x" * 100_000)
    assert service.memory_page.memories(token) == [] and not service.companion.backend.calls
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
    assert "Today's conversation" in panel and "My dog is called Rex" in panel and "(1 turn):" in panel
    assert "today's conversation: 1" in msgs[-2]["metadata"]["title"]
    assert msgs[-3]["content"] == "What is my dog's name? &lt;img src=x&gt;"  # shown literally
    prompt = "\n".join(m.content for m in backend.calls[-1])
    assert "My dog is called Rex" in prompt and len(prompt) < 19_000 // 4 + 4 * HISTORY_CHARS
    # after a reload the restored turns keep their fold-outs, today's lines included
    restored = chat.restore(token)[0]
    titles = [m["metadata"]["title"] for m in restored if m.get("metadata")]
    assert len(titles) == 2 and "today's conversation: 1" in titles[1]
    turn = service.chat.today(token)[-1]
    assert stored_remembered(turn)[-1].kind == "today"


def test_a_reload_mid_reply_keeps_it_marked_stopped(amy):
    """The page goes away while the reply streams (a reload, a closed tab: Gradio closes the
    handler): the turn is stored with what came, and the conversation brought back shows it
    "(stopped)", as after Stop."""
    service, token = amy
    service.companion.max_new_tokens = 64
    chat = ChatHandlers(service)
    gen = chat.send(token, "Tell me a long story about a dragon.", {})
    for msgs, *_ in gen:
        if msgs and msgs[-1]["content"].endswith(" ▌"):
            break
    gen.close()
    (turn,) = service.chat.today(token)
    assert turn.response.strip() and turn.extra.get("stopped")
    restored = chat.restore(token)[0]
    assert restored[-1]["content"] == f"{turn.response} _(stopped)_"


def test_the_waiting_reply_shows_its_place(two_users):
    service, alice, bob = two_users
    first = service.chat.respond(alice, "Hello, I am first.")  # registered, not yet generating
    outs = run(ChatHandlers(service).send(bob, "And I am second.", {}))
    shown = [str(o[0][-1]["content"]) for o in outs if isinstance(o[0], list)]
    assert any("Waiting for the model: 1" in s for s in shown), shown
    assert service.chat.ahead(bob) == 0  # bob's reply finished
    first.collect()
    service.chat.finished(alice, first)
    assert service.chat.ahead(alice) == 0


@pytest.fixture
def two_users(web_service):
    return (
        web_service,
        web_service.account.signup("alice", "alice-password").token,
        web_service.account.signup("bob", "bob-password").token,
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
    # what I know about you, at the top: the facts stated, each with its memory's id
    known = out[8]
    assert known.startswith("### What I know about you") and "My cat is called Pixel and she loves tuna." in known
    assert "Hello there" not in known and "memory #" in known
    out = page.search(token, "all", "all", "all", "kitten", True)  # by meaning
    assert [r[8] for r in out[1]["data"]] == ["My cat is called Pixel and she loves tuna."] or all(
        "Pixel" in r[8] for r in out[1]["data"]
    )
    # a failed action: the page is left as it was, the status line says why
    for bad in ("999", "99999999999999999999999999", "-1", "abc"):
        out = page.pin(token, bad, *FILTERS)
        assert skipped(out[:9]) and out[9].startswith("⚠️ no memory") and skipped(out[10:])
    # restore is for archived memories only
    rid = service.memory_page.memories(token)[0].id
    out = page.restore(token, str(rid), *FILTERS)
    assert "not archived" in out[9]
    # delete asks, then deletes what it asked about
    status, row, pending = page.ask_delete(token, str(rid))
    assert "for good?" in status and row["visible"] is True and len(service.memory_page.memories(token)) == 3
    assert "Nothing was deleted" in page.cancel_delete(token)[0] and len(service.memory_page.memories(token)) == 3
    out = page.confirm_delete(token, pending, *FILTERS)
    assert "deleted" in out[9] and len(service.memory_page.memories(token)) == 2


def test_chinese_mode_translates_the_page_and_plots_with_a_cjk_font(amy):
    service, token = amy
    if cjk_font() is None:
        pytest.fail("no CJK font: run .ci/browser-deps (installs fonts-wqy-microhei)")
    service.account.save_prefs(token, lang="zh")
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
    """Finished days not summarised yet (an imported history) are summarised one by one, with one
    status line that moves; today is left alone unless asked for."""
    service, token = amy
    service.bank.add_turn("amy", "I baked bread.", "Lovely!", web_clock.now - timedelta(days=2))
    service.bank.add_turn("amy", "I painted the fence.", "Nice work.", web_clock.now - timedelta(days=1))
    service.bank.add_turn("amy", "I am at the beach today.", "Enjoy!", web_clock.now)
    outs = list(MemoryHandlers(service).summarise(token, *FILTERS, False, tick=0.05))
    lines = [out[-1] for out in outs[:-1]]
    assert all(skipped(out[:-1]) for out in outs[:-1])  # the page is left alone meanwhile
    assert any("2024-05-02 (day 1 of 2)" in line for line in lines)
    assert any("2024-05-03 (day 2 of 2)" in line for line in lines)
    assert len(set(lines)) > 1  # it moves
    assert outs[-1][-1] == "Summarised: 2024-05-02, 2024-05-03"
    assert not service.bank.get_summary("amy", Kind.DAILY_EVENTS, web_clock.now.date())
    *_, last = MemoryHandlers(service).summarise(token, *FILTERS, True)
    assert last[-1] == "Summarised: 2024-05-04"
    # under each summary, what the grounding check left out of it (or that these are her own words)
    page = MemoryHandlers(service)
    events = page.summary_values(token, "2024-05-03")[1]
    info = service.memory_page.summaries(token, "2024-05-03")["grounding"]["daily_events"]
    assert events["value"] and events["info"] == grounding_note(info, "en")


def test_the_days_first_message_says_it_looks_back_first(amy, web_clock):
    """Yesterday's conversation is summarised before today's first reply (the model's work): the
    page says so meanwhile, and not again once it is done."""
    service, token = amy
    service.bank.add_turn("amy", "I painted the fence.", "Nice work.", web_clock.now - timedelta(days=1))
    assert service.chat.days_to_summarise(token) == [(web_clock.now - timedelta(days=1)).date()]
    chat = ChatHandlers(service)
    shown = [str(o[0][-1]["content"]) for o in run(chat.send(token, "Good morning!", {})) if isinstance(o[0], list)]
    looking = [i for i, s in enumerate(shown) if "Looking back over our last conversations" in s]
    assert looking and "(1 day(s) to summarise)" in shown[looking[0]], shown
    assert "Looking back" not in shown[-1]  # the reply took its place
    assert service.bank.get_summary("amy", Kind.DAILY_EVENTS, (web_clock.now - timedelta(days=1)).date())
    assert service.chat.days_to_summarise(token) == []
    shown = [str(o[0][-1]["content"]) for o in run(chat.send(token, "Still me.", {})) if isinstance(o[0], list)]
    assert not any("Looking back" in s for s in shown), shown
