"""The API's overhead: a turn through ``POST /v1/chat/completions`` against the same turn made
directly with the companion.

One companion (a backend that streams its prepared reply at once, a day rollover with nothing to
do, as in ``bench/turns.py``) over one user with a history; the API (``siliconfriend serve-api``'s
app) on a free port of 127.0.0.1 in this process, reached by an HTTP client with a per-user key.
Turns rotate between the direct path, the API without streaming and the API streaming (SSE), so
the three see the same history growth and the same machine load; each is timed from the message
sent to the turn stored (for the API: to the response's last byte).

Two overheads are reported. ``*_overhead``: for each API request, its time minus the time spent
inside the companion during that request (measured around ``respond`` and each step of its
stream), so the turn's own variation (the embedding, the search) cancels out; p50 and p95 of
those. ``*_minus_direct``: the API path's p50 (p95) minus the direct path's, which also carries
the turns' own spread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Sequence, cast

import numpy as np

from memory.bank import MemoryBank

from .data import DialogueGenerator
from .turns import TurnRunner

PATHS = ("direct", "api", "api_stream")


def _pct(values: Sequence[float]) -> dict:
    return {
        "p50": round(float(np.percentile(values, 50)), 2),
        "p95": round(float(np.percentile(values, 95)), 2),
        "n": len(values),
    }


class _TimedCompanion:
    """The companion, with the seconds spent inside it (``spent``) added up."""

    def __init__(self, companion):
        self._companion = companion
        self.spent = 0.0

    def __getattr__(self, name):
        return getattr(self._companion, name)

    def respond(self, *args, **kwargs):
        began = time.perf_counter()
        stream = self._companion.respond(*args, **kwargs)
        self.spent += time.perf_counter() - began
        return _TimedStream(stream, self)


class _TimedStream:
    def __init__(self, stream, owner: _TimedCompanion):
        self._stream, self._owner = stream, owner

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __iter__(self):
        chunks = iter(self._stream)
        while True:
            began = time.perf_counter()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            finally:
                self._owner.spent += time.perf_counter() - began
            yield chunk


def _serve(app) -> tuple[Any, threading.Thread, int]:
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="bench-api", daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.01)
    return server, thread, port


def measure_api_overhead(
    bank: MemoryBank, home: Path, user: str, gen: DialogueGenerator, *, turns: int, warmup: int, start
) -> dict:
    """``turns`` timed turns per path (after ``warmup`` each) for ``user`` of ``bank``."""
    import httpx

    from ..accounts.keys import ApiKeys
    from ..accounts.users import Accounts
    from ..api.routes import standalone_app
    from ..api.service import ApiService
    from ..config import Settings
    from ..core.companion import Companion

    runner = TurnRunner(bank)
    runner.now = start
    if runner.companion is None:
        return {"note": "the companion is not installed: API overhead not measured"}
    from argon2 import PasswordHasher

    accounts = Accounts.at(home / "accounts.db", hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    accounts.signup(user, "bench-password")
    settings = Settings(home=home, api_requests_per_minute=0)
    timed = _TimedCompanion(runner.companion)
    as_companion = cast(Companion, timed)  # the companion, its respond timed
    api = ApiService(settings, accounts, bank, companion=lambda: as_companion, keys=ApiKeys(accounts))
    key = api.keys.create(user, "bench").key
    server, thread, port = _serve(standalone_app(api))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    inside: dict[str, list[float]] = {p: [] for p in PATHS[1:]}  # ms in the companion, per API request
    try:
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            for i in range(3 * (warmup + turns)):
                path = PATHS[i % 3]
                lang = gen.lang()
                message, reply = gen.message(lang), gen.reply(lang)
                runner.backend.reply = reply
                body = {"model": "siliconfriend", "messages": [{"role": "user", "content": message}]}
                timed.spent = 0.0
                began = time.perf_counter()
                if path == "direct":
                    result = runner.companion.respond(user, message).collect()
                    ok = result.error is None and result.turn is not None
                elif path == "api":
                    r = http.post(url, json=body)
                    ok = r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == reply.strip()
                else:
                    with http.stream("POST", url, json={**body, "stream": True}) as r:
                        data = b"".join(r.iter_bytes())
                    ok = r.status_code == 200 and data.rstrip().endswith(b"data: [DONE]")
                spent = (time.perf_counter() - began) * 1000
                if not ok:
                    raise RuntimeError(f"the benchmark's {path} turn failed")
                if i >= 3 * warmup:
                    times[path].append(spent)
                    if path != "direct":
                        inside[path].append(timed.spent * 1000)
                runner.advance(20, i)
    finally:
        server.should_exit = True
        thread.join(10)
        accounts.close()
    out = {p: _pct(v) for p, v in times.items()}
    for p in ("api", "api_stream"):
        out[f"{p}_overhead"] = _pct([t - c for t, c in zip(times[p], inside[p])])
        out[f"{p}_minus_direct"] = {q: round(out[p][q] - out["direct"][q], 2) for q in ("p50", "p95")}
    return out


__all__ = ["measure_api_overhead", "PATHS"]
