"""The overhead of a chat turn: everything a turn does besides the LLM's generation.

A turn runs through the companion itself (``Companion.respond``) with a backend that "generates"
a prepared reply at once, so what is timed is the companion's own work: the day check, today's
history, the query embedding, the hybrid retrieval, the prompt built and fitted to the model's
budget, then, once the reply is complete, the turn stored with its document embedding and the
memories used reinforced. The day rollover's summaries are LLM work done once a day per user, so
the benchmark's companion gets a consolidator that has nothing to do.

Each turn is split where the user sees it: ``before`` (message in, prompt ready: what delays the
first token) and ``after`` (reply complete, turn stored). Where the companion is not installed,
the same steps run through the memory bank directly (``path: "bank"``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from memory.bank import MemoryBank

from ..backends.openai_chat import estimate_tokens
from ..core.consolidate import ConsolidationReport, Consolidator
from .data import DialogueGenerator

_TIMED_KINDS = ("document", "query", "document_background", "query_background")


class TimedEmbedder:
    """Wraps an embedder; adds up the seconds spent embedding documents and queries. Work done on
    another thread than the one that made it (the bank's reply worker, off the turn's clock) is
    counted apart, under ``"document_background"`` / ``"query_background"``."""

    def __init__(self, inner):
        self.inner = inner
        self.id, self.dim = inner.id, inner.dim
        self._owner = threading.get_ident()
        self.reset()

    def reset(self) -> None:
        """Counting from now."""
        self.seconds = {k: 0.0 for k in _TIMED_KINDS}
        self.texts = {k: 0 for k in _TIMED_KINDS}
        self.calls = {k: 0 for k in _TIMED_KINDS}

    def embed(self, texts, *, kind):
        return self._timed(self.inner.embed)(texts, kind=kind)

    def _timed(self, call):
        def timed(texts, *args, kind):
            start = time.perf_counter()
            try:
                return call(texts, *args, kind=kind)
            finally:
                bucket = kind if threading.get_ident() == self._owner else f"{kind}_background"
                self.seconds[bucket] += time.perf_counter() - start
                self.texts[bucket] += len(texts)
                self.calls[bucket] += 1

        return timed


class InstantBackend:
    """A chat backend whose reply is set before each turn and streamed at once."""

    name = "bench"
    model = "prepared-reply"
    context_tokens = 4096

    def __init__(self):
        self.reply = ""

    def stream(self, messages, *, max_tokens: int | None = None):
        yield self.reply

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)


class _NothingToConsolidate(Consolidator):
    """The day rollover with nothing to summarise (its LLM calls are not a turn's overhead)."""

    def run(self, user: str, now: datetime, **_) -> ConsolidationReport:
        return ConsolidationReport(user)


@dataclass
class TurnTimes:
    before: list[float] = field(default_factory=list)  # ms, message in -> prompt ready
    after: list[float] = field(default_factory=list)  # ms, reply complete -> turn stored
    embed_query: list[float] = field(default_factory=list)  # ms of each turn in the embedder
    embed_document: list[float] = field(default_factory=list)
    reply_vector: list[float] = field(default_factory=list)  # ms, turn stored -> its reply's vector stored

    @property
    def total(self) -> list[float]:
        return [b + a for b, a in zip(self.before, self.after)]

    def summary(self) -> dict:
        def pct(values: Sequence[float]) -> dict:
            return (
                {"p50": round(float(np.percentile(values, 50)), 2), "p95": round(float(np.percentile(values, 95)), 2)}
                if values
                else {"p50": None, "p95": None}
            )

        return pct(self.total) | {
            "n": len(self.before),
            "before_reply": pct(self.before),
            "after_reply": pct(self.after),
            "embed_query": pct(self.embed_query),
            "embed_document": pct(self.embed_document),
            "reply_vector": pct(self.reply_vector),
        }


def over_query(summary: dict, alone_ms: float | None = None) -> dict | None:
    """A turn's p50 and p95 (``TurnTimes.summary``) over that run's own e5 query p50, timed in
    the turns: the machine's speed cancels out. With ``alone_ms`` (``e5_query_alone``), the turn
    over that too (``*_over_alone``)."""
    query = (summary.get("embed_query") or {}).get("p50")
    if not query:
        return None
    out = {"p50": round(summary["p50"] / query, 2), "p95": round(summary["p95"] / query, 2), "e5_query_ms": query}
    if alone_ms:
        out |= {
            "e5_query_alone_ms": round(alone_ms, 2),
            "p50_over_alone": round(summary["p50"] / alone_ms, 2),
            "p95_over_alone": round(summary["p95"] / alone_ms, 2),
        }
    return out


def alone_text(ratio: dict) -> str:
    """The turn over the query alone (``over_query``), as the bench tables show it."""
    if not ratio.get("p50_over_alone"):
        return ""
    return f" ({ratio['p50_over_alone']}x / {ratio['p95_over_alone']}x the query alone)"


def e5_query_alone(embedder, seed: int, n: int = 100, warmup: int = 10) -> float:
    """The p50 ms of one message embedded as a query with nothing else running, in this run.
    Inside a turn the query shares the machine with the turn's own threads (the lexical sides
    read beside it), so it takes longer than alone; the turn over this time counts all that
    the turn costs beyond the query's own work (docs/benchmarks-journal.md, "The e5 pass in one call")."""
    gen = DialogueGenerator(seed)
    times = []
    for i in range(warmup + n):
        message = gen.message(gen.lang())
        tick = time.perf_counter()
        embedder.embed([message], kind="query")
        if i >= warmup:
            times.append((time.perf_counter() - tick) * 1000)
    return float(np.percentile(times, 50))


class TurnRunner:
    """Runs timed turns for any user of ``bank``, with a clock the benchmark moves forward."""

    def __init__(self, bank: MemoryBank, *, lang: str = "en"):
        self.bank = bank
        self.backend = InstantBackend()
        self.now = datetime(2030, 1, 1, 19, 0)
        self.path = "companion"
        try:
            from ..config import Settings
            from ..core.companion import Companion
        except ImportError:
            self.companion = None
            self.path = "bank"
        else:
            settings = Settings(home=Path(), lang=lang, max_new_tokens=256)  # the home is not read
            self.companion = Companion(
                bank,
                self.backend,
                settings=settings,
                clock=lambda: self.now,
                consolidator=_NothingToConsolidate(bank, self.backend),
            )

    def turn(self, user: str, message: str, reply: str, lang: str = "en") -> tuple[float, float]:
        """One turn; returns (before, after) in milliseconds."""
        self.backend.reply = reply
        if self.companion is None:
            return self._bank_turn(user, message, reply)
        start = time.perf_counter()
        stream = self.companion.respond(user, message, lang=lang)
        chunks = iter(stream)
        next(chunks)  # the prompt is built: the reply's first token
        ready = time.perf_counter()
        for _ in chunks:
            pass
        done = time.perf_counter()
        result = stream.result
        if result is None or result.error or result.turn is None:
            raise RuntimeError(f"the benchmark turn failed: {result.error if result else 'no result'}")
        return (ready - start) * 1000, (done - ready) * 1000

    def _bank_turn(self, user: str, message: str, reply: str) -> tuple[float, float]:
        """The same steps through the bank: history, retrieval, a dated prompt, store, reinforce."""
        start = time.perf_counter()
        history = self.bank.turns_on(user, self.now.date())[-20:]
        exclude = {t.id for t in history}
        k = self.bank.retrieval_config.k
        hits = [
            h for h in self.bank.retrieve(user, message, self.now, k=k + len(exclude)) if h.record.id not in exclude
        ][:k]
        lines = [f"- {h.record.day.isoformat()}: {h.record.text[:400]}" for h in hits]
        turns = [f"{t.query}\n{t.response}" for t in history]
        prompt = "\n".join(["Memories:", *lines, "Today:", *turns, message])
        estimate_tokens(prompt)
        ready = time.perf_counter()
        self.bank.add_turn(user, message, reply, self.now)
        if hits:
            self.bank.reinforce(user, [h.record.stored_id for h in hits], self.now)
        done = time.perf_counter()
        return (ready - start) * 1000, (done - ready) * 1000

    def advance(self, turns_per_day: int, i: int) -> None:
        """The next turn's time: a few minutes later, the next evening after ``turns_per_day``."""
        if (i + 1) % turns_per_day == 0:
            self.now = datetime.combine(self.now.date() + timedelta(days=1), self.now.time().replace(hour=19, minute=0))
        else:
            self.now += timedelta(minutes=3)


def run_turns(
    bank: MemoryBank,
    pick_user: Callable[[int], str],
    turns: int,
    warmup: int,
    gen: DialogueGenerator,
    *,
    start: datetime,
    turns_per_day: int = 20,
) -> tuple[TurnTimes, str]:
    """``warmup`` untimed turns, then ``turns`` timed ones; ``pick_user(i)`` names each turn's user.
    With a ``TimedEmbedder`` in the bank, each turn's time in the embedder is recorded too.

    After each turn the bank's reply worker is let finish the turn's reply vector (``settle``)
    before the next message, as it does while a person reads the reply and types: that time is
    recorded apart (``reply_vector``), not in the turn's. Messages sent faster than that (many
    users on one server) are what the PostgreSQL bench's turns/s measure."""
    runner = TurnRunner(bank)
    runner.now = start
    times = TurnTimes()
    timed = bank.embedder if isinstance(bank.embedder, TimedEmbedder) else None
    for i in range(warmup + turns):
        lang = gen.lang()
        message, reply = gen.message(lang), gen.reply(lang)
        spent = dict(timed.seconds) if timed else {}
        before, after = runner.turn(pick_user(i), message, reply, lang)
        stored = time.perf_counter()
        bank.settle()
        if i >= warmup:
            times.reply_vector.append((time.perf_counter() - stored) * 1000)
            times.before.append(before)
            times.after.append(after)
            if timed:
                times.embed_query.append(1000 * (timed.seconds["query"] - spent["query"]))
                times.embed_document.append(1000 * (timed.seconds["document"] - spent["document"]))
        runner.advance(turns_per_day, i)
    return times, runner.path
