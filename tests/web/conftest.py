"""Fixtures for the web app tests: the real companion -- the default e5-small embedder and the
packaged SmolLM2 (loaded once per session by ``smollm2_backend`` in tests/conftest.py), with short
replies -- and the app served on a free port of 127.0.0.1.

The model is reached through ``FailSwitch``, a thin wrapper that records the prompts it is given and
counts the chunks it streams, and whose ``fail`` makes a call raise ``BackendUnavailable`` before the
model is reached (a model server that went away). Everything else is the real thing."""

from __future__ import annotations

import socket
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from fakes import Clock

from memory.bank import MemoryBank
from memory.stores.sqlite import SqliteStores

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # app.py lives at the repository root
    sys.path.insert(0, str(ROOT))

FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
REPLY_TOKENS = 8  # replies and summaries: short, so that the CPU model is quick


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FailSwitch:
    """The real model, with every prompt it was given recorded (``calls``: the messages) and the
    chunks it streamed counted (``chunks``); while ``fail`` is set, a call raises BackendUnavailable
    before the model is reached."""

    def __init__(self, real):
        self.real = real
        self.name = real.name
        self.model = real.model
        self.context_tokens = real.context_tokens
        self.fail: str | None = None
        self.calls: list[list] = []
        self.chunks = 0

    def count_tokens(self, text: str) -> int:
        return self.real.count_tokens(text)

    def stream(self, messages, *, max_tokens=None):
        from siliconfriend.backends.base import BackendUnavailable

        if self.fail:
            raise BackendUnavailable(self.fail)
        self.calls.append(list(messages))
        return self._counted(self.real.stream(messages, max_tokens=max_tokens))

    def _counted(self, chunks):
        try:
            for chunk in chunks:
                self.chunks += 1
                yield chunk
        finally:
            chunks.close()  # a stopped reply ends the model's generation at its next token


def join_generations(timeout: float = 60) -> None:
    """Wait for the model's generation threads to end. A stopped reply leaves its thread to finish
    the current token on its own; a process that exits meanwhile aborts ("terminate called without
    an active exception", exit status 134), and the thread holds the model lock the next test waits
    for."""
    for thread in threading.enumerate():
        if thread.name == "hf-generate":
            thread.join(timeout)
            assert not thread.is_alive(), "a generation did not stop"


@pytest.fixture(scope="package", autouse=True)
def one_model_thread():
    """One intra-op thread for PyTorch (SmolLM2 and the e5 embedder) while these tests run. Here
    the server, the client, the generation thread (and a browser) share one process, on a 2-core
    machine often busy with other jobs: with two threads each step of the
    model stalls whenever one of them waits for a core (measured at load 4: a 231-token prompt and 8
    new tokens took 0.9 s with one thread, 6-11 s with two). Restored afterwards."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    join_generations()
    torch.set_num_threads(before)


@pytest.fixture
def web_clock():
    return Clock(datetime(2024, 5, 4, 10, 0))


def make_service(home: Path, embedder, model, clock, **settings_options):
    """A WebService with the real companion over ``model`` (a FailSwitch); returns (service, bank, accounts)."""
    from siliconfriend.accounts.users import Accounts
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_companion, build_web_service

    settings = Settings(home=home, backend="hf", model="smollm2", max_new_tokens=REPLY_TOKENS, **settings_options)
    bank = MemoryBank(SqliteStores(settings.home), embedder)
    companion = build_companion(settings, clock=clock, backend=model, bank=bank)
    accounts = Accounts.at(settings.home / "accounts.db", hasher=FAST_HASHER, signup_open=settings.signup_open)
    return build_web_service(settings, accounts=accounts, companion=companion, clock=clock), bank, accounts


@pytest.fixture
def web_service(tmp_path, e5_embedder, smollm2_backend, web_clock):
    service, bank, accounts = make_service(tmp_path / "home", e5_embedder, FailSwitch(smollm2_backend), web_clock)
    service.exports.export_dir = tmp_path / "exports"
    yield service
    join_generations()
    bank.close()
    accounts.close()


@pytest.fixture
def served_app(web_service):
    """The app on a free port, in this process, with the real companion."""
    import app as web_app

    demo = web_app.build_app(web_service)
    port = free_port()
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", web_service
    demo.close()


__all__ = ["Clock", "FailSwitch", "free_port", "make_service", "FAST_HASHER", "REPLY_TOKENS"]
