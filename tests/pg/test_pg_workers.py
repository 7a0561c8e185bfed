"""Several workers over one PostgreSQL store: two real ``app.py`` processes (logins carry over,
what one stored the other retrieves, concurrent turns of one user lose nothing), the day
rollover once per user and day, and a database stopped mid-turn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
from app_process import wait_until_serving

from memory.bank import MemoryBank
from memory.records import Kind
from memory.stores.postgres import PostgresStores
from siliconfriend.config import Settings

ROOT = Path(__file__).resolve().parents[2]


class InstantOpenAI(ThreadingHTTPServer):
    """A local server speaking the OpenAI chat-completions protocol, streaming a reply at once and
    keeping every prompt it was sent."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.prompts: list[str] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.prompts.append("\n".join(m["content"] for m in body["messages"]))
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "Noted, friend."}, "finish_reason": None}
            ],
        }
        done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for part in (chunk, done):
            self.wfile.write(f"data: {json.dumps(part)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(home: Path, url: str, llm: InstantOpenAI) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {
        **os.environ,
        "SILICONFRIEND_HOME": str(home),
        "SILICONFRIEND_DATABASE_URL": url,
        "SILICONFRIEND_BACKEND": "openai",
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": llm.base_url,
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port)],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, f"http://127.0.0.1:{port}/"


def test_two_app_workers_over_one_database(tmp_path, pg_url):
    from gradio_client import Client

    llm = InstantOpenAI()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    workers = [_worker(tmp_path / "a", pg_url, llm), _worker(tmp_path / "b", pg_url, llm)]
    try:
        for proc, url in workers:
            wait_until_serving(url, proc, timeout=120)
        a, b = (Client(url, verbose=False) for _, url in workers)
        token, _, message = a.predict("dora", "dora-password", "en", api_name="/signup")
        assert token and not message
        assert b.predict(token, api_name="/whoami") == "dora"  # logged in on A, goes on on B
        a.predict(token, "I adopted a cat named Miso today", api_name="/chat")
        b.predict(token, "what is the name of my cat?", api_name="/chat")
        assert "Miso" in llm.prompts[-1]  # stored by A, retrieved by B
        errors: list[BaseException] = []

        def talk(client, who: str) -> None:
            try:
                for i in range(4):
                    client.predict(token, f"message {i} through worker {who}", api_name="/chat")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=talk, args=(c, w)) for c, w in ((a, "A"), (b, "B"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        _through_nginx([url for _, url in workers], tmp_path, token)
    finally:
        for proc, _ in workers:
            proc.terminate()
        for proc, _ in workers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        llm.shutdown()
    with psycopg.connect(pg_url) as con:
        rows = con.execute(
            "SELECT query, day, position FROM memories WHERE owner = 'dora' AND kind = 'turn' ORDER BY position"
        ).fetchall()
    assert len(rows) == 12  # concurrent turns: none lost
    assert len({(d, p) for _, d, p in rows}) == 12  # each in a place of its own
    assert {q for q, _, _ in rows} >= {f"message {i} through worker {w}" for i in range(4) for w in "AB"}
    assert not any(p.exists() for p in (tmp_path / "a" / "users", tmp_path / "a" / "accounts.db"))


def _through_nginx(worker_urls: list[str], tmp_path: Path, token: str) -> None:
    """docs/deploy/nginx.conf in front of the workers: each browser (its route cookie) sticks to
    one worker, replies stream through, and a login holds on every worker."""

    from gradio_client import Client

    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        pytest.skip("nginx is not installed (apt install nginx-light): the proxy config is not tested here")
    port = _free_port()
    conf = (ROOT / "docs" / "deploy" / "nginx.conf").read_text()
    conf = conf.replace("server 127.0.0.1:7861;", f"server {worker_urls[0][7:-1]};")
    conf = conf.replace("server 127.0.0.1:7862;", f"server {worker_urls[1][7:-1]};")
    conf = conf.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
    conf = conf.replace("/tmp/siliconfriend-nginx", str(tmp_path / "nginx"))
    (tmp_path / "nginx.conf").write_text(conf)
    proc = subprocess.Popen(
        [nginx, "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_serving(url, proc, timeout=20)
        seen: dict[str, str] = {}  # worker -> a route to it
        for n in range(16):
            headers = {"Cookie": f"sf_route=route-{n}"}
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=10) as r:
                worker = r.headers["X-SiliconFriend-Worker"]
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.headers["X-SiliconFriend-Worker"] == worker  # sticky
            seen.setdefault(worker, f"route-{n}")
        for _worker, route in seen.items():  # through each worker
            client = Client(url, verbose=False, headers={"Cookie": f"sf_route={route}"})
            assert client.predict(token, api_name="/whoami") == "dora"
            chat, _, _ = client.predict(token, f"hello through the proxy ({route})", api_name="/chat")
            assert "Noted, friend." in str(chat[-1]["content"])
        assert len(seen) == 2  # both workers serve
    finally:
        proc.terminate()
        proc.wait(10)


class CountingBackend:
    """Writes summaries slowly, counting them, so that two workers' rollovers overlap."""

    name, model, context_tokens = "counting", "counting", 4096

    def __init__(self):
        self.summaries = 0
        self.lock = threading.Lock()

    def stream(self, messages, *, max_tokens=None):
        if "summar" in messages[0].content.lower() or len(messages) == 2 and "dialogue" in messages[1].content.lower():
            with self.lock:
                self.summaries += 1
            time.sleep(0.2)
            yield "A quiet day with a cat."
        else:
            yield "Sure."

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1


def test_day_rollover_runs_once_across_workers(pg_url, e5_embedder):
    from siliconfriend.core.companion import Companion
    from siliconfriend.core.consolidate import Consolidator

    day1 = datetime(2024, 5, 1, 10, 0)
    settings = Settings(home=Path(tempfile.gettempdir()) / "unused-home")
    seed = MemoryBank(PostgresStores(pg_url), e5_embedder)
    for i in range(3):
        seed.add_turn("amy", f"talk {i} about my cat Miso", "nice", day1 + timedelta(minutes=i))
    seed.close()
    backends, companions = [], []
    for _ in range(2):  # two workers: their own pools, their own companions and in-process notes
        bank = MemoryBank(PostgresStores(pg_url), e5_embedder)
        backend = CountingBackend()
        consolidator = Consolidator(bank, backend)
        companions.append(
            Companion(
                bank, backend, settings=settings, clock=lambda: day1 + timedelta(days=1), consolidator=consolidator
            )
        )
        backends.append(backend)
    reports = []
    threads = [
        threading.Thread(
            target=lambda c=c: reports.append(c._rollover("amy", day1 + timedelta(days=1), "en", c.backend))
        )
        for c in companions
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    summarised = [r for r in reports if r is not None and r.summarised]
    assert len(summarised) == 1 and summarised[0].summarised == [day1.date()]
    total = sum(b.summaries for b in backends)
    assert total == 2  # the day's events and personality, once (one day: the global ones copy them)
    assert len(bank_summaries := companions[1].bank.summaries("amy", Kind.DAILY_PERSONALITY)) == 1, bank_summaries
    bank = companions[0].bank
    assert len(bank.summaries("amy", Kind.DAILY_EVENTS)) == 1
    for c in companions:
        c.bank.close()


def test_database_stopped_mid_turn_loses_no_committed_turn(e5_embedder):
    from pg_helpers import start_server

    from siliconfriend.core.companion import Companion

    folder = tempfile.mkdtemp(prefix="sf-pgstop-")
    server = start_server(folder)
    url = server.get_uri()
    now = datetime(2024, 5, 1, 10, 0)

    class StopsTheServer:
        name, model, context_tokens = "stops", "stops", 4096
        stop = False

        def stream(self, messages, *, max_tokens=None):
            yield "Half a reply"
            if self.stop:
                server.cleanup()  # the database goes away while the reply streams

        def count_tokens(self, text: str) -> int:
            return len(text) // 4 + 1

    backend = StopsTheServer()
    bank = MemoryBank(PostgresStores(url), e5_embedder)
    companion = Companion(bank, backend, settings=Settings(home=Path(folder) / "home"), clock=lambda: now)
    try:
        for i in range(3):
            stream = companion.respond("amy", f"committed message {i}")
            "".join(stream)
            assert stream.result.error is None and stream.result.turn is not None
        backend.stop = True
        stream = companion.respond("amy", "the message while the server stops")
        "".join(stream)
        assert stream.result.turn is None
        assert "could not be saved" in stream.result.error and "not available" in stream.result.error
        assert "Traceback" not in stream.result.error
        with pytest.raises(Exception, match="not available"):  # the next turn: a clear refusal
            "".join(companion.respond("amy", "anyone there?"))
    finally:
        bank.close()
    server = start_server(folder)  # back up: every committed turn is there
    bank = MemoryBank(PostgresStores(server.get_uri()), e5_embedder)
    try:
        assert [r.query for r in bank.records("amy", kind=Kind.TURN)] == [f"committed message {i}" for i in range(3)]
    finally:
        bank.close()
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)  # the server's data folder, 39 MB
