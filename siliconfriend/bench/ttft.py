"""Time to the first word of a reply over one day's conversation, with the packaged model.

One user with a history (retrieval finds memories), one day of ``turns`` messages through the
companion and the packaged SmolLM2 (greedy, on the CPU). At each turn: the time from the message
to the reply's first text (``ttft``: the person's wait, with the kept prompt prefix), and the
prompt's tokens, all of them and those processed (the rest came from the previous turn's KV
cache). Then the same prompt once more without the kept prefix, to its first text only: what the
turn would have waited without reuse, on the same machine a moment later.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from memory.bank import MemoryBank

from ..config import Settings
from ..core.companion import Companion
from .data import DialogueGenerator
from .turns import _NothingToConsolidate

REPORTED = (1, 5, 10)  # the turns whose numbers are reported by name


def packaged_model_missing() -> str | None:
    """Why the TTFT part cannot run here (None when it can)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from ..backends.hf.loader import smollm2_gguf_path

        smollm2_gguf_path()
    except (ImportError, FileNotFoundError) as exc:
        return f"time to first token skipped: {exc}"
    return None


def measure_ttft(
    bank: MemoryBank,
    user: str,
    gen: DialogueGenerator,
    *,
    start: datetime,
    turns: int = 12,
    reply_tokens: int = 64,
    backend=None,
    log: Callable[[str], None] = lambda s: None,
) -> dict:
    """One day of ``turns`` turns of ``user`` (who has memories in ``bank``) starting at ``start``."""
    if backend is None:
        from ..backends.hf.chat import HFLocalChat

        backend = HFLocalChat("smollm2", temperature=0, max_new_tokens=reply_tokens, device="cpu")
    now = [start]
    settings = Settings(home=Path(), lang="en", max_new_tokens=reply_tokens)  # the home is not read
    companion = Companion(
        bank,
        backend,
        settings=settings,
        clock=lambda: now[0],
        consolidator=_NothingToConsolidate(bank, backend),
    )
    rows = []
    for i in range(1, turns + 1):
        message = gen.message("en")
        tick = time.perf_counter()
        stream = companion.respond(user, message, lang="en")
        chunks = iter(stream)
        next(chunks, None)
        ttft = (time.perf_counter() - tick) * 1000
        used = dict(getattr(backend, "last_prompt", {}) or {})
        for _ in chunks:
            pass
        result = stream.result
        if result is None or result.error or result.turn is None:
            raise RuntimeError(f"the TTFT turn failed: {result.error if result else 'no result'}")
        # the same prompt without the kept prefix, to its first text
        tick = time.perf_counter()
        cold = backend.stream(result.messages, max_tokens=reply_tokens)
        next(cold, None)
        ttft_cold = (time.perf_counter() - tick) * 1000
        cold.close()
        bank.settle()
        rows.append(
            {
                "turn": i,
                "ttft_ms": round(ttft, 1),
                "ttft_ms_without_reuse": round(ttft_cold, 1),
                "prompt_tokens": used.get("total"),
                "processed": used.get("processed"),
                "cached": (used["total"] - used["processed"]) if used else None,
                "server_cached": used.get("server_cached"),
                "reply_chars": len(result.reply),
            }
        )
        log(
            f"turn {i}: first text after {ttft:.0f} ms ({ttft_cold:.0f} ms without reuse), "
            f"{used.get('processed')} of {used.get('total')} prompt tokens processed"
        )
        now[0] += timedelta(minutes=3)
    return summarize(rows, reply_tokens)


def summarize(rows: list[dict], reply_tokens: int) -> dict:
    by = {r["turn"]: r for r in rows}
    first = by.get(1)
    out: dict = {
        "ttft_ms": {f"turn{n}": by[n]["ttft_ms"] for n in REPORTED if n in by},
        "ttft_ms_without_reuse": {f"turn{n}": by[n]["ttft_ms_without_reuse"] for n in REPORTED if n in by},
        "prompt_tokens": {
            f"turn{n}": {"processed": by[n]["processed"], "total": by[n]["prompt_tokens"]} for n in REPORTED if n in by
        },
        "turns": rows,
        "reply_tokens": reply_tokens,
    }
    if first and 10 in by and first["ttft_ms"]:
        ten = by[10]
        out["ttft_turn10_over_turn1"] = round(ten["ttft_ms"] / first["ttft_ms"], 2)
        out["ttft_turn10_over_turn1_without_reuse"] = round(
            ten["ttft_ms_without_reuse"] / max(first["ttft_ms_without_reuse"], 1e-9), 2
        )
        if ten["prompt_tokens"]:
            out["processed_share_turn10"] = round(ten["processed"] / ten["prompt_tokens"], 3)
    return out
