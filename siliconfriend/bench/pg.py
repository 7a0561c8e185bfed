"""``siliconfriend bench --database-url URL``: the memory pipeline over PostgreSQL + pgvector.

In a scratch database on that server (dropped afterwards): turn overhead (everything but the LLM,
through the companion with an instantly streaming backend) for one user with 10k and 100k
memories and over many users; the build time of the 100k user's HNSW index; and throughput:
simulated users talking at once through two worker processes, each with its own connection pool
and companion, as two ``app.py`` workers would. Histories are written as ``bench.fixtures``
writes them (real generated text, vectors mixed from real e5 vectors).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dtime
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from memory.bank import MemoryBank
from memory.embedders import create_embedder
from memory.stores.pg_db import scratch_database
from memory.stores.sqlite import SqliteStores

from .data import DialogueGenerator
from .fixtures import fill_user, reply_vector_pool, vector_pool
from .run import END, SEED, finish, machine
from .turns import TimedEmbedder, TurnRunner, alone_text, e5_query_alone, over_query, run_turns

if TYPE_CHECKING:  # imported where used: psycopg loads only for a PostgreSQL bench
    from memory.stores.postgres import PostgresStores

TARGETS = {"p50": 40.0, "p95": 100.0}
# the 100k turn over that run's e5 query
RATIO_TARGETS = {"p50": 2.5, "p95": 4.0}


@dataclass(frozen=True)
class PgBenchConfig:
    name: str
    single: tuple[tuple[str, int], ...]
    many: tuple[int, int]  # users x memories each
    turns: int
    warmup: int
    pool: int
    concurrent_users: int  # simulated users talking at once ...
    workers: int  # ... through this many worker processes
    turns_per_user: int
    embedder: str = "e5"
    only: str | None = None  # "100k": the 100k user's turns alone (no many users, no throughput)


PG_FULL = PgBenchConfig(
    "full",
    single=(("10k", 10_000), ("100k", 100_000)),
    many=(1_000, 100),
    turns=200,
    warmup=10,
    pool=384,
    concurrent_users=20,
    workers=2,
    turns_per_user=10,
)
PG_QUICK = PgBenchConfig(
    "quick",
    single=(("2k", 2_000),),
    many=(100, 50),
    turns=30,
    warmup=5,
    pool=32,
    concurrent_users=4,
    workers=2,
    turns_per_user=3,
)


def _copy_user(stores: PostgresStores, source: str, target: str) -> None:
    """``target`` gets a copy of ``source``'s rows, inside the database (no round trips)."""
    with stores.db.transaction() as cur:
        cur.execute(
            "INSERT INTO mem_users (name, last_id, lex_docs, lex_tokens) SELECT %s, last_id, lex_docs,"
            " lex_tokens FROM mem_users WHERE name = %s",
            (target, source),
        )
        cur.execute(
            "INSERT INTO mem_meta (owner, key, value) SELECT %s, key, value FROM mem_meta WHERE owner = %s",
            (target, source),
        )
        cur.execute(
            "INSERT INTO memories (owner, id, kind, text, query, response, day, position, created_at, importance,"
            " pinned, state, embedding, lex_len, extra, reply_embedding, archived_at) SELECT %s, id, kind, text,"
            " query, response, day, position, created_at, importance, pinned, state,"
            " COALESCE(embedding, pending_embedding), lex_len, extra, reply_embedding, archived_at FROM memories"
            " WHERE owner = %s",
            (target, source),
        )
        cur.execute(
            "INSERT INTO mem_recall (owner, id, strength, last_recall, recall_count) SELECT %s, id, strength,"
            " last_recall, recall_count FROM mem_recall WHERE owner = %s",
            (target, source),
        )
        cur.execute(
            "INSERT INTO lex_postings SELECT %s, term, memory_id, tf, dl FROM lex_postings WHERE owner = %s",
            (target, source),
        )


def _throughput_worker(
    url: str, embedder: str, users: list[str], turns: int, seed: int, ready: Barrier, out: mp.Queue
) -> None:
    """One worker process: its own pool and companion; one thread per simulated user."""
    from memory.stores.postgres import PostgresStores

    try:
        bank = MemoryBank(PostgresStores(url, pool_size=len(users) + 2), create_embedder(embedder))
    except BaseException as exc:
        out.put({"seconds": 0.0, "turns": 0, "errors": [f"{type(exc).__name__}: {exc}"]})
        ready.abort()
        raise
    gen = DialogueGenerator(seed)
    lines = []
    for _ in range(len(users) * turns):
        lang = gen.lang()
        lines.append((gen.message(lang), gen.reply(lang)))
    runners = [TurnRunner(bank) for _ in users]
    for r in runners:
        r.now = datetime.combine(END, dtime(19, 0))
    errors: list[str] = []

    def talk(i: int) -> None:
        try:
            for j in range(turns):
                message, reply = lines[i * turns + j]
                runners[i].turn(users[i], message, reply)
                runners[i].now += timedelta(minutes=1)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(f"{type(exc).__name__}: {exc}")

    bank.retrieve(users[0], "warm up", datetime.combine(END, dtime(19, 0)))
    threads = [threading.Thread(target=talk, args=(i,)) for i in range(len(users))]
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({"seconds": time.perf_counter() - start, "turns": len(users) * turns - len(errors), "errors": errors})
    bank.close()


def measure_throughput(url: str, names: list[str], config: PgBenchConfig) -> dict:
    users = names[: config.concurrent_users]
    ctx = mp.get_context("spawn")
    ready, out = ctx.Barrier(config.workers + 1), ctx.Queue()
    share = [users[i :: config.workers] for i in range(config.workers)]
    procs = [
        ctx.Process(
            target=_throughput_worker, args=(url, config.embedder, part, config.turns_per_user, SEED + i, ready, out)
        )
        for i, part in enumerate(share)
    ]
    for p in procs:
        p.start()
    try:
        ready.wait(timeout=300)
    except threading.BrokenBarrierError:
        raise RuntimeError(f"a worker did not start: {out.get(timeout=5)['errors']}") from None
    start = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - start
    for p in procs:
        p.join(30)
    turns = sum(r["turns"] for r in results)
    return {
        "turns": turns,
        "seconds": round(wall, 2),
        "turns_per_s": round(turns / wall, 1),
        "users": len(users),
        "workers": config.workers,
        "errors": [e for r in results for e in r["errors"]],
    }


def run_pg_bench(url: str, config: PgBenchConfig = PG_FULL, *, log: Callable[[str], None] = lambda s: None) -> dict:
    from memory.stores.postgres import PostgresStores

    started = time.perf_counter()
    gen = DialogueGenerator(SEED)
    embedder = create_embedder(config.embedder)
    result: dict = {
        "config": config.name,
        "store": "postgresql",
        "embedder": embedder.id,
        "machine": machine(),
        "turn_ms": {},
        # each turn's p50 and p95 over that run's own e5 query p50 (the machine's speed cancels out)
        "turn_over_e5_query": {},
        "sizes": {},
        "phases_s": {},
        "notes": [],
    }
    with tempfile.TemporaryDirectory(prefix="sf-pgbench-") as tmp, scratch_database(url, prefix="sf_bench") as db_url:
        log(f"embedding {config.pool} generated turns for the vector pool")
        scratch = MemoryBank(SqliteStores(Path(tmp) / "scratch"), embedder)
        pool = vector_pool(scratch, gen, config.pool)
        replies = reply_vector_pool(scratch, gen, config.pool)
        scratch.close()
        start_turns = datetime.combine(END, dtime(19, 0))
        single = config.single
        if config.only == "100k":
            single = tuple(s for s in single if s[0] == "100k") or (("100k", 100_000),)
        for key, size in single:
            user = f"big-{key}"
            stores = PostgresStores(db_url, build_hnsw_in_background=False)
            bank = MemoryBank(stores, TimedEmbedder(embedder))
            tick = time.perf_counter()
            log(f"writing one user with {size:,} memories")
            fill_user(bank, user, size, gen, pool, end=END, seed=size, reply_pool=replies)
            # the planner's statistics and the visibility map, as autovacuum keeps them on a
            # database in use (stale right after a bulk write: plans made on them read every row
            # of the user, and an index-only scan still visits the heap)
            stores.db.execute("VACUUM (ANALYZE) memories")
            stores.db.execute("VACUUM (ANALYZE) lex_postings")
            result["phases_s"][f"fill_{key}"] = round(time.perf_counter() - tick, 1)
            tick = time.perf_counter()
            if stores.maybe_build_hnsw(user, embedder.dim, wait=True):
                result["phases_s"][f"hnsw_{key}"] = round(time.perf_counter() - tick, 1)
            index = "partial HNSW" if stores.uses_hnsw(user) else "exact"
            log(f"{config.turns} turns at {key} ({index} dense search)")

            def user_of(i: int, u: str = user) -> str:
                return u

            times, path = run_turns(bank, user_of, config.turns, config.warmup, gen, start=start_turns)
            result["turn_ms"][key] = times.summary()
            alone = e5_query_alone(embedder, SEED + 1) if key == "100k" else None
            result["turn_over_e5_query"][key] = over_query(result["turn_ms"][key], alone)
            result["sizes"][key] = f"1 user, {size:,} memories, {index}"
            log(f"{key}: {result['turn_ms'][key]} (phases {result['phases_s']})")
            result["turn_path"] = path
            bank.close()
        if config.only == "100k":
            return finish(result, started)
        users, per_user = config.many
        stores = PostgresStores(db_url)
        bank = MemoryBank(stores, TimedEmbedder(embedder))
        tick = time.perf_counter()
        log(f"writing {users:,} users x {per_user:,} memories")
        names = [f"member{i:05d}" for i in range(users)]
        templates = min(8, users)
        for i in range(templates):
            fill_user(bank, names[i], per_user, gen, pool, end=END, seed=1000 + i, reply_pool=replies)
        for i in range(templates, users):
            _copy_user(stores, names[i % templates], names[i])
        stores.db.execute("VACUUM (ANALYZE)")
        result["phases_s"]["fill_many"] = round(time.perf_counter() - tick, 1)
        rng = random.Random(SEED)
        key = f"{users}x{per_user}"
        log(f"{config.turns} turns over {users:,} users")
        times, _ = run_turns(bank, lambda i: rng.choice(names), config.turns, config.warmup, gen, start=start_turns)
        result["turn_ms"][key] = times.summary()
        result["turn_over_e5_query"][key] = over_query(result["turn_ms"][key])
        result["sizes"][key] = (
            f"{users:,} users x {per_user:,} memories (plus the single users above), a random user each turn"
        )
        log(f"{key}: {result['turn_ms'][key]}")
        bank.close()
        log(f"{config.concurrent_users} users talking at once through {config.workers} worker processes")
        tick = time.perf_counter()
        try:
            result["throughput"] = measure_throughput(db_url, names[templates:], config)
        except Exception as exc:  # noqa: BLE001 - the other numbers still count
            result["throughput"] = {"errors": [f"{type(exc).__name__}: {exc}"]}
            result["notes"].append(f"throughput not measured: {exc}")
        result["phases_s"]["throughput"] = round(time.perf_counter() - tick, 1)
    return finish(result, started)


def _ok(value, target) -> str:
    return " ok" if value is not None and value <= target else " MISS"


def format_pg_table(r: dict) -> str:
    lines = [
        f"SiliconFriend bench over PostgreSQL ({r['config']}, {r['embedder']}; {r['machine']['cpus']} CPUs, "
        f"load {r['machine']['load_avg_1m']} -> {r['machine'].get('load_avg_1m_end')}; {r['seconds']} s)",
        "",
        f"{'turn overhead (ms)':<20}{'p50':>7}{'p95':>7}{'before reply':>14}{'after reply':>13}{'e5 query':>10}   size",
    ]
    for key, t in r["turn_ms"].items():
        mark = (_ok(t["p50"], TARGETS["p50"]) + _ok(t["p95"], TARGETS["p95"])) if key == "100k" else ""
        ratio = (r.get("turn_over_e5_query") or {}).get(key)
        if ratio:
            mark += f"; {ratio['p50']}x / {ratio['p95']}x the e5 query"
            if key == "100k":
                mark += _ok(ratio["p50"], RATIO_TARGETS["p50"]) + _ok(ratio["p95"], RATIO_TARGETS["p95"])
            mark += alone_text(ratio)
        lines.append(
            f"{key:<20}{t['p50']:>7.1f}{t['p95']:>7.1f}{t['before_reply']['p50']:>14.1f}"
            f"{t['after_reply']['p50']:>13.1f}{t['embed_query']['p50']!s:>10}   {r['sizes'][key]}{mark}"
        )
    tp = r.get("throughput")
    lines.append("")
    if tp is not None:
        lines.append(
            f"throughput: {tp.get('turns_per_s')} turns/s ({tp.get('turns')} turns in {tp.get('seconds')} s, "
            f"{tp.get('users')} users at once through {tp.get('workers')} workers, instant backend)"
            + (f"; {len(tp['errors'])} failed: {tp['errors'][:2]}" if tp.get("errors") else "")
        )
    lines.append("phases (s): " + ", ".join(f"{k} {v}" for k, v in r["phases_s"].items()))
    return "\n".join(lines)
