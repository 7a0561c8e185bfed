"""Tools as a client expects them of a model that answers in text: Open WebUI's default chat (its
builtin tools, no tool_choice) answered and remembered; a forced call refused with a 400 whose
advice is for the app that sent it; "what I remembered" for apps that drop the extension field
(a footnote in the reply, opted into per request); and ``GET /v1/turns/{id}``, only for the key's
own user."""

from __future__ import annotations

import httpx
import openai
import pytest
from api_helpers import client
from frontend_requests import OWUI_TOOLS, ST_HEADERS, owui_chat, st_body, st_expressions


def stored(served, user: str) -> list[str]:
    return [t.query for t in served.api.bank.records(user)] if served.api.bank.has_user(user) else []


def test_tools_not_forced_are_answered_in_text_and_the_turn_stored(served):
    key = served.signup("tia")
    sdk = client(served, key)
    # Open WebUI's default chat request: 36 builtin tools, no tool_choice, streamed (raw HTTP)
    hello = [{"role": "user", "content": "My dog is called Biscuit."}]
    with httpx.stream(
        "POST", f"{served.url}/chat/completions", json=owui_chat(hello), headers={"Authorization": f"Bearer {key}"}
    ) as r:
        body = "".join(r.iter_text())
    assert r.status_code == 200 and "I hear you" in body and body.rstrip().endswith("data: [DONE]")
    assert stored(served, "tia") == ["My dog is called Biscuit."]
    # the SDK, not streamed, tool_choice "auto" then "none"
    chat = [*hello, {"role": "assistant", "content": "I hear you: My dog is called Biscuit."}]
    for n, choice in enumerate(("auto", "none")):
        text = f"He is {n + 3} years old."
        done = sdk.chat.completions.create(
            model="x", messages=[*chat, {"role": "user", "content": text}], tools=OWUI_TOOLS, tool_choice=choice
        )
        assert done.choices[0].message.content and not done.choices[0].message.tool_calls
        assert done.choices[0].finish_reason == "stop" and stored(served, "tia")[-1] == text
    # a chat that was with another model: its tool calls and their results are left out of the history
    history = [
        {"role": "user", "content": "What time is it?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_current_timestamp", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"current_iso": "2024-05-01T19:00:00"}'},
        {"role": "assistant", "content": "It is seven in the evening."},
        {"role": "user", "content": "Time to walk Biscuit then."},
    ]
    sdk.chat.completions.create(model="x", messages=history, tools=OWUI_TOOLS)
    prompt = served.backend.calls[-1]
    assert "current_iso" not in " ".join(m.content for m in prompt)
    assert [m.content for m in prompt if m.role == "assistant"][-1] == "It is seven in the evening."
    assert stored(served, "tia")[-1] == "Time to walk Biscuit then."


def test_a_forced_call_gets_a_400_with_advice_for_the_app_that_sent_it(served):
    key = served.signup("tom")
    sdk = client(served, key)
    hello = [{"role": "user", "content": "My dog is called Biscuit."}]
    # SillyTavern with "Enable function calling" on: Expressions forces set_emotion (tool_choice required)
    emotion = {
        "type": "function",
        "function": {"name": "set_emotion", "description": "Sets the label...", "parameters": {"type": "object"}},
    }
    st = st_body(st_expressions("I hear you! What a lovely name."), stream=False, tools=[emotion])
    st["tool_choice"] = "required"
    r = httpx.post(f"{served.url}/chat/completions", json=st, headers={"Authorization": f"Bearer {key}", **ST_HEADERS})
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "tools_not_supported" and error["param"] == "tool_choice"
    assert "SillyTavern" in error["message"] and "Enable function calling" in error["message"]
    assert "Open WebUI" not in error["message"] and "函数调用" in error["message"]  # en and zh
    # ... the same from a SillyTavern that names no tool of its own: told by how its server sends
    dice = {"type": "function", "function": {"name": "roll_dice", "parameters": {"type": "object"}}}
    st["tools"] = [dice]
    r = httpx.post(f"{served.url}/chat/completions", json=st, headers={"Authorization": f"Bearer {key}", **ST_HEADERS})
    assert "SillyTavern" in r.json()["error"]["message"] and "Open WebUI" not in r.json()["error"]["message"]
    # Open WebUI (its tools, its chat id header) forcing a named function
    named = {"type": "function", "function": {"name": "search_notes"}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            list(
                sdk.chat.completions.create(
                    model="x",
                    messages=hello,
                    stream=stream,
                    tools=OWUI_TOOLS,
                    tool_choice=named,
                    extra_headers={"X-OpenWebUI-Chat-Id": "c-9"},
                )
            )
        message = err.value.body["message"]
        assert err.value.status_code == 400 and "'search_notes'" in message and "Open WebUI" in message
        assert "SillyTavern" not in message
    # any other client: the generic advice
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model="x", messages=hello, tools=[dice], tool_choice="required")
    message = err.value.body["message"]
    assert 'tool_choice "auto" or "none"' in message and "SillyTavern" not in message and "Open WebUI" not in message
    assert stored(served, "tom") == []  # nothing was stored


SHOW = {"X-SiliconFriend-Show-Memories": "true"}


def test_the_footnote_shows_what_was_remembered_when_asked(served):
    from datetime import timedelta

    key = served.signup("uma")
    sdk = client(served, key)
    first = sdk.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "My dog is called Biscuit."}], extra_headers=SHOW
    )
    assert "🧠" not in first.choices[0].message.content  # nothing was remembered yet: no empty note
    served.clock.now += timedelta(days=1)
    ask = [{"role": "user", "content": "What is my dog called?"}]
    plain = sdk.chat.completions.create(model="x", messages=ask)
    assert "🧠" not in plain.choices[0].message.content  # only when asked for
    shown = sdk.chat.completions.create(model="x", messages=ask, extra_headers=SHOW)
    text, ext = shown.choices[0].message.content, shown.model_extra["siliconfriend"]
    reply, note = text.split("\n\n---\n")
    assert note.startswith("🧠 **What I remembered** (") and "My dog is called Biscuit." in note
    assert f"GET /v1/turns/{ext['turn_id']}" in note
    assert served.api.bank.get("uma", ext["turn_id"]).response == reply  # the note is never stored
    # streaming, asked for in the body; a Chinese message gets a Chinese note
    events = list(
        sdk.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "我的狗叫什么名字？Biscuit 还记得吗？"}],
            stream=True,
            extra_body={"siliconfriend": {"show_memories": True}},
        )
    )
    streamed = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert "\n\n---\n🧠 **我想起了什么** (" in streamed and "Biscuit" in streamed.split("---")[1]
    assert events[-1].choices[0].finish_reason == "stop"  # the note comes before the end
    # the app sends the chat back with the note in it: the companion reads the reply without it
    history = [*ask, {"role": "assistant", "content": text}, {"role": "user", "content": "Thanks!"}]
    sdk.chat.completions.create(model="x", messages=history)
    prompt = served.backend.calls[-1]
    assert [m.content for m in prompt if m.role == "assistant"][-1] == reply
    assert all("What I remembered" not in m.content for m in prompt)
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="x", messages=ask, extra_headers={"X-SiliconFriend-Show-Memories": "maybe"})


def test_a_turn_and_what_it_remembered_only_for_its_own_user(served):
    from datetime import timedelta

    key, other = served.signup("vic"), served.signup("wes")
    sdk = client(served, key)
    told = sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "I play the cello."}])
    served.clock.now += timedelta(days=1)
    asked = sdk.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "Which instrument do I play?"}]
    )
    turn_id = asked.model_extra["siliconfriend"]["turn_id"]
    got = httpx.get(f"{served.url}/turns/{turn_id}", headers={"Authorization": f"Bearer {key}"})
    body = got.json()
    assert got.status_code == 200 and body["object"] == "turn" and body["id"] == turn_id
    assert body["query"] == "Which instrument do I play?" and body["response"] == asked.choices[0].message.content
    told_id = told.model_extra["siliconfriend"]["turn_id"]
    assert told_id in [m["id"] for m in body["remembered"]]
    # one record: what the reply's answer listed is what its stored turn gives back, field for field
    assert body["remembered"] == asked.model_extra["siliconfriend"]["memories"]
    for headers, status in (({"Authorization": f"Bearer {other}"}, 404), ({}, 401)):
        refused = httpx.get(f"{served.url}/turns/{turn_id}", headers=headers)
        assert refused.status_code == status and "cello" not in refused.text
    for bad in ("999999", "abc", "-1"):
        missing = httpx.get(f"{served.url}/turns/{bad}", headers={"Authorization": f"Bearer {key}"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "turn_not_found"
