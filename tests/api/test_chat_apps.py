"""Chat apps through /v1 leave exactly the person's turns in memory, replayed with the requests
Open WebUI, SillyTavern, LibreChat and LobeChat build (frontend_requests.py), through the OpenAI
SDK and raw HTTP: every task prompt is answered and neither stored nor reinforcing; the explicit
switches (header and body); markup (attachment lists, RAG context, image parts) stripped with a
note of what was attached; a regenerate replaces the turn it regenerates, an edit supersedes the
turn it edits (kept, shown with its reason, never used), a new chat asking the same again is a new
turn; a client that goes away mid-stream leaves its partial reply stored at once, marked as
stopped. (Two workers over PostgreSQL: tests/pg/test_pg_api_resent.py.) One server for them all."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import httpx
import pytest
from api_helpers import client
from frontend_requests import (
    ST_IMPERSONATE,
    ST_QUIET,
    ST_SUMMARIZE,
    librechat_title,
    lobechat_title,
    lobechat_title_zh,
    owui_attached,
    owui_rag,
    owui_tasks,
    sillytavern,
)

from memory.records import Kind, State
from siliconfriend.api.frontends import TASK_PROMPTS, person_words, task_of


def turns(served, user: str) -> list:
    return served.api.bank.records(user, kind=Kind.TURN) if served.api.bank.has_user(user) else []


def post(served, key: str, body: dict, **headers) -> httpx.Response:
    return httpx.post(
        f"{served.url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}", **headers}, timeout=30
    )


def test_the_table_names_its_sources_and_leaves_a_persons_words_alone():
    assert all(rule.source and rule.signs and rule.where in ("last", "system", "any") for rule in TASK_PROMPTS)
    for words in ["What is my dog called?", "### Task: remind me to walk Biscuit", "Summarize my week, please."]:
        assert task_of([("user", words)]) is None
    # a system message after the person's message (post-history instructions) keeps it theirs
    assert task_of([("system", "Be brief."), ("user", "Hi"), ("system", "[Stay in character.]")]) is None
    # Open WebUI's RAG template wraps the person's message: that is them talking
    assert task_of([("user", owui_rag("Who is Biscuit's vet?", "notes.txt", "Dr. Lee"))]) is None


def test_open_webui_session_stores_only_the_persons_turns(served):
    key = served.signup("owen")
    sdk = client(served, key)
    chat = [{"role": "user", "content": "My dog is called Biscuit."}]
    reply = "".join(
        e.choices[0].delta.content or ""
        for e in sdk.chat.completions.create(model="m", messages=chat, stream=True)
        if e.choices
    )
    chat.append({"role": "assistant", "content": reply})
    [turn] = turns(served, "owen")
    assert turn.query == "My dog is called Biscuit."
    sent_for = {}
    for name, messages in owui_tasks(chat).items():
        calls = len(served.backend.calls)
        done = sdk.chat.completions.create(model="m", messages=messages)  # Open WebUI: stream false
        assert done.choices[0].message.content, name
        assert done.model_extra["siliconfriend"]["task"] and done.model_extra["siliconfriend"]["turn_id"] is None, name
        # answered by the model as sent: the app's own prompt, no memories, no companion meta-prompt
        sent = sent_for[name] = served.backend.calls[calls]
        assert sent[-1].content == messages[-1]["content"], name
        assert all("Biscuit" not in m.content or m.content in {x["content"] for x in messages} for m in sent), name
    # MoA speaks as the companion: its persona opens it; a title gets the app's prompt alone
    assert sent_for["moa"][0].role == "system" and len(sent_for["moa"]) == 2
    assert [m.role for m in sent_for["title"]] == ["user"]
    after = turns(served, "owen")
    assert [t.id for t in after] == [turn.id]
    assert after[0].recall_count == turn.recall_count and after[0].strength == turn.strength  # nothing reinforced
    # streamed tasks too (raw HTTP, as a client that streams everything)
    with httpx.stream(
        "POST",
        f"{served.url}/chat/completions",
        json={"model": "m", "messages": owui_tasks(chat)["tags"], "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as r:
        body = "".join(r.iter_text())
    assert r.status_code == 200 and '"task": "tags"' in body and body.rstrip().endswith("data: [DONE]")
    assert len(turns(served, "owen")) == 1


def test_sillytavern_librechat_lobechat_tasks_are_not_stored(served):
    key = served.signup("tess")
    sdk = client(served, key)
    chat = [{"role": "user", "content": "I grow tomatoes on my balcony."}]
    reply = sdk.chat.completions.create(model="m", messages=sillytavern(chat)).choices[0].message.content
    chat.append({"role": "assistant", "content": reply})
    assert [t.query for t in turns(served, "tess")] == ["I grow tomatoes on my balcony."]
    requests = {
        "impersonate": sillytavern(chat, ST_IMPERSONATE),
        "summarize": sillytavern(chat, ST_SUMMARIZE),
        "quiet": sillytavern(chat, ST_QUIET),
        "librechat": librechat_title(chat[0]["content"], reply),
        "lobechat": lobechat_title(chat[0]["content"], reply),
        "lobechat_zh": lobechat_title_zh(chat[0]["content"], reply),
    }
    for name, messages in requests.items():
        done = sdk.chat.completions.create(model="m", messages=messages)
        assert done.model_extra["siliconfriend"]["task"], name
    assert len(turns(served, "tess")) == 1
    # SillyTavern's next chat message, with a post-history instruction after it, is a turn
    chat.append({"role": "user", "content": "They are finally turning red."})
    sdk.chat.completions.create(model="m", messages=sillytavern(chat, "[Keep replies short.]"))
    assert [t.query for t in turns(served, "tess")][-1] == "They are finally turning red."


def test_the_switches_header_and_body(served):
    key = served.signup("sam")
    before = len(served.backend.calls)
    plain = {"model": "m", "messages": [{"role": "user", "content": "Name this chat: my trip to Oslo"}]}
    r = post(served, key, plain, **{"X-SiliconFriend-Task": "title"})
    assert r.status_code == 200 and r.json()["siliconfriend"]["task"] == "title"
    assert turns(served, "sam") == [] and len(served.backend.calls) == before + 1
    r = post(served, key, {**plain, "siliconfriend": {"task": "title"}})
    assert r.json()["siliconfriend"]["task"] == "title" and turns(served, "sam") == []
    # memory off: the companion answers (its meta-prompt), nothing is written
    r = post(
        served,
        key,
        {"model": "m", "messages": [{"role": "user", "content": "I am in Oslo."}]},
        **{"X-SiliconFriend-Memory": "off"},
    )
    assert r.status_code == 200 and r.json()["siliconfriend"]["turn_id"] is None and turns(served, "sam") == []
    assert "sam" in served.backend.calls[-1][0].content
    # memory on: a message that looks like a task is the person's turn
    task_like = owui_tasks([{"role": "user", "content": "hi"}])["title"]
    r = post(served, key, {"model": "m", "messages": task_like, "siliconfriend": {"memory": "on"}})
    assert r.json()["siliconfriend"]["turn_id"] and len(turns(served, "sam")) == 1
    for bad in ({"memory": "maybe"}, {"task": "no such task!"}):
        r = post(served, key, {**plain, "siliconfriend": bad})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("siliconfriend."), bad


def test_markup_is_stripped_and_what_was_attached_is_noted(served):
    key = served.signup("vera")
    sdk = client(served, key)
    served.clock.now += timedelta(minutes=5)
    sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": owui_attached("Who is Biscuit's vet?", "biscuit_notes.txt")}]
    )
    rag = owui_rag("When is his next check-up?", "biscuit_notes.txt", "Vet: Dr. Lee. Check-up on 3 June.")
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": rag}])
    # the model saw the context the app attached; only the person's words are stored
    assert "Check-up on 3 June." in served.backend.calls[-1][-1].content
    image = [
        {"type": "text", "text": "This is him at the beach."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": image}])
    assert [t.query for t in turns(served, "vera")] == [
        "Who is Biscuit's vet?\n[attached: biscuit_notes.txt]",
        "When is his next check-up?\n[attached: biscuit_notes.txt]",
        "This is him at the beach.\n[attached: image]",
    ]
    assert all("<" not in t.query for t in turns(served, "vera"))


@pytest.mark.parametrize(
    "content, text, attached",
    [
        ("<attached_files>\n- uploads/a b.png\n- uploads/c.txt\n</attached_files>\nLook", "Look", ["a b.png", "c.txt"]),
        ('<source id="2" name="web">ctx</source> Why?', "Why?", ["web"]),
        ([{"type": "file", "file": {"filename": "cv.pdf"}}], "", ["cv.pdf"]),
        # Open WebUI 0.12.4's own RAG template (no <user_query>), as a real session sent it
        (
            owui_rag("Who is Biscuit's vet?", "biscuit_notes.txt", "Vet: Dr. Okafor.", user_query=False),
            "Who is Biscuit's vet?",
            ["biscuit_notes.txt"],
        ),
    ],
)
def test_person_words(content, text, attached):
    said = person_words(content)
    assert said.text == text and said.attached == attached


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
    strength = served.api.bank.get("nora", first[1].id).strength
    reply, ext = say(sdk, chat[:2], "I work as a day-shift nurse now.")
    assert ext["supersedes"] == first[1].id
    old = served.api.bank.get("nora", first[1].id)
    # the words taken back neither inform the new reply nor are reinforced by it
    assert first[1].id not in {m["id"] for m in ext["memories"]} and old.strength == strength
    assert old.state == State.SUPERSEDED and old.extra["superseded"]["reason"] == "edited"
    assert old.extra["superseded"]["by"] == ext["turn_id"]
    # the old turn is shown (memory API and page), never retrieved nor in today's conversation
    listed = {m["id"]: m for m in sdk.get("/memories", cast_to=object, options={"params": {"kind": "turn"}})["data"]}
    assert listed[first[1].id]["state"] == "superseded" and listed[first[1].id]["superseded"]["reason"] == "edited"
    hits = served.api.bank.retrieve("nora", "What do I do for work?", served.clock.now, k=5)
    assert first[1].id not in {h.record.id for h in hits} and ext["turn_id"] in {h.record.id for h in hits}
    assert first[1].id not in {t.id for t in served.api.bank.turns_on("nora", served.clock.now.date())}
    active = [t.query for t in turns(served, "nora") if t.state == State.ACTIVE]
    # Open WebUI's edit makes a branch: the exchange after the edited one is no longer in the chat
    assert active == ["Hi! I'm Nora.", "I work as a day-shift nurse now."]
    gone = served.api.bank.get("nora", first[2].id)
    assert gone.state == State.SUPERSEDED and gone.extra["superseded"]["reason"] == "deleted"

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
