"""Helpers of the API tests (see conftest.py): the real API server (uvicorn on a free port of 127.0.0.1, one per
test module) over the real companion -- SQLite, FAISS, the e5 embedder, the day rollover -- with
``LocalBackend``, a chat backend in this process that answers at once (the model's words do not
matter here) and can be switched off like a model server that went away."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from argon2 import PasswordHasher
from fakes import Clock

FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


class LocalBackend:
    """Answers at once, in three chunks, with a sentence that names the user's last words; every
    prompt is recorded (``calls``); while ``fail`` is set, a call raises BackendUnavailable."""

    name = "local"
    model = "instant"
    context_tokens = 4096

    def __init__(self):
        self.calls: list[list] = []
        self.fail: str | None = None
        self.variant = ""  # added to every reply (a regenerate that says something else)
        self.limits: list = []  # each call's max_tokens
        self.long = False  # while set: a long reply of one-token chunks, as many as max_tokens allows
        # while an Event: after its first chunk a reply waits for it (up to 10 s), then streams 100
        # more chunks 20 ms apart -- a model still generating when its client goes away
        self.hold: threading.Event | None = None
        self.opening = "I hear you"  # a held reply's first chunk

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    def stream(self, messages, *, max_tokens=None):
        from siliconfriend.backends.base import BackendUnavailable

        if self.fail:
            raise BackendUnavailable(self.fail)
        self.calls.append(list(messages))
        self.limits.append(max_tokens)
        last = messages[-1].content.split("\n\n")[-1]  # the message, after the memories that come with it
        if self.hold is not None:
            return self._slow(self.hold)
        if self.long:
            return self._tokens(max_tokens)
        return iter(["I hear you", ": ", f"{' '.join(last.split()[:12])}.{self.variant}"])

    @staticmethod
    def _tokens(max_tokens):
        """A long reply, one token ("w0 ", "w1 "...) a chunk, up to 200 or ``max_tokens``."""
        for i in range(min(200, max_tokens or 200)):
            yield f"w{i} "

    def _slow(self, hold: threading.Event):
        yield self.opening
        hold.wait(10)
        for i in range(100):
            time.sleep(0.02)
            yield f" {i}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    url: str  # the base URL, ending in /v1
    api: object  # the ApiService
    backend: LocalBackend
    clock: Clock
    home: Path

    def signup(self, name: str) -> str:
        """A new account and an API key for it."""
        self.api.accounts.signup(name, f"{name}-password")
        return self.api.keys.create(name, "test").key


def start_uvicorn(app, port: int, **options):
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "the API server did not start"
        time.sleep(0.02)
    return server, thread


def client(served: Served, key: str, **options):
    """The official OpenAI SDK pointed at the server (no retries: a refusal is seen as it is)."""
    from openai import OpenAI

    return OpenAI(base_url=served.url, api_key=key, max_retries=0, timeout=30, **options)


def serve_api(home: Path, embedder, *, clock: Clock | None = None, bank=None, **settings_options):
    """``siliconfriend serve-api``'s app in this process over ``home`` (its memories in ``bank``
    if given: a PostgreSQL one): (Served, stop)."""
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.accounts.keys import ApiKeys
    from siliconfriend.accounts.users import Accounts
    from siliconfriend.api.routes import standalone_app
    from siliconfriend.api.service import ApiService
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_companion

    clock = clock or Clock(datetime(2024, 5, 1, 19, 0))
    backend = LocalBackend()
    settings = Settings(home=home, max_new_tokens=32, **{"api_requests_per_minute": 0, **settings_options})
    bank = bank if bank is not None else MemoryBank(SqliteStores(home), embedder)
    companion = build_companion(settings, clock=clock, backend=backend, bank=bank)
    accounts = Accounts.at(home / "accounts.db", hasher=FAST_HASHER)
    api = ApiService(settings, accounts, bank, companion=lambda: companion, keys=ApiKeys(accounts))
    port = free_port()
    server, thread = start_uvicorn(standalone_app(api), port)

    def stop():
        server.should_exit = True
        thread.join(10)
        bank.close()
        accounts.close()

    return Served(f"http://127.0.0.1:{port}/v1", api, backend, clock, home), stop


def assert_docs_work_offline(base: str) -> None:
    """``base``/v1/docs names only URLs of this server (Swagger UI's files, the OpenAPI
    description), and each of them serves: the page works without the internet."""
    import re

    import httpx

    page = httpx.get(f"{base}/v1/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert "://" not in page.text  # no CDN, no other host
    urls = re.findall(r"""(?:src|href)="([^"]+)"|url: '([^']+)'""", page.text)
    urls = [a or b for a, b in urls]
    assert sorted(urls) == sorted(
        [
            "/v1/docs/static/swagger-ui.css",
            "/v1/docs/static/favicon.png",
            "/v1/docs/static/swagger-ui-bundle.js",
            "/v1/openapi.json",
        ]
    ), urls
    for url in urls:
        got = httpx.get(base + url)
        assert got.status_code == 200 and len(got.content) > 1000, url
    assert "javascript" in httpx.get(f"{base}/v1/docs/static/swagger-ui-bundle.js").headers["content-type"]


__all__ = [
    "assert_docs_work_offline",
    "Clock",
    "LocalBackend",
    "Served",
    "client",
    "free_port",
    "start_uvicorn",
    "serve_api",
    "FAST_HASHER",
]
