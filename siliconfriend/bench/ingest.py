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

import json
import tempfile
import time
from pathlib import Path

from memory.bank import MemoryBank
from memory.memorybank_format import import_bank
from memory.stores.sqlite import SqliteStores

from .data import DialogueGenerator
from .fixtures import write_memorybank_file
from .turns import TimedEmbedder


def measure_ingest(embedder, turns: int, *, users: int = 2, seed: int = 7) -> dict:
    gen = DialogueGenerator(seed)
    timed = TimedEmbedder(embedder)
    with tempfile.TemporaryDirectory(prefix="sf-bench-ingest-") as tmp:
        path = Path(tmp) / "memory_bank.json"
        n = write_memorybank_file(path, gen, users, max(1, turns // users))
        bank = MemoryBank(SqliteStores(Path(tmp) / "home"), timed)
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


def _long_replies(gen: DialogueGenerator, users: int, turns_per_user: int) -> dict:
    """A MemoryBank file whose replies run as long as an assistant's (five of the generator's
    replies in one: several hundred characters to a few thousand)."""
    data = gen.memorybank_file(users, turns_per_user)
    for body in data.values():
        for turns in body["history"].values():
            for turn in turns:
                zh = any("\u4e00" <= c <= "\u9fff" for c in turn["response"])
                more = [gen.reply("zh" if zh else "en") for _ in range(4)]
                turn["response"] = ("" if zh else " ").join([turn["response"], *more])
    return data


def measure_import_speed(
    embedder, turns: int = 300, *, users: int = 2, seed: int = 11, rounds: int = 2, ways: bool = False
) -> dict:
    """A MemoryBank file with assistant-length replies (``_long_replies``) imported whole (turns, summaries and the
    reply vectors, until ``settle``) with the engine's batches run on single-threaded workers side
    by side (now) and one after the other on every core through PyTorch's threads (before), the
    two ways alternating ``rounds`` times in this process; characters (messages and replies) per
    second each way, and the vectors' cosine to the float32 engine's. ``ways``: the faster ways of
    ``embed_ways`` weighed on the same texts too, each against the engine as it is (key ``ways``)."""
    import os

    import numpy as np

    from memory.embedders import TorchE5Embedder
    from memory.memorybank_format import parse_bank

    if not isinstance(embedder, TorchE5Embedder):
        return {"skipped": f"only the PyTorch e5 engine has the two ways ({embedder.id})"}
    gen = DialogueGenerator(seed)
    workers = embedder.batch_workers or (os.cpu_count() or 1)
    runs: dict[str, list[dict]] = {"before": [], "now": []}
    with tempfile.TemporaryDirectory(prefix="sf-bench-import-") as tmp:
        path = Path(tmp) / "memory_bank.json"
        path.write_text(json.dumps(_long_replies(gen, users, max(1, turns // users)), ensure_ascii=False), "utf-8")
        parsed = parse_bank(path)
        texts = [t for p in parsed for q, r, *_ in p.turns for t in (q, r) if t.strip()]
        chars = sum(len(t) for t in texts)
        load = [round(os.getloadavg()[0], 2)]
        try:
            for i in range(2 * rounds):
                way = "before" if i % 2 == 0 else "now"
                embedder.batch_workers = 0 if way == "before" else workers
                timed = TimedEmbedder(embedder)
                bank = MemoryBank(SqliteStores(Path(tmp) / f"home{i}"), timed)
                try:
                    start = time.perf_counter()
                    import_bank(bank, path)
                    bank.settle()
                    seconds = time.perf_counter() - start
                finally:
                    bank.close()
                embed_s = sum(timed.seconds.values())
                runs[way].append(
                    {"seconds": round(seconds, 3), "chars_per_s": round(chars / seconds), "embed_s": round(embed_s, 3)}
                )
            load.append(round(os.getloadavg()[0], 2))
            sample = texts[:: max(1, len(texts) // 200)]
            fast = embedder.embed(sample, kind="document")
        finally:
            embedder.batch_workers = workers
    reference = TorchE5Embedder(dtype="float32", batch_workers=0).embed(sample, kind="document")
    weighed = None
    if ways:
        from .embed_ways import weigh_ways

        messages = [q for p in parsed for q, *_ in p.turns if q.strip()]
        replies = [r for p in parsed for _, r, *_ in p.turns if r.strip()]
        weighed = weigh_ways(embedder._model, messages, replies, rounds=rounds, workers=workers)
    cosines = (fast * reference).sum(axis=1)

    def rate(way: str) -> float:  # every run of the way: its characters over its seconds
        return round(chars * len(runs[way]) / sum(r["seconds"] for r in runs[way]))

    def best(way: str) -> float:
        return max(r["chars_per_s"] for r in runs[way])

    return {
        "turns": sum(len(p.turns) for p in parsed),
        "chars": chars,
        "reply_chars_median": int(np.median([len(r) for p in parsed for _, r, *_ in p.turns if r.strip()])),
        "workers": workers,
        "dtype": embedder.dtype,
        "before": runs["before"],
        "now": runs["now"],
        "chars_per_s": rate("now"),
        "chars_per_s_before": rate("before"),
        "speedup_per_char": round(rate("now") / rate("before"), 2),
        # the fastest run of each way: what the two give when the machine happened to be quiet
        "speedup_best_runs": round(best("now") / best("before"), 2),
        # the reply worker embeds while the import stores: the share can pass 1 a little
        "embed_share": round(min(r["embed_s"] / r["seconds"] for r in runs["now"]), 3),
        "cosine_to_float32": {
            "min": round(float(cosines.min()), 5),
            "mean": round(float(cosines.mean()), 5),
            "texts": len(sample),
        },
        "load_avg_1m": load,
        "ways": weighed,
    }
