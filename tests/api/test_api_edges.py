"""The API's edges over real HTTP: a body bounded whatever its framing and never read before the
key, text that is not text, numbers out of range, fields of the wrong type (each a 400 that names
it, as OpenAI's), and the server's own limits on a slow or idle connection."""

from __future__ import annotations

import json
import signal
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from api_helpers import free_port, start_uvicorn

MIB = 2**20


def raw_request(url: str, head: str, body_parts=(), *, read_timeout: float = 10.0) -> tuple[int, bytes, int]:
    """Send ``head`` (the request line and headers, without the path's host) then each of
    ``body_parts`` on a plain socket until the server answers; (status, answer, bytes of body sent)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=read_timeout)
    sent = 0
    answer = b""
    try:
        sock.sendall(head.encode("latin-1"))
        sock.setblocking(False)
        for part in body_parts:
            try:
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            if answer:
                break  # the server answered before the body was sent
            try:
                sock.setblocking(True)
                sock.settimeout(read_timeout)
                sock.sendall(part)
                sent += len(part)
            except (BrokenPipeError, ConnectionResetError):
                break
            finally:
                sock.setblocking(False)
        sock.setblocking(True)
        sock.settimeout(read_timeout)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
        head_end = answer.index(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in answer[:head_end].split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        while len(answer) < head_end + 4 + length:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    finally:
        sock.close()
    return int(answer.split(b" ", 2)[1]), answer[head_end + 4 :], sent


def chunked(data: bytes, size: int = MIB) -> list[bytes]:
    out = [b"%x\r\n" % len(data[i : i + size]) + data[i : i + size] + b"\r\n" for i in range(0, len(data), size)]
    return [*out, b"0\r\n\r\n"]


def post_head(url: str, key: str | None, *, framing: str) -> str:
    parts = urlsplit(url)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {parts.path}/chat/completions HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Content-Type: application/json\r\n{auth}{framing}\r\n"
    )


def padded_body(size: int) -> bytes:
    """A chat request of about ``size`` bytes (a long user message)."""
    return json.dumps({"model": "x", "messages": [{"role": "user", "content": "a" * size}]}).encode()


@pytest.fixture(scope="module")
def key(served):
    return served.signup("edgar")


def test_a_chunked_body_past_the_limit_is_413(served, key):
    body = padded_body(9 * MIB)
    status, answer, sent = raw_request(
        served.url, post_head(served.url, key, framing="Transfer-Encoding: chunked\r\n"), chunked(body)
    )
    assert status == 413, answer
    assert json.loads(answer)["error"]["code"] == "request_too_large"


def test_a_body_without_a_key_is_refused_before_it_is_read(served):
    body_parts = chunked(padded_body(64 * MIB))
    status, answer, sent = raw_request(
        served.url, post_head(served.url, None, framing="Transfer-Encoding: chunked\r\n"), body_parts
    )
    assert status == 401, answer
    assert sent <= 16 * MIB  # answered at once (what was sent meanwhile sat in socket buffers)
    status, _, sent = raw_request(
        served.url,
        post_head(served.url, "sf-wrong", framing=f"Content-Length: {64 * MIB}\r\n"),
        [b"a" * MIB] * 64,
    )
    assert status == 401 and sent <= 16 * MIB


def test_a_body_within_the_limit_still_works_chunked(served, key):
    body = json.dumps({"messages": [{"role": "user", "content": "Hello there, chunked."}]}).encode()
    status, answer, _ = raw_request(
        served.url, post_head(served.url, key, framing="Transfer-Encoding: chunked\r\n"), chunked(body, 7)
    )
    assert status == 200, answer
    assert json.loads(answer)["choices"][0]["message"]["content"]


def post(served, key, text: str) -> httpx.Response:
    return httpx.post(
        f"{served.url}/chat/completions",
        content=text.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=30,
    )


def test_a_lone_surrogate_is_a_400_that_names_where(served, key):
    stored = served.api.bank.count("edgar") if served.api.bank.has_user("edgar") else 0
    got = post(served, key, '{"messages": [{"role": "user", "content": "hi \\ud800 there"}]}')
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["param"] == "messages.0.content" and "surrogate" in error["message"]
    got = post(served, key, '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}')
    assert got.status_code == 400 and got.json()["error"]["param"] == "messages.0.content.0.text"
    # a pair is a character: fine
    assert post(served, key, '{"messages": [{"role": "user", "content": "a smile \\ud83d\\ude00"}]}').status_code == 200
    assert served.api.bank.count("edgar") == stored + 1  # only the good one was stored


@pytest.mark.parametrize(
    "field, value",
    [
        ("stream", "yes"),
        ("stream", 1),
        ("max_tokens", -5),
        ("max_tokens", 0),
        ("max_tokens", 2.5),
        ("max_tokens", 10**30),
        ("max_completion_tokens", -1),
        ("temperature", 3),
        ("temperature", "hot"),
        ("top_p", 1.5),
        ("presence_penalty", -3),
        ("n", "1"),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop", 5),
        ("seed", 1.5),
        ("logprobs", "true"),
    ],
)
def test_fields_of_the_wrong_type_or_range_are_400s_that_name_them(served, key, field, value):
    body = {"messages": [{"role": "user", "content": "hello"}], field: value}
    got = post(served, key, json.dumps(body))
    assert got.status_code == 400, got.text
    assert got.json()["error"]["param"] == field and field in got.json()["error"]["message"]


def test_invalid_json_is_a_400_without_a_byte_offset_for_a_param(served, key):
    got = post(served, key, '{"messages": [{"role": "user", "content": "hi"}')
    assert got.status_code == 400
    error = got.json()["error"]
    assert error["param"] is None and "not valid JSON" in error["message"]


@pytest.mark.parametrize(
    "path, param",
    [
        ("/memories?offset=99999999999999999999", "offset"),
        ("/memories?offset=-1", "offset"),
        ("/memories?limit=99999999999999999999", "limit"),
        ("/memories?limit=abc", "limit"),
        ("/memories/search?q=cat&limit=99999999999999999999", "limit"),
        ("/memories/search?q=cat&limit=0", "limit"),
    ],
)
def test_every_number_a_request_carries_is_checked(served, key, path, param):
    got = httpx.get(served.url + path, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert got.status_code == 400, got.text
    assert got.json()["error"]["param"] == param


def test_memory_ids_out_of_range_are_not_found(served, key):
    for mid in ("99999999999999999999", "-1", "0"):
        got = httpx.get(f"{served.url}/memories/{mid}", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert got.status_code == 404, (mid, got.text)


def test_slow_headers_and_idle_connections_are_closed(monkeypatch):
    """30 connections sending a header line every half second are closed once their head has
    taken HEADER_TIMEOUT_S (here 1.5 s), whatever still trickles in; an idle keep-alive connection
    after KEEP_ALIVE_S. The server is configured as ``serve-api`` configures it."""
    from fastapi import FastAPI

    from siliconfriend.api import http_server

    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 1.5)
    app = FastAPI()

    @app.get("/ping")
    def ping():
        return {"ok": True}

    port = free_port()
    options = http_server.server_options()
    assert options["timeout_keep_alive"] == http_server.KEEP_ALIVE_S
    server, thread = start_uvicorn(app, port, **options)
    try:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(30)]
        for s in socks:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
        closed: set[int] = set()
        start = time.monotonic()
        while len(closed) < len(socks) and time.monotonic() - start < 6:
            time.sleep(0.5)
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                    s.setblocking(False)
                    if s.recv(1024) == b"":
                        closed.add(i)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(i)
                finally:
                    s.setblocking(True)
        took = time.monotonic() - start
        assert len(closed) == len(socks) and took < 4, (len(closed), took)
        for s in socks:
            s.close()
        # a whole request is answered, and its connection kept alive a while, then closed
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            start = time.monotonic()
            answer = b""
            while more := s.recv(4096):  # until the server closes it
                answer += more
            assert b"200 OK" in answer and answer.endswith(b'{"ok":true}')
            assert time.monotonic() - start < http_server.KEEP_ALIVE_S + 2
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_long_request_is_not_cut_by_the_header_timeout(monkeypatch):
    """Once its head is in, a request takes as long as it takes."""
    from fastapi import FastAPI

    from siliconfriend.api import http_server

    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 0.5)
    app = FastAPI()

    @app.get("/slow")
    def slow():
        time.sleep(1.5)
        return {"ok": True}

    port = free_port()
    server, thread = start_uvicorn(app, port, **http_server.server_options())
    try:
        got = httpx.get(f"http://127.0.0.1:{port}/slow", timeout=10)
        assert got.status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_served_apps_get_the_limits(tmp_path, monkeypatch):
    """``serve-api`` runs uvicorn with the timed protocol, and a server that Gradio configures
    inside ``timed_servers`` (as ``app.launch`` does) loads it too."""
    import uvicorn

    from siliconfriend.api.http_server import KEEP_ALIVE_S, timed_servers
    from siliconfriend.cli import api as cli_api
    from siliconfriend.config import Settings

    ran: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(kw))
    before = signal.getsignal(signal.SIGTERM)
    try:
        cli_api.serve(Settings(home=tmp_path / "home"), host="127.0.0.1", port=free_port())
    finally:
        signal.signal(signal.SIGTERM, before)  # serve's handler, for this process's other tests
    assert ran["http"].__name__.startswith("Timed") and ran["timeout_keep_alive"] == KEEP_ALIVE_S
    with timed_servers():
        config = uvicorn.Config(lambda *a: None)
        config.load()
    assert config.http_protocol_class.__name__.startswith("Timed")
    after = uvicorn.Config(lambda *a: None)
    after.load()
    assert not after.http_protocol_class.__name__.startswith("Timed")  # only inside


def test_the_api_search_cuts_off_as_the_page_does(served):
    """Only real matches come back: unrelated words are a "no match" (an empty list), not every
    memory ranked; a single Chinese character finds the memory that says it."""
    from datetime import datetime, timedelta

    key = served.signup("bobby")
    day = datetime(2024, 4, 28, 10, 0)
    for i, (said, reply) in enumerate(
        [
            ("I went hiking on the Dragon's Back trail on Saturday.", "Lovely views there."),
            ("My sister Lily visits next week.", "How nice!"),
            ("Today I started learning the violin.", "Wonderful!"),
            ("我的狗叫旺财，它三岁了。", "好可爱！"),
            ("我昨天去公园跑步了。", "很健康！"),
            ("我今天开始学做红烧肉。", "听起来很好吃！"),
        ]
    ):
        served.api.bank.add_turn("bobby", said, reply, day + timedelta(minutes=i))
    served.api.bank.settle()

    def search(q: str) -> list[str]:
        got = httpx.get(
            f"{served.url}/memories/search", params={"q": q}, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        assert got.status_code == 200, got.text
        return [m["text"].split("\n")[0] for m in got.json()["data"]]

    assert search("quantum physics banana") == []
    assert search("香蕉") == []
    assert search("violin") == ["Today I started learning the violin."]
    assert search("狗")[:1] == ["我的狗叫旺财，它三岁了。"]
