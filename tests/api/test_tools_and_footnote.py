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
