"""Tool calling refused visibly (400, OpenAI's shape, the setting to change named), never dropped;
"what I remembered" for apps that drop the extension field (a footnote in the reply, opted into
per request); and ``GET /v1/turns/{id}``, only for the key's own user."""

from __future__ import annotations

import httpx
import openai
import pytest
from api_helpers import client


def tool(name: str) -> dict:
    """A tool as Open WebUI's builtin tools are sent (``{"type": "function", "function": spec}``)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} (an Open WebUI builtin tool)",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }


OWUI_TOOLS = [tool(n) for n in ("search_memories", "add_memory", "search_notes", "get_current_timestamp")] * 9


def test_tools_are_refused_with_a_400_that_names_the_setting(served):
    key = served.signup("tia")
    sdk = client(served, key)
    hello = [{"role": "user", "content": "My dog is called Biscuit."}]
    for extra in (
        {"tools": OWUI_TOOLS},  # as Open WebUI sends every chat request by default
        {"tools": OWUI_TOOLS[:1], "tool_choice": "auto"},
        {"tool_choice": "required"},
        {"functions": [OWUI_TOOLS[0]["function"]]},
    ):
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as err:
                list(sdk.chat.completions.create(model="siliconfriend", messages=hello, stream=stream, **extra))
            assert err.value.status_code == 400 and err.value.code == "tools_not_supported", extra
    raw = httpx.post(
        f"{served.url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "siliconfriend", "messages": hello, "tools": OWUI_TOOLS},
    )
    error = raw.json()["error"]
    assert raw.status_code == 400 and error["param"] == "tools" and error["type"] == "invalid_request_error"
    assert "offers 36" in error["message"] and "Function Calling: Legacy" in error["message"]
    assert "Builtin Tools" in error["message"] and "工具" in error["message"]  # read in the app, en and zh
    # a tool call or a tool's result in the history (the chat was with another model)
    for message in (
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_current_timestamp", "arguments": "{}"}}
            ],
        },
    ):
        with pytest.raises(openai.BadRequestError) as err:
            sdk.chat.completions.create(model="x", messages=[hello[0], message, {"role": "user", "content": "And?"}])
        assert err.value.code == "tools_not_supported" and err.value.body["param"] == "messages[1]"
    assert not served.api.bank.has_user("tia") or not served.api.bank.count("tia")  # nothing stored
    # tools the client itself declines are no tools: the turn is answered and stored
    done = sdk.chat.completions.create(model="x", messages=hello, tools=OWUI_TOOLS, tool_choice="none")
    assert done.choices[0].message.content and served.api.bank.count("tia") == 1


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
    assert [m["id"] for m in body["remembered"]] == [m["id"] for m in asked.model_extra["siliconfriend"]["memories"]]
    for headers, status in (({"Authorization": f"Bearer {other}"}, 404), ({}, 401)):
        refused = httpx.get(f"{served.url}/turns/{turn_id}", headers=headers)
        assert refused.status_code == status and "cello" not in refused.text
    for bad in ("999999", "abc", "-1"):
        missing = httpx.get(f"{served.url}/turns/{bad}", headers={"Authorization": f"Bearer {key}"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "turn_not_found"
