"""Chat apps through /v1 leave only the person's words in memory: every task prompt of Open WebUI,
SillyTavern, LibreChat and LobeChat (as their sources build them, see frontend_requests.py) is
answered and neither stored nor reinforcing; the explicit switches (header and body); front-end
markup (attachment lists, RAG context, image parts) stripped with a note of what was attached."""

from __future__ import annotations

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

from memory.records import Kind
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
    ],
)
def test_person_words(content, text, attached):
    said = person_words(content)
    assert said.text == text and said.attached == attached
