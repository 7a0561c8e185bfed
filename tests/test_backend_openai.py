"""The openai backend against a real local HTTP server speaking /v1/chat/completions."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from siliconfriend.backends.base import (
    BackendAuthError,
    BackendError,
    BackendModelNotFound,
    BackendRateLimited,
    BackendUnavailable,
    Message,
    join_stream,
)
from siliconfriend.backends.openai_chat import OpenAIChat, estimate_tokens
from siliconfriend.config import Settings
from siliconfriend.factory import build_backend

MESSAGES = [Message("system", "You are kind."), Message("user", "Hello!")]


class FakeOpenAIServer(ThreadingHTTPServer):
    """Answers each POST with the next scripted step; the last step repeats."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[dict] = [{"reply": "ok"}]
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_step(self) -> dict:
        with self.lock:
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAIServer

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("authorization")})
        step = self.server.next_step()
        try:
            if "sleep" in step:
                time.sleep(step["sleep"])
            if self.path != "/v1/chat/completions":
                return self._json(404, {"error": {"message": f"no route {self.path}"}})
            if "status" in step:
                return self._json(
                    step["status"],
                    {"error": {"message": step.get("message", "scripted"), "code": step.get("code")}},
                    step.get("headers"),
                )
            if callable(step.get("reply")):  # a reply made from the request (a model that reads its prompt)
                step = {**step, "reply": step["reply"](body)}
            if body.get("stream"):
                usage = (body.get("stream_options") or {}).get("include_usage") and step.get("usage")
                return self._sse(body["model"], step["reply"], usage)
            return self._json(
                200,
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": step["reply"]},
                        }
                    ],
                },
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, model: str, reply: str, usage: dict | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        words = [w + " " for w in reply.split(" ")]
        words[-1] = words[-1].rstrip(" ")
        for i, word in enumerate(words):
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": word} if i else {"role": "assistant", "content": word},
                        "finish_reason": None,
                    }
                ],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        done = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        self.wfile.write(f"data: {json.dumps(done)}\n\n".encode())
        if usage:  # as OpenAI and vLLM send it: a last chunk without choices
            tail = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": []}
            self.wfile.write(f"data: {json.dumps(tail | {'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture
def server():
    srv = FakeOpenAIServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def make(server: FakeOpenAIServer, **kw) -> OpenAIChat:
    kw.setdefault("retry_base_delay", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAIChat("test-model", api_key="sk-test", base_url=server.base_url, **kw)


def test_streaming_success(server):
    server.script = [{"reply": "Hello there, friend!"}]
    backend = make(server, temperature=0.2)
    chunks = list(backend.stream(MESSAGES, max_tokens=17))
    assert len(chunks) > 1
    assert "".join(chunks) == "Hello there, friend!"
    sent = server.requests[-1]
    assert sent["auth"] == "Bearer sk-test"
    assert sent["body"]["stream"] is True
    assert sent["body"]["model"] == "test-model"
    assert sent["body"]["max_tokens"] == 17
    assert sent["body"]["temperature"] == 0.2
    assert sent["body"]["messages"] == [m.as_dict() for m in MESSAGES]
    assert backend.last_prompt == {}  # this server reports no usage


def test_the_tokens_the_server_had_cached_are_reported(server, caplog):
    usage = {"prompt_tokens": 900, "completion_tokens": 3, "total_tokens": 903}
    server.script = [{"reply": "Hi again!", "usage": usage | {"prompt_tokens_details": {"cached_tokens": 768}}}]
    backend = make(server)
    with caplog.at_level("INFO", logger="siliconfriend.backends.openai"):
        assert "".join(backend.stream(MESSAGES)) == "Hi again!"
    assert server.requests[-1]["body"]["stream_options"] == {"include_usage": True}
    assert backend.last_prompt == {"total": 900, "processed": 132, "server_cached": 768}
    assert "prompt of 900 tokens, 768 of them cached" in caplog.text


def test_non_streaming_success(server):
    server.script = [{"reply": "One piece."}]
    backend = make(server, streaming=False)
    assert list(backend.stream(MESSAGES)) == ["One piece."]
    assert not server.requests[-1]["body"].get("stream")
    assert server.requests[-1]["body"]["max_tokens"] == 1024


def test_429_then_success_retries(server):
    server.script = [{"status": 429}, {"status": 429, "headers": {"retry-after": "0"}}, {"reply": "finally"}]
    backend = make(server, retries=3)
    assert join_stream(backend.stream(MESSAGES)) == "finally"
    assert len(server.requests) == 3


def test_429_forever_raises_rate_limited(server):
    server.script = [{"status": 429}]
    with pytest.raises(BackendRateLimited, match="rate limit"):
        join_stream(make(server, retries=2).stream(MESSAGES))
    assert len(server.requests) == 3


def test_insufficient_quota_is_not_retried(server):
    server.script = [{"status": 429, "code": "insufficient_quota", "message": "You exceeded your quota"}]
    with pytest.raises(BackendRateLimited, match="quota"):
        join_stream(make(server, retries=3).stream(MESSAGES))
    assert len(server.requests) == 1


def test_500_raises_after_retries_with_clear_message(server):
    server.script = [{"status": 500, "message": "boom"}]
    with pytest.raises(BackendUnavailable) as info:
        join_stream(make(server, retries=2).stream(MESSAGES))
    assert len(server.requests) == 3
    text = str(info.value)
    assert "HTTP 500" in text and "boom" in text and "3 attempts" in text and server.base_url in text


def test_500_then_success(server):
    server.script = [{"status": 503}, {"reply": "recovered"}]
    assert join_stream(make(server, streaming=False).stream(MESSAGES)) == "recovered"


def test_timeout_is_unavailable(server):
    server.script = [{"sleep": 2.0, "reply": "too late"}]
    backend = make(server, timeout=0.3, retries=2)
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer within 0.3s"):
        join_stream(backend.stream(MESSAGES))
    assert time.monotonic() - start < 1.5  # timeouts are not retried
    assert len(server.requests) == 1


def test_401_is_auth_error(server):
    server.script = [{"status": 401, "message": "Incorrect API key provided"}]
    with pytest.raises(BackendAuthError, match="OPENAI_API_KEY") as info:
        join_stream(make(server).stream(MESSAGES))
    assert "Incorrect API key" in str(info.value)
    assert len(server.requests) == 1  # not retried


def test_404_is_model_not_found(server):
    server.script = [{"status": 404, "message": "The model `test-model` does not exist"}]
    with pytest.raises(BackendModelNotFound, match="'test-model' was not found") as info:
        join_stream(make(server).stream(MESSAGES))
    assert "/models" in str(info.value)


def test_400_is_backend_error(server):
    server.script = [{"status": 400, "message": "maximum context length exceeded"}]
    with pytest.raises(BackendError, match="too long"):
        join_stream(make(server).stream(MESSAGES))


def test_unreachable_port_is_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIChat(
        "m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1", retries=1, retry_base_delay=0.01, timeout=2
    )
    with pytest.raises(BackendUnavailable, match="cannot reach") as info:
        join_stream(backend.stream(MESSAGES))
    assert "OPENAI_BASE_URL" in str(info.value)


def test_env_configuration(server, monkeypatch, tmp_path):
    """OPENAI_API_KEY / OPENAI_BASE_URL reach the backend through the settings and the factory."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    for name in ("OPENAI_MODEL", "SILICONFRIEND_BACKEND", "SILICONFRIEND_MODEL"):
        monkeypatch.delenv(name, raising=False)
    backend = build_backend(Settings.load(home=tmp_path / "home"), retry_base_delay=0.01)
    assert backend.model == "gpt-4o-mini" and backend.base_url == server.base_url
    assert join_stream(backend.stream(MESSAGES)) == "ok"
    assert server.requests[-1]["auth"] == "Bearer sk-env"


def test_missing_key_for_openai_is_explained(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")  # the backend reads no variable: the settings do
    with pytest.raises(BackendAuthError, match="OPENAI_API_KEY"):
        OpenAIChat()


def test_local_server_needs_no_key(server):
    backend = OpenAIChat("llama3", base_url=server.base_url)
    assert join_stream(backend.stream(MESSAGES)) == "ok"
    assert server.requests[-1]["auth"] == "Bearer not-needed"


def test_count_tokens_estimate():
    backend = OpenAIChat("m", api_key="k", base_url="http://127.0.0.1:9/v1", context_tokens=4096)
    assert backend.context_tokens == 4096
    assert backend.count_tokens("") == 0
    assert backend.count_tokens("abcdefgh") == 2
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("我喜欢 jazz") == 3 + 2
