"""``siliconfriend bench --database-url``: the PostgreSQL bench, small, on a real server."""

from __future__ import annotations

import pytest


def test_the_100k_turn_alone_reports_its_ratio_to_the_query(pg_server):
    """``--only 100k``: the one big user's turns only (no many users, no throughput), each turn's
    p50 / p95 over that run's e5 query, marked against the targets' 2.5x / 4x (docs/benchmarks.md)."""
    from dataclasses import replace

    from siliconfriend.bench.pg import PG_QUICK, format_pg_table, run_pg_bench

    config = replace(PG_QUICK, single=(("2k", 200), ("100k", 300)), turns=4, warmup=1, pool=16, only="100k")
    result = run_pg_bench(pg_server.get_uri(), config)
    assert list(result["turn_ms"]) == ["100k"] and "throughput" not in result
    t, ratio = result["turn_ms"]["100k"], result["turn_over_e5_query"]["100k"]
    assert t["n"] == 4 and ratio["e5_query_ms"] == t["embed_query"]["p50"] > 0
    assert ratio["p50"] == pytest.approx(t["p50"] / t["embed_query"]["p50"], abs=0.01)
    # and over one query timed alone in the same run (the turn's own threads slow it inside a turn)
    alone = ratio["e5_query_alone_ms"]
    assert alone > 0 and ratio["p50_over_alone"] == pytest.approx(t["p50"] / alone, abs=0.01)
    table = format_pg_table(result)
    assert f"{ratio['p50']}x / {ratio['p95']}x the e5 query" in table and "throughput" not in table
    assert f"({ratio['p50_over_alone']}x / {ratio['p95_over_alone']}x the query alone)" in table


def test_parts_that_do_not_touch_the_database_are_refused_with_it(capsys):
    from siliconfriend.cli.main import main

    assert main(["bench", "--database-url", "postgresql://nobody@127.0.0.1:1/none", "--only", "ttft"]) == 2
    assert "without --database-url" in capsys.readouterr().err
