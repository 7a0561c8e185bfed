"""When the LLM fails: nothing half-stored, a readable error, the message kept for a retry, and a
day whose summary failed stays pending until a later turn succeeds."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fakes import Clock

from memory.records import Kind
from siliconfriend.backends.base import BackendUnavailable
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion

DAY1 = datetime(2024, 5, 1, 19, 30)
DAY2 = datetime(2024, 5, 2, 20, 0)


class Down:
    """A chat backend whose server goes away, after ``after`` chunks."""

    name = "down"
    model = "down"
    context_tokens = 4096

    def __init__(self, after: int = 0):
        self.after = after

    def count_tokens(self, text: str) -> int:
        return len(text) // 4 + 1

    def stream(self, messages, *, max_tokens=None):
        for i in range(self.after):
            yield f"part{i} "
        raise BackendUnavailable("cannot reach the model server at http://127.0.0.1:9: start it or fix base_url")


class SummariesDown:
    """The real model for replies; the summaries fail (a server that times out on long prompts)."""

    name = "summaries-down"

    def __init__(self, real):
        self.real = real
        self.model = real.model
        self.context_tokens = real.context_tokens
        self.summary_calls = 0

    def count_tokens(self, text: str) -> int:
        return self.real.count_tokens(text)

    def stream(self, messages, *, max_tokens=None):
        if "summaries" in messages[0].content:
            self.summary_calls += 1
            raise BackendUnavailable("the model server timed out")
        return self.real.stream(messages, max_tokens=max_tokens)


@pytest.fixture
def clock():
    return Clock(DAY1)


def make(bank, backend, clock, tmp_path, tokens=6):
    return Companion(bank, backend, settings=Settings(home=tmp_path, max_new_tokens=tokens), clock=clock)


def test_a_failed_reply_stores_nothing_and_keeps_the_message(bank, smollm2_backend, clock, tmp_path):
    companion = make(bank, Down(), clock, tmp_path)
    stream = companion.respond("Maya", "I adopted a kitten called Pixel.")
    assert list(stream) == []
    result = stream.result
    assert result.turn is None and result.reply == ""
    assert "cannot reach the model server" in result.error and "not lost" in result.error
    assert result.text == "I adopted a kitten called Pixel."
    assert result.messages and result.messages[-1].content.endswith("\n\n" + result.text)
    assert companion.today("Maya") == []
    # the retry, with a model that works (per call)
    retry = companion.respond("Maya", result.text, backend=smollm2_backend).collect()
    assert retry.error is None and retry.turn is not None
    assert [t.query for t in companion.today("Maya")] == ["I adopted a kitten called Pixel."]


def test_a_failure_mid_reply_stores_no_half_turn(bank, clock, tmp_path):
    companion = make(bank, Down(after=2), clock, tmp_path)
    stream = companion.respond("Maya", "Tell me something.")
    assert list(stream) == ["part0 ", "part1 "]
    assert stream.result.error and stream.result.turn is None and stream.result.reply == "part0 part1"
    assert companion.today("Maya") == []


def test_a_failed_regenerate_keeps_the_previous_reply(bank, smollm2_backend, clock, tmp_path):
    companion = make(bank, smollm2_backend, clock, tmp_path)
    first = companion.respond("Maya", "Hello!").collect()
    result = companion.regenerate("Maya", backend=Down(after=1)).collect()
    assert result.error and result.turn is None
    assert [(t.id, t.response) for t in companion.today("Maya")] == [(first.turn.id, first.turn.response)]


class _Status500(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": "the GPU fell over", "type": "server_error"}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_openai_server_answering_500(bank, clock, tmp_path):
    pytest.importorskip("openai")
    from siliconfriend.backends.openai_chat import OpenAIChat

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Status500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        backend = OpenAIChat(
            "test-model", api_key="sk-test", base_url=f"http://127.0.0.1:{server.server_port}/v1", retries=0, timeout=10
        )
        result = make(bank, backend, clock, tmp_path).respond("Maya", "Hi there").collect()
    finally:
        server.shutdown()
    assert result.turn is None and result.error and "not lost" in result.error
    assert not bank.turns_on("Maya", DAY1.date())


def test_a_failed_summary_leaves_the_day_pending_and_it_is_retried(bank, smollm2_backend, clock, tmp_path):
    flaky = SummariesDown(smollm2_backend)
    companion = make(bank, flaky, clock, tmp_path, tokens=6)
    bank.add_turn("Maya", "I adopted a kitten called Pixel.", "Lovely!", DAY1)
    clock.now = DAY2
    stream = companion.respond("Maya", "Good evening!")
    result = stream.collect()
    assert result.error is None and result.turn is not None  # the reply still came
    report = stream.consolidation
    assert list(report.failed) == [DAY1.date()] and "timed out" in report.failed[DAY1.date()]
    assert not report.forgot and bank.get_summary("Maya", Kind.DAILY_EVENTS, DAY1.date()) is None
    calls = flaky.summary_calls
    # the next turn tries again; with the model back, the day is summarised
    clock.now = DAY2 + timedelta(minutes=5)
    stream = companion.respond("Maya", "Still there?", backend=smollm2_backend)
    stream.collect()
    assert stream.consolidation.summarised == [DAY1.date()] and calls >= 1
    assert bank.get_summary("Maya", Kind.DAILY_EVENTS, DAY1.date()) is not None
    assert bank.get_summary("Maya", Kind.GLOBAL_EVENTS) is not None
    # and not again on the turn after
    stream = companion.respond("Maya", "Good night.", backend=smollm2_backend)
    stream.collect()
    assert stream.consolidation is None
