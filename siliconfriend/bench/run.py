"""The benchmark as a whole: what is measured at which size, the result, and its table.

``run_bench(FULL)`` measures turn overhead for one user with 1k, 10k and 100k memories and for a
home of 1,000 users x 1,000 memories; ingest; restart, cold start and resident memory in fresh
processes with the 100k user; and recall@5 on the MemoryBank evaluation sets. ``QUICK`` does the
same paths at small sizes; ``sizes`` in the result says what each number was measured on.
"""

from __future__ import annotations

import os
import platform
import random
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import date, datetime
from datetime import time as dtime
from pathlib import Path
from typing import Callable

from memory.bank import MemoryBank
from memory.embedders import create_embedder, embed_replies, embed_turns
from memory.stores.sqlite import SqliteStores

from .api import measure_api_overhead
from .data import DialogueGenerator
from .fixtures import fill_user, many_users, reply_vector_pool, vector_pool
from .ingest import measure_import_speed, measure_ingest
from .process import measure_process
from .turns import TimedEmbedder, alone_text, e5_query_alone, over_query, run_turns

END = date(2030, 1, 1)  # the synthetic histories end the day before; benchmark turns start here
SEED = 20240501


@dataclass(frozen=True)
class BenchConfig:
    name: str
    single: tuple[tuple[str, int], ...]  # (key, memories) of single-user runs
    many: tuple[int, int]  # users x memories each, for the "1000x1k" key
    turns: int  # timed turns per run
    warmup: int
    pool: int  # real document vectors the synthetic ones are made of
    ingest_turns: int
    restart_runs: int  # fresh processes; the median is reported
    reembed_sample: int
    recall: bool
    eval_dir: Path | None = None  # the MemoryBank evaluation sets (en/, cn/)
    labels: str = "labels_dev_{lang}.jsonl"
    max_open_users: int = 64
    embedder: str = "e5"
    # the second reader (Settings.second_reader) of the single-user turns, its vectors made as
    # the reply worker makes them; "": the embedder alone
    second_reader: str = "use"
    api_memories: int = 1_000  # the user the API's overhead is measured on
    ttft_turns: int = 12  # one day of turns with the packaged model (0: skipped)
    only: str | None = None  # one part alone: "ttft", "100k" (the 100k turn), "import"
    import_turns: int = 150  # the import measured both ways (assistant-length replies)


FULL = BenchConfig(
    "full",
    single=(("1k", 1_000), ("10k", 10_000), ("100k", 100_000)),
    many=(1_000, 1_000),
    turns=200,
    warmup=10,
    pool=384,
    ingest_turns=600,
    restart_runs=3,
    reembed_sample=200,
    recall=True,
)
QUICK = BenchConfig(
    "quick",
    single=(("1k", 1_000),),
    many=(100, 1_000),
    turns=40,
    warmup=5,
    pool=32,
    ingest_turns=60,
    restart_runs=1,
    reembed_sample=20,
    recall=False,
    ttft_turns=0,
    import_turns=40,
)
TURN_KEYS = ("1k", "10k", "100k", "1000x1k")


def default_eval_dir() -> Path | None:
    """``../shared/data/memorybank_eval`` beside the project (where the evaluation sets live)."""
    here = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), here):
        candidate = base.parent / "shared" / "data" / "memorybank_eval"
        if candidate.is_dir():
            return candidate
    return None


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (None, None, None)
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m": round(load[0], 2) if load[0] is not None else None,
    }


def _recall(config: BenchConfig, embedder) -> tuple[dict, str | None]:
    if not config.recall:
        return {"en": None, "cn": None}, "recall skipped in --quick (the evaluation imports ~1,100 turns)"
    folder = config.eval_dir or default_eval_dir()
    if folder is None or not folder.is_dir():
        return {"en": None, "cn": None}, "recall skipped: no ../shared/data/memorybank_eval folder here"
    from .retrieval_eval import evaluate_retrieval

    out, missing = {}, []
    for lang in ("en", "cn"):
        bank_file, labels = folder / lang / f"memory_bank_{lang}.json", folder / lang / config.labels.format(lang=lang)
        if bank_file.exists() and labels.exists():
            out[lang] = evaluate_retrieval(bank_file, labels, embedder)["recall@5"]
        else:
            out[lang] = None
            missing.append(lang)
    return out, (f"recall skipped for {', '.join(missing)}: evaluation files missing" if missing else None)


def run_bench(
    config: BenchConfig = FULL, *, log: Callable[[str], None] = lambda s: None, workdir: Path | None = None
) -> dict:
    started = time.perf_counter()
    gen = DialogueGenerator(SEED)
    embedder = create_embedder(config.embedder)
    result: dict = {
        "config": config.name,
        "embedder": embedder.id,
        "machine": machine(),
        "turn_ms": {k: None for k in TURN_KEYS},
        # each turn's p50 and p95 over that run's own e5 query p50 (the machine's speed cancels out)
        "turn_over_e5_query": {k: None for k in TURN_KEYS},
        "import_speed": None,  # characters per second imported, now and before (ingest.py)
        "ttft_ms": None,  # the first word of a reply at turns 1, 5, 10 of a day (ttft.py)
        "prompt_tokens": None,
        # the single-user turns' second reader: which, its calls a turn (the message and each line
        # of the talk not kept, where the words said little) and its ms a turn on the turn's thread
        "second_reader": {},
        "sizes": {},
        "notes": [],
        "phases_s": {},
    }
    tmp = tempfile.TemporaryDirectory(prefix="sf-bench-", dir=workdir)
    root = Path(tmp.name)
    try:
        tick = time.perf_counter()
        log(f"embedding {config.pool} generated turns for the vector pool")
        scratch = MemoryBank(SqliteStores(root / "scratch"), embedder)
        pool = vector_pool(scratch, gen, config.pool)
        replies = reply_vector_pool(scratch, gen, config.pool)
        scratch.close()
        second, second_pools = None, None
        if config.second_reader:
            # its own generator: the histories stay those of runs without it
            reader = create_embedder(config.second_reader)
            second_gen = DialogueGenerator(SEED + 2)
            texts = [second_gen.turn() for _ in range(config.pool)]
            second_pools = (embed_turns(reader, [q for q, _ in texts]), embed_replies(reader, [a for _, a in texts]))
            result["second_reader"]["reader"] = reader.id
        result["phases_s"]["pool"] = round(time.perf_counter() - tick, 1)
        start_turns = datetime.combine(END, dtime(19, 0))

        if config.ttft_turns and config.only in (None, "ttft"):
            _ttft(config, result, root, embedder, gen, pool, replies, start_turns, log)
        else:
            result["notes"].append("time to first token skipped (a day with the packaged model takes minutes)")
        if config.only == "ttft":
            return finish(result, started)

        if config.only == "import":
            _import_speed(config, result, embedder, log)
            return finish(result, started)

        if config.only == "restart":
            key, size = config.single[-1]
            tick = time.perf_counter()
            home = root / f"single-{key}"
            bank = MemoryBank(SqliteStores(home), embedder, max_open_users=config.max_open_users)
            log(f"writing one user with {size:,} memories")
            fill_user(bank, "big", size, gen, pool, end=END, seed=size, reply_pool=replies)
            bank.close()
            result["phases_s"]["fill"] = round(time.perf_counter() - tick, 1)
            _restart(config, result, home, size, gen, start_turns, log)
            return finish(result, started)

        largest: tuple[Path, int] | None = None
        for key, size in config.single:
            if config.only == "100k" and key != "100k":
                continue
            tick = time.perf_counter()
            home = root / f"single-{key}"
            if config.second_reader:
                second = TimedEmbedder(reader)
            bank = MemoryBank(
                SqliteStores(home), TimedEmbedder(embedder), max_open_users=config.max_open_users, second=second
            )
            log(f"writing one user with {size:,} memories")
            fill_user(bank, "big", size, gen, pool, end=END, seed=size, reply_pool=replies, second_pools=second_pools)
            log(f"{config.turns} turns at {key}")
            if second is not None:
                second.reset()
            times, path = run_turns(bank, lambda i: "big", config.turns, config.warmup, gen, start=start_turns)
            bank.close()
            if second is not None:
                ran = config.turns + config.warmup
                # on the turn's thread: its message, the user's lines (queries), the companion's (documents)
                result["second_reader"][key] = {
                    "calls_per_turn": round((second.calls["query"] + second.calls["document"]) / ran, 3),
                    "ms_per_turn": round((second.seconds["query"] + second.seconds["document"]) * 1000 / ran, 2),
                }
            result["turn_ms"][key] = times.summary()
            result["sizes"][key] = f"1 user, {size:,} memories"
            result["turn_path"] = path
            result["phases_s"][key] = round(time.perf_counter() - tick, 1)
            alone = e5_query_alone(embedder, SEED + 1) if key == "100k" else None
            result["turn_over_e5_query"][key] = over_query(result["turn_ms"][key], alone)
            largest = (home, size)
        if config.only == "100k":
            return finish(result, started)

        users, per_user = config.many
        tick = time.perf_counter()
        home = root / "many"
        bank = MemoryBank(SqliteStores(home), TimedEmbedder(embedder), max_open_users=config.max_open_users)
        log(f"writing {users:,} users x {per_user:,} memories")
        names = many_users(bank, users, per_user, gen, pool, end=END, reply_pool=replies)
        rng = random.Random(SEED)
        log(f"{config.turns} turns over {users:,} users")
        times, _ = run_turns(bank, lambda i: rng.choice(names), config.turns, config.warmup, gen, start=start_turns)
        bank.close()
        result["turn_ms"]["1000x1k"] = times.summary()
        result["turn_over_e5_query"]["1000x1k"] = over_query(result["turn_ms"]["1000x1k"])
        result["sizes"]["1000x1k"] = (
            f"{users:,} users x {per_user:,} memories, a random user each turn, {config.max_open_users} kept open"
        )
        result["phases_s"]["1000x1k"] = round(time.perf_counter() - tick, 1)

        tick = time.perf_counter()
        home = root / "api"
        bank = MemoryBank(SqliteStores(home), embedder, max_open_users=config.max_open_users)
        log(
            f"{config.turns} turns each: direct, through the API, through the API streaming "
            f"({config.api_memories:,} memories)"
        )
        fill_user(bank, "big", config.api_memories, gen, pool, end=END, seed=7)
        result["api_ms"] = measure_api_overhead(
            bank, home, "big", gen, turns=config.turns, warmup=config.warmup, start=start_turns
        )
        bank.close()
        result["sizes"]["api"] = (
            f"1 user, {config.api_memories:,} memories; HTTP on 127.0.0.1, client and server in one process"
        )
        result["phases_s"]["api"] = round(time.perf_counter() - tick, 1)

        tick = time.perf_counter()
        log(f"importing a MemoryBank file of {config.ingest_turns} turns")
        ingest = measure_ingest(embedder, config.ingest_turns)
        result["ingest"] = ingest
        result["ingest_turns_per_s"] = ingest["turns_per_s"]
        result["phases_s"]["ingest"] = round(time.perf_counter() - tick, 1)
        _import_speed(config, result, embedder, log)

        assert largest is not None, "the bench needs one single-user size"
        _restart(config, result, *largest, gen, start_turns, log)

        tick = time.perf_counter()
        log("recall@5 on the MemoryBank evaluation sets" if config.recall else "recall skipped")
        result["recall_at_5"], note = _recall(config, embedder)
        if note:
            result["notes"].append(note)
        result["phases_s"]["recall"] = round(time.perf_counter() - tick, 1)
    finally:
        tmp.cleanup()
    return finish(result, started)


def _restart(config: BenchConfig, result: dict, home: Path, size: int, gen, start_turns: datetime, log) -> None:
    """Restart and cold start in fresh processes on the user of ``size`` memories in ``home``:
    the median of ``restart_runs`` with its parts, and the original's re-embedding beside it."""
    tick = time.perf_counter()
    log(f"restart and cold start in {config.restart_runs} fresh process(es), {size:,} memories")
    runs = [
        measure_process(
            home,
            "big",
            gen.message(),
            start_turns.isoformat(),
            embedder=config.embedder,
            reembed_sample=config.reembed_sample if i == 0 else 0,
        )
        for i in range(config.restart_runs)
    ]
    mid = sorted(runs, key=lambda r: r["restart_s"])[len(runs) // 2]
    result["restart_s"] = round(mid["restart_s"], 4)
    result["restart_parts_s"] = mid["restart_parts_s"]
    result["restart_index_mb"] = mid["index_mb"]
    result["restart_reembed_s"] = round(runs[0]["restart_reembed_s"], 1)
    result["restart_speedup"] = round(result["restart_reembed_s"] / max(result["restart_s"], 1e-9))
    result["cold_start_s"] = round(sorted(r["cold_start_s"] for r in runs)[len(runs) // 2], 3)
    result["rss_mb_100k"] = mid["rss_mb"].get("VmRSS", mid["rss_mb"].get("VmHWM"))
    result["process"] = {"runs": runs}
    result["sizes"]["restart"] = (
        f"1 user, {mid['memories']:,} memories ({mid['indexed']:,} vectors, {mid['index_kind']}, "
        f"{mid['index_mb']} MB file)"
    )
    result["sizes"]["restart_reembed"] = (
        f"{runs[0]['reembed_sample']} memories re-embedded "
        f"({runs[0]['reembed_ms_per_memory']:.1f} ms each), "
        f"scaled to {mid['memories']:,}"
    )
    result["phases_s"]["process"] = round(time.perf_counter() - tick, 1)


def _import_speed(config: BenchConfig, result: dict, embedder, log) -> None:
    tick = time.perf_counter()
    log(f"importing {config.import_turns} turns with long replies, the engine's batches both ways")
    # the faster ways are weighed when the import is measured alone (they take minutes)
    result["import_speed"] = measure_import_speed(embedder, config.import_turns, ways=config.only == "import")
    result["phases_s"]["import_speed"] = round(time.perf_counter() - tick, 1)


def finish(result: dict, started: float) -> dict:
    """``result`` closed: the load at the end and the run's seconds."""
    result["machine"]["load_avg_1m_end"] = machine()["load_avg_1m"]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _ttft(config, result, root, embedder, gen, pool, replies, start, log) -> None:
    """The time to the first word over one day, with the packaged model (see ``ttft.py``)."""
    from .ttft import measure_ttft, packaged_model_missing

    tick = time.perf_counter()
    missing = packaged_model_missing()
    if missing:
        result["notes"].append(missing)
        return
    bank = MemoryBank(SqliteStores(root / "ttft"), embedder)
    try:
        fill_user(bank, "ttft", 1_000, gen, pool, end=END, seed=3, reply_pool=replies)
        log(f"time to first token: one day of {config.ttft_turns} turns with the packaged SmolLM2")
        ttft = measure_ttft(bank, "ttft", gen, start=start, turns=config.ttft_turns, log=log)
    finally:
        bank.close()
    result["ttft"] = ttft
    result["ttft_ms"] = ttft["ttft_ms"]
    result["prompt_tokens"] = ttft["prompt_tokens"]
    result["sizes"]["ttft"] = (
        f"1 user, 1,000 memories; {config.ttft_turns} turns of one day, SmolLM2-135M greedy on the CPU, "
        f"replies of up to {ttft['reply_tokens']} tokens"
    )
    result["phases_s"]["ttft"] = round(time.perf_counter() - tick, 1)


TARGETS = {
    "p50": 30.0,
    "p95": 80.0,
    "api_overhead": 5.0,
    "ingest": 200.0,
    "restart": 0.5,
    "speedup": 100.0,
    "cold": 3.0,
    "rss": 1024.0,
}


def _ok(value, target, *, low: bool = True) -> str:
    if value is None:
        return "  -"
    return " ok" if (value <= target if low else value >= target) else " MISS"


def format_table(r: dict) -> str:
    """The result as a plain-text table with the targets."""
    lines = [
        f"SiliconFriend bench ({r['config']}, {r['embedder']}, turns via {r.get('turn_path', '?')}; "
        f"{r['machine']['cpus']} CPUs, load {r['machine']['load_avg_1m']} -> {r['machine'].get('load_avg_1m_end')}; "
        f"{r['seconds']} s)",
        "",
        f"{'turn overhead (ms)':<20}{'p50':>7}{'p95':>7}{'before reply':>14}{'after reply':>13}"
        f"{'e5 query':>10}{'e5 turn':>9}   size",
        f"{'':<20}{'':>7}{'':>7}{'(p50)':>14}{'(p50)':>13}{'(p50)':>10}{'(p50)':>9}",
    ]
    for key in TURN_KEYS:
        t = r["turn_ms"].get(key)
        if not t:
            lines.append(f"{key:<20}{'-':>7}{'-':>7}{'-':>14}{'-':>13}{'-':>10}{'-':>9}   not run")
            continue
        mark = (_ok(t["p50"], TARGETS["p50"]) + _ok(t["p95"], TARGETS["p95"])) if key == "100k" else ""
        ratio = (r.get("turn_over_e5_query") or {}).get(key)
        if ratio:
            mark += f"; {ratio['p50']}x / {ratio['p95']}x the e5 query"
            if key == "100k":
                mark += _ok(ratio["p50"], 1.5) + _ok(ratio["p95"], 2.0)
            mark += alone_text(ratio)
        eq, ed = t.get("embed_query", {}).get("p50"), t.get("embed_document", {}).get("p50")
        lines.append(
            f"{key:<20}{t['p50']:>7.1f}{t['p95']:>7.1f}{t['before_reply']['p50']:>14.1f}"
            f"{t['after_reply']['p50']:>13.1f}{eq if eq is not None else '-':>10}"
            f"{ed if ed is not None else '-':>9}   {r['sizes'].get(key, '')}{mark}"
        )
    second = r.get("second_reader") or {}
    if second.get("reader"):
        asked = ", ".join(
            f"{key} {v['calls_per_turn']} calls / {v['ms_per_turn']} ms" for key, v in second.items() if key != "reader"
        )
        lines.append(f"second reader {second['reader']} a turn, where the words said little: {asked or '-'}")
    api = r.get("api_ms") or {}
    if api.get("direct"):
        lines += [""]
        for path, label in (("api", "API (JSON)"), ("api_stream", "API (streaming)")):
            over, diff = api[f"{path}_overhead"], api[f"{path}_minus_direct"]
            lines.append(
                f"{label + ' overhead':<26}{over['p50']:>7.2f}{over['p95']:>7.2f} ms (p50 / p95)"
                f"{_ok(over['p50'], TARGETS['api_overhead'])}{_ok(over['p95'], TARGETS['api_overhead'])}"
                f"   turn {api[path]['p50']:.1f} / {api[path]['p95']:.1f} ms vs direct "
                f"{api['direct']['p50']:.1f} / {api['direct']['p95']:.1f} ms "
                f"({diff['p50']:+.1f} / {diff['p95']:+.1f})"
            )
        lines.append(f"{'':<26}{r['sizes'].get('api', '')}")
    ing = r.get("ingest", {})
    rec = r.get("recall_at_5", {})
    lines += [
        "",
        f"{'ingest_turns_per_s':<22}{r.get('ingest_turns_per_s')!s:>10}{_ok(r.get('ingest_turns_per_s'), 200, low=False)}"
        f"   stored + indexed (embedding {ing.get('embed_ms_per_turn')} ms/turn = {ing.get('embed_s')} of "
        f"{ing.get('seconds')} s; {ing.get('turns_per_s_without_embedding')} turns/s without it)",
        f"{'  with reply vectors':<22}{ing.get('turns_per_s_with_replies')!s:>10}      "
        f"   the replies' vectors complete at {ing.get('replies_done_s')} s "
        f"({ing.get('replies_embedded')} replies, {ing.get('replies_embed_s')} s on the reply worker)",
        f"{'restart_s':<22}{r.get('restart_s')!s:>10}{_ok(r.get('restart_s'), 0.5)}   {r['sizes'].get('restart', '')}",
        f"{'  parts':<22}{'':>10}      " + ", ".join(f"{k} {v} s" for k, v in (r.get("restart_parts_s") or {}).items()),
        f"{'restart_reembed_s':<22}{r.get('restart_reembed_s')!s:>10}   x{r.get('restart_speedup')}"
        f"{_ok(r.get('restart_speedup'), 100, low=False)}   {r['sizes'].get('restart_reembed', '')}",
        f"{'cold_start_s':<22}{r.get('cold_start_s')!s:>10}{_ok(r.get('cold_start_s'), 3.0)}",
        f"{'rss_mb_100k':<22}{r.get('rss_mb_100k')!s:>10}{_ok(r.get('rss_mb_100k'), 1024)}",
        f"{'recall_at_5 en / cn':<22}{rec.get('en')!s:>10} / {rec.get('cn')!s}",
    ]
    imp = r.get("import_speed") or {}
    if imp.get("chars_per_s"):
        cos = imp["cosine_to_float32"]
        lines.append(
            f"{'import chars/s':<22}{imp['chars_per_s']!s:>10}   x{imp['speedup_per_char']} the batches one after the "
            f"other ({imp['chars_per_s_before']} chars/s){_ok(imp['speedup_per_char'], 2.0, low=False)}; "
            f"{imp['turns']} turns, {imp['chars']:,} chars; cosine to float32 min {cos['min']}"
            f"{_ok(cos['min'], 0.995, low=False)}"
        )
    ways = imp.get("ways") or {}
    for name in (n for n in ways if isinstance(ways[n], dict) and n != "engine"):
        w = ways[name]
        lines.append(
            f"{'  way ' + name:<22}{w['chars_per_s']!s:>10}   x{w['speedup_per_char']} the engine as it is "
            f"({ways['engine']['chars_per_s']} chars/s)"
            f"{_ok(w['speedup_per_char'], 2.0, low=False)}; cosine to float32 min {w['cosine_to_float32']['min']}"
            f"{_ok(w['cosine_to_float32']['min'], 0.995, low=False)}"
        )
    lines += _ttft_lines(r)
    lines += [f"note: {n}" for n in r.get("notes", [])]
    return "\n".join(lines)


def _ttft_lines(r: dict) -> list[str]:
    t = r.get("ttft")
    if not t:
        return []
    ms, cold, tokens = t["ttft_ms"], t["ttft_ms_without_reuse"], t["prompt_tokens"]
    lines = ["", f"{'time to first token':<22}{'ms':>8}{'without reuse':>15}{'prompt tokens processed':>26}"]
    for key in ms:
        p = tokens.get(key, {})
        lines.append(f"{'  ' + key:<22}{ms[key]:>8.0f}{cold[key]:>15.0f}{p.get('processed')!s:>17} of {p.get('total')}")
    if "ttft_turn10_over_turn1" in t:
        lines.append(
            f"{'  turn10 / turn1':<22}{t['ttft_turn10_over_turn1']:>8}{t['ttft_turn10_over_turn1_without_reuse']:>15}"
            f"{t.get('processed_share_turn10')!s:>17} of the prompt"
            f"{_ok(t['ttft_turn10_over_turn1'], 1.3)}{_ok(t.get('processed_share_turn10'), 0.5)}"
        )
    lines.append(f"{'':<22}{r['sizes'].get('ttft', '')}")
    return lines


def with_overrides(config: BenchConfig, **changes) -> BenchConfig:
    return replace(config, **{k: v for k, v in changes.items() if v is not None})
