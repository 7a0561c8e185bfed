"""One turn, however often it is sent, as chat apps resend whole chats (Open WebUI, SillyTavern):
a regenerate replaces the turn it regenerates, an edit supersedes the turn it edits (kept, shown
with its reason, never used), a new chat asking the same again is a new turn; and a client that
goes away mid-stream leaves its partial reply stored at once, marked as stopped. Through the
OpenAI SDK and raw HTTP, over SQLite here and over PostgreSQL with two workers (tests/pg)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import httpx
from api_helpers import client
from frontend_requests import owui_attached, owui_rag, owui_tasks

from memory.records import Kind, State


def turns(served, user: str) -> list:
    return served.api.bank.records(user, kind=Kind.TURN)


def say(sdk, chat: list[dict], text: str, **options) -> tuple[str, dict]:
    """Send ``text`` after ``chat`` (streamed, as Open WebUI does); the reply and the extension."""
    events = list(
        sdk.chat.completions.create(
            model="m", messages=[*chat, {"role": "user", "content": text}], stream=True, **options
        )
    )
    reply = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    return reply, [e for e in events if e.choices][-1].model_extra["siliconfriend"]


def test_regenerate_edit_and_a_new_chat(served):
    key = served.signup("nora")
    sdk = client(served, key)
    chat: list[dict] = []
    for text in ["Hi! I'm Nora.", "I work as a night-shift nurse.", "My dog is called Biscuit."]:
        reply, ext = say(sdk, chat, text)
        chat += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
        assert not ext["regenerated"] and ext["supersedes"] is None
    first = turns(served, "nora")
    assert [t.query for t in first] == ["Hi! I'm Nora.", "I work as a night-shift nurse.", "My dog is called Biscuit."]

    # regenerate the last reply (Open WebUI: the chat up to the message, sent again): one turn, new reply
    served.backend.variant = " (take 2)"
    rejected = first[2].response
    reply, ext = say(sdk, chat[:4], "My dog is called Biscuit.")
    assert ext["regenerated"] and ext["turn_id"] == first[2].id and reply.endswith("(take 2)")
    now = turns(served, "nora")
    assert [t.id for t in now] == [t.id for t in first] and now[2].response == reply
    assert all(t.response != rejected for t in now)  # the rejected reply is kept nowhere
    # ... and the turn it regenerates is not a memory of its own answer
    assert first[2].id not in {m["id"] for m in ext["memories"]}
    chat[5]["content"] = reply

    # regenerate through raw HTTP, not streamed (SillyTavern's swipe)
    served.backend.variant = " (take 3)"
    body = {"model": "m", "messages": [*chat[:4], {"role": "user", "content": "My dog is called Biscuit."}]}
    r = httpx.post(f"{served.url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.json()["siliconfriend"]["regenerated"] and len(turns(served, "nora")) == 3
    chat[5]["content"] = r.json()["choices"][0]["message"]["content"]
    served.backend.variant = ""

    # edit the second message: the history up to it, another message
    served.clock.now += timedelta(minutes=3)
    reply, ext = say(sdk, chat[:2], "I work as a day-shift nurse now.")
    assert ext["supersedes"] == first[1].id
    old = served.api.bank.get("nora", first[1].id)
    assert old.state == State.SUPERSEDED and old.extra["superseded"]["reason"] == "edited"
    assert old.extra["superseded"]["by"] == ext["turn_id"]
    # the old turn is shown (memory API and page), never retrieved nor in today's conversation
    listed = {m["id"]: m for m in sdk.get("/memories", cast_to=object, options={"params": {"kind": "turn"}})["data"]}
    assert listed[first[1].id]["state"] == "superseded" and listed[first[1].id]["superseded"]["reason"] == "edited"
    hits = served.api.bank.retrieve("nora", "What do I do for work?", served.clock.now, k=5)
    assert first[1].id not in {h.record.id for h in hits} and ext["turn_id"] in {h.record.id for h in hits}
    assert first[1].id not in {t.id for t in served.api.bank.turns_on("nora", served.clock.now.date())}
    active = [t.query for t in turns(served, "nora") if t.state == State.ACTIVE]
    assert active == ["Hi! I'm Nora.", "My dog is called Biscuit.", "I work as a day-shift nurse now."]

    # a new chat that asks the same thing again is a new turn (its history differs)
    _, ext = say(sdk, [], "My dog is called Biscuit.")
    assert not ext["regenerated"] and ext["supersedes"] is None and len(turns(served, "nora")) == 5
    # ... and a new chat's first message sent again at once is its regenerate
    _, ext = say(sdk, [], "My dog is called Biscuit.")
    assert ext["regenerated"] and len(turns(served, "nora")) == 5


def test_a_named_chat_tells_an_edit_of_its_first_message(served):
    key = served.signup("otto")
    sdk = client(served, key, default_headers={"X-OpenWebUI-Chat-Id": "c-1"})
    say(sdk, [], "I live in Leeds.")
    other = client(served, key, default_headers={"X-OpenWebUI-Chat-Id": "c-2"})
    say(other, [], "What is the weather like?")
    _, ext = say(sdk, [], "I live in York.")  # chat c-1's first message, edited
    [old] = [t for t in turns(served, "otto") if t.query == "I live in Leeds."]
    assert ext["supersedes"] == old.id and old.state == State.SUPERSEDED
    assert [t.state for t in turns(served, "otto") if t.query == "What is the weather like?"] == [State.ACTIVE]


def test_a_client_that_goes_away_mid_stream_leaves_its_reply_stored_at_once(served):
    key = served.signup("stan")
    hold = served.backend.hold = threading.Event()
    try:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Tell me a long story."}]}
        with httpx.stream(
            "POST", f"{served.url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as r:
            first = next(r.iter_lines())
            assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"]["content"] == "I hear you"
        # the client is gone (Open WebUI's stop button closes the connection); the model makes its next token
        time.sleep(0.3)
        hold.set()
        deadline = time.time() + 3
        while not served.api.bank.has_user("stan") or not turns(served, "stan"):
            assert time.time() < deadline, "the stopped reply was not stored at once"
            time.sleep(0.05)
        [turn] = turns(served, "stan")
        assert turn.query == "Tell me a long story." and turn.response.startswith("I hear you")
        assert turn.extra["stopped"] is True and " 99" not in turn.response  # generation stopped there
        listed = client(served, key).get("/memories", cast_to=object)["data"]
        assert listed[0]["stopped"] is True
    finally:
        served.backend.hold = None
        hold.set()


def test_an_ordinary_open_webui_session_leaves_exactly_the_persons_turns(served):
    """Every request Open WebUI makes in an ordinary session, in its order: each chat message with
    its background tasks, an attachment with its retrieval query and RAG context, a regenerate, an
    edit, a stopped reply."""
    key = served.signup("jo")
    sdk = client(served, key)
    usage = {"stream_options": {"include_usage": True}}
    chat: list[dict] = []

    def message(text: str) -> str:
        reply, _ = say(sdk, chat, text, **usage)
        chat.extend([{"role": "user", "content": text}, {"role": "assistant", "content": reply}])
        for task in ("title", "tags", "follow_ups"):  # after each reply, not streamed
            sdk.chat.completions.create(model="m", messages=owui_tasks(chat)[task])
        return reply

    message("Hi, I'm Jo. My dog is called Biscuit.")
    # a file attached: Open WebUI first asks for retrieval queries, then sends the message with its context
    sdk.chat.completions.create(model="m", messages=owui_tasks([*chat, {"role": "user", "content": "vet?"}])["queries"])
    asked = owui_rag(owui_attached("Who is his vet?", "biscuit_notes.txt"), "biscuit_notes.txt", "Vet: Dr. Lee.")
    message(asked)
    # regenerate that answer, then edit the question
    _, ext = say(sdk, chat[:2], asked, **usage)
    assert ext["regenerated"]
    edited = owui_attached("Who is Biscuit's vet, and where?", "biscuit_notes.txt")
    reply, ext = say(sdk, chat[:2], edited, **usage)
    assert ext["supersedes"]
    chat[2:] = [{"role": "user", "content": edited}, {"role": "assistant", "content": reply}]
    # a reply stopped with the stop button
    hold = served.backend.hold = threading.Event()
    try:
        body = {"model": "m", "stream": True, "messages": [*chat, {"role": "user", "content": "Thanks!"}]}
        with httpx.stream(
            "POST", f"{served.url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as r:
            next(r.iter_lines())
        time.sleep(0.2)
        hold.set()
        deadline = time.time() + 3
        while len(turns(served, "jo")) < 4:
            assert time.time() < deadline, "the stopped reply was not stored at once"
            time.sleep(0.05)
    finally:
        served.backend.hold = None
        hold.set()
    stored = turns(served, "jo")
    assert [(t.query, t.state, bool(t.extra.get("stopped"))) for t in stored] == [
        ("Hi, I'm Jo. My dog is called Biscuit.", State.ACTIVE, False),
        ("Who is his vet?\n[attached: biscuit_notes.txt]", State.SUPERSEDED, False),
        ("Who is Biscuit's vet, and where?\n[attached: biscuit_notes.txt]", State.ACTIVE, False),
        ("Thanks!", State.ACTIVE, True),
    ]
