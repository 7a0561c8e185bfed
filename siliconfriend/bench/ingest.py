"""Ingest: turns per second stored and indexed when a MemoryBank file is imported.

The import is the real one (``import_bank``: parse, skip turns already there, embed, store, index,
daily summaries), into a fresh home. The embedder is wrapped to time its calls, so that the
result says where the time goes: embedding (the turns' messages and the daily summaries), or
everything else.

``turns_per_s`` counts the turns stored and indexed (found by their words and their messages'
vectors) when ``import_bank`` returns; the replies' vectors are made by the bank's reply worker
meanwhile and after, as a live turn's are: ``replies_done_s`` is when the last of them was stored,
and ``turns_per_s_with_replies`` the rate counted to then.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from memory.bank import MemoryBank
from memory.memorybank_format import import_bank

from .data import DialogueGenerator
from .fixtures import write_memorybank_file
from .turns import TimedEmbedder


def measure_ingest(embedder, turns: int, *, users: int = 2, seed: int = 7) -> dict:
    gen = DialogueGenerator(seed)
    timed = TimedEmbedder(embedder)
    with tempfile.TemporaryDirectory(prefix="sf-bench-ingest-") as tmp:
        path = Path(tmp) / "memory_bank.json"
        n = write_memorybank_file(path, gen, users, max(1, turns // users))
        bank = MemoryBank(Path(tmp) / "home", timed)
        try:
            start = time.perf_counter()
            counts = import_bank(bank, path)
            bank.flush()
            wall = time.perf_counter() - start
            bank.settle()
            done = time.perf_counter() - start
        finally:
            bank.close()
    stored = sum(counts.values())
    embed_s = timed.seconds["document"] + timed.seconds["query"]  # turns are on the query side
    return {
        "turns": stored,
        "file_turns": n,
        "seconds": round(wall, 3),
        "turns_per_s": round(stored / wall, 1) if wall else None,
        "replies_done_s": round(done, 3),
        "turns_per_s_with_replies": round(stored / done, 1) if done else None,
        "embed_s": round(embed_s, 3),
        "turns_embedded": timed.texts["query"],
        "summaries_embedded": timed.texts["document"],
        "replies_embedded": timed.texts["document_background"],
        "replies_embed_s": round(timed.seconds["document_background"], 3),
        "embed_ms_per_turn": round(1000 * embed_s / max(1, stored), 2),
        "other_s": round(wall - embed_s, 3),
        "turns_per_s_without_embedding": round(stored / (wall - embed_s), 1) if wall > embed_s else None,
    }
