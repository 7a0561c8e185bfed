"""Tools passed through to an OpenAI-compatible backend that takes them (a local server speaking
OpenAI's protocol, with tool calls, as vLLM or llama.cpp serve it): the model's ``tool_calls`` go
back to the client, streamed or not, the client's tool results come back in its next request
after the companion's prompt, and only the person's message and the final reply become the turn;
a server that refuses tools is asked again without them, and the chat is answered in text."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from api_helpers import client, serve_api
from app_sessions import sse
from frontend_requests import OWUI_TOOLS, owui_chat

from memory.records import Kind
from siliconfriend.backends.openai_chat import OpenAIChat

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_current_timestamp", "arguments": "{}"}}
FINAL = "It is seven in the evening: time for Biscuit's walk."


class ToolServer(ThreadingHTTPServer):
    """Calls ``get_current_timestamp`` when it is offered and no tool result came yet; answers in
    text after a tool's result (or without tools). ``refuse``: a 400 for any request with tools."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.refuse = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ToolServer

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)
        if body.get("tools") and self.server.refuse:
            return self._json(400, {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice'}})
        call = bool(body.get("tools")) and body["messages"][-1]["role"] != "tool"
        if not body.get("stream"):
            message = (
                {"role": "assistant", "content": None, "tool_calls": [CALL]}
                if call
                else {
                    "role": "assistant",
                    "content": FINAL if body.get("tools") else "Plain text.",
                }
            )
            finish = "tool_calls" if call else "stop"
            return self._json(
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                },
            )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        if call:  # as vLLM streams a call: its name first, then its arguments
            first = {**CALL, "index": 0, "function": {"name": CALL["function"]["name"], "arguments": ""}}
            deltas = [
                {"role": "assistant", "tool_calls": [first]},
                {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
            ]
        else:
            text = FINAL if body.get("tools") else "Plain text."
            deltas = [{"role": "assistant", "content": w + " "} for w in text.split(" ")]
        for delta in [*deltas, None]:
            choice = {
                "index": 0,
                "delta": delta or {},
                "finish_reason": None if delta else ("tool_calls" if call else "stop"),
            }
            chunk = {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def tooled(tmp_path, e5_embedder):
    server = ToolServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    served, stop = serve_api(tmp_path / "home", e5_embedder)
    served.api.companion.backend = OpenAIChat("m", base_url=server.base_url, retries=0, context_tokens=4096)
    yield served, server
    stop()
    server.shutdown()


def turns(served, user):
    return served.api.bank.records(user, kind=Kind.TURN) if served.api.bank.has_user(user) else []


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_go_to_the_client_and_only_the_final_reply_is_the_turn(tooled, stream):
    served, server = tooled
    key = served.signup("tim")
    sdk = client(served, key)
    asked = [{"role": "user", "content": "What time is it? Biscuit needs his walk."}]
    tools = [t for t in OWUI_TOOLS if t["function"]["name"] == "get_current_timestamp"]

    def complete(messages):
        if not stream:
            done = sdk.chat.completions.create(model="m", messages=messages, tools=tools)
            return done.choices[0].finish_reason, done.choices[0].message
        events = list(sdk.chat.completions.create(model="m", messages=messages, tools=tools, stream=True))
        text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
        calls = [c for e in events if e.choices for c in e.choices[0].delta.tool_calls or ()]
        return [e for e in events if e.choices][-1].choices[0].finish_reason, (text, calls)

    finish, message = complete(asked)
    calls = message.tool_calls if not stream else message[1]
    assert finish == "tool_calls" and [c.function.name for c in calls] == ["get_current_timestamp"]
    assert calls[0].id == "call_1" and calls[0].function.arguments == "{}"
    sent = server.requests[-1]
    assert sent["tools"] == tools and sent["messages"][0]["role"] == "system"  # the companion's own prompt
    assert sent["messages"][-1]["role"] == "user" and sent["messages"][-1]["content"].endswith(asked[0]["content"])
    assert turns(served, "tim") == []  # the turn is not over
    # the client runs the tool and sends its result back
    follow = [
        *asked,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"current_iso": "2024-05-01T19:00:00"}'},
    ]
    finish, message = complete(follow)
    text = message.content if not stream else message[0]
    assert finish == "stop" and text.strip() == FINAL
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["user", "assistant", "tool"]
    assert sent[-2]["tool_calls"] == [CALL] and sent[-1]["tool_call_id"] == "call_1"
    [turn] = turns(served, "tim")
    assert turn.query == asked[0]["content"] and turn.response == FINAL and "current_iso" not in turn.text


def test_a_server_that_refuses_tools_answers_in_text(tooled):
    served, server = tooled
    server.refuse = True
    key = served.signup("ria")
    with httpx.stream(
        "POST",
        f"{served.url}/chat/completions",
        json=owui_chat([{"role": "user", "content": "My dog is called Biscuit."}]),
        headers={"Authorization": f"Bearer {key}"},
    ) as r:
        text, ext = sse(r.iter_lines())
    assert r.status_code == 200 and text.strip() == "Plain text." and ext["turn_id"]
    assert [t.query for t in turns(served, "ria")] == ["My dog is called Biscuit."]
    # asked once with the tools, again without; then never with them
    assert ["tools" in b for b in server.requests] == [True, False]
    client(served, key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "He is three."}], tools=OWUI_TOOLS
    )
    assert "tools" not in server.requests[-1]
