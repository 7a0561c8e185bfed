"""``siliconfriend bench``: speed, memory and scale of the memory pipeline (see docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_bench(args) -> int:
    if args.database_url:
        return _bench_pg(args)
    from ..bench.run import FULL, QUICK, format_table, run_bench, with_overrides

    config = with_overrides(
        QUICK if args.quick else FULL,
        turns=args.turns,
        embedder=args.embedder,
        second_reader=args.second_reader,
        eval_dir=Path(args.eval_dir) if args.eval_dir else None,
        only=args.only,
        ttft_turns=12 if args.only == "ttft" else None,
        pool=32 if args.only == "ttft" else None,  # the vectors the TTFT user's history is made of
    )
    if args.no_recall:
        config = with_overrides(config, recall=False)

    def log(message: str) -> None:
        if not args.json or args.verbose:
            print(f"[bench] {message}", file=sys.stderr, flush=True)

    result = run_bench(config, log=log, workdir=Path(args.workdir) if args.workdir else None)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_table(result))
    return 0


def _bench_pg(args) -> int:
    from dataclasses import replace

    from ..bench.pg import PG_FULL, PG_QUICK, format_pg_table, run_pg_bench

    if args.only not in (None, "100k"):
        print(
            f"--only {args.only} measures the SQLite home and the embedder, not the database: "
            "run it without --database-url",
            file=sys.stderr,
        )
        return 2
    config = PG_QUICK if args.quick else PG_FULL
    config = replace(
        config, **{k: v for k, v in (("turns", args.turns), ("embedder", args.embedder), ("only", args.only)) if v}
    )

    def log(message: str) -> None:
        if not args.json or args.verbose:
            print(f"[bench] {message}", file=sys.stderr, flush=True)

    result = run_pg_bench(args.database_url, config, log=log)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False) if args.json else format_pg_table(result))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark turn overhead, ingest, restart, cold start, memory, recall",
        description="Measures the memory pipeline on synthetic en/zh dialogue (fixed seed): "
        "turn overhead at 1k/10k/100k memories and 1,000 users, ingest, restart, "
        "cold start, resident memory, recall@5. The full run takes ~10 minutes.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--turns", type=int, help="timed turns per run (default: 200, quick: 40)")
    p.add_argument("--embedder", help="embedder spec (default: e5)")
    p.add_argument(
        "--second-reader", help='the single-user turns\' second reader (default: use; "" for the embedder alone)'
    )
    p.add_argument(
        "--eval-dir", help="folder of the MemoryBank evaluation sets (default: ../shared/data/memorybank_eval)"
    )
    p.add_argument("--no-recall", action="store_true", help="skip the recall@5 evaluation")
    p.add_argument(
        "--only",
        choices=["ttft", "100k", "import", "restart"],
        help="one part alone: ttft = the time to the first word over a day of 12 turns with the packaged "
        "model; 100k = the turn of one user with 100,000 memories; import = characters per second of an "
        "import with long replies, the engine's batches run now and as before; restart = a 100,000-memory "
        "user's login to their first retrieval in fresh processes, with its parts and the re-embedding it "
        "replaces (with --database-url: 100k only)",
    )
    p.add_argument("--workdir", help="where the temporary homes are made (default: the system's temp folder)")
    p.add_argument(
        "--database-url",
        help="measure the PostgreSQL store instead, in a scratch database on this "
        "server: turn overhead at 10k / 100k memories and over 1,000 users, turns/s of 20 users "
        "through 2 workers",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="progress on stderr with --json too")
    p.set_defaults(func=cmd_bench)
