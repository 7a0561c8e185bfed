"""Fresh-process measurements: cold start, restart (login to first retrieval, with its parts: the
store opened, the saved index attached, the first retrieval), resident memory, and the original's
approach of re-embedding a user's history at login.

``measure_process`` starts ``python -m siliconfriend.bench.process`` and reads one JSON line
from it. The child imports the app's memory stack, builds the bank as the app does (which loads
the embedder), warms the lexical tokenizer (the models are now loaded), then logs the user in
(opens their store, attaches their saved index) and answers one retrieval. Cold start is the
parent's clock from spawning the child to that answer; restart is the child's clock from login to
that answer. The OS file cache is warm (the files were just written), as on a server that
restarts; a machine just booted would also read the files from disk.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _rss_mb() -> dict[str, float]:
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:  # not Linux: the peak from getrusage
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["VmHWM"] = round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
    return out


def _child(args: argparse.Namespace) -> dict:
    t_imports = time.perf_counter()
    from datetime import datetime

    from memory.stores.sqlite import SqliteUserStore
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_bank

    t_models = time.perf_counter()
    bank = build_bank(Settings(home=args.home, embedder=args.embedder), progress=lambda **kw: None)
    bank.tokenizer.tokenize("warm up 热身")  # jieba's dictionary, loaded once per process
    t_login = time.perf_counter()
    now = datetime.fromisoformat(args.now)
    u = bank.user_store(args.user)  # the login: the store opened (its migrations checked)
    assert isinstance(u, SqliteUserStore)  # a home folder's store
    t_open = time.perf_counter()
    u.index  # noqa: B018 - the saved index attached (read from its file), as the first search would
    t_index = time.perf_counter()
    hits = bank.retrieve(args.user, args.query, now)
    t_first = time.perf_counter()
    wall_first = time.time()
    out = {
        "wall_first": wall_first,
        "imports_s": t_models - t_imports,
        "models_s": t_login - t_models,
        "restart_s": t_first - t_login,
        "restart_parts_s": {
            "open_store": round(t_open - t_login, 4),
            "attach_index": round(t_index - t_open, 4),
            "first_retrieval": round(t_first - t_index, 4),
        },
        "hits": len(hits),
        "memories": u.count(),
        "indexed": len(u.index),
        "index_kind": type(u.index.index).__name__,
        "index_rebuilt": u.index.rebuilt,
        "index_mb": round(u.index.path.stat().st_size / 2**20, 1),
        "rss_mb": _rss_mb(),
    }
    if args.reembed_sample:
        out |= _reembed(bank, u, args.reembed_sample)
    bank.close()
    return out


def _reembed(bank, opened, sample: int) -> dict:
    """The original's login: every memory embedded again into a fresh index. Timed on an evenly
    spread sample of the user's memories and scaled to all of them; the index build is timed whole."""
    import faiss
    import numpy as np

    from memory.embedders import embed_documents

    total = opened.count()
    step = max(1, total // sample)
    texts = []
    for rec in sorted(opened.records(extra=False), key=lambda r: r.stored_id):
        if rec.stored_id % step == 0:
            texts.append(rec.text)
    texts = texts[:sample]
    start = time.perf_counter()
    vecs = embed_documents(bank.embedder, texts)
    per_memory = (time.perf_counter() - start) / max(1, len(texts))
    fake = np.resize(vecs, (total, vecs.shape[1])).astype(np.float32)
    start = time.perf_counter()
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(fake)
    index.search(fake[:1], 5)
    build = time.perf_counter() - start
    return {
        "reembed_sample": len(texts),
        "reembed_ms_per_memory": per_memory * 1000,
        "restart_reembed_s": per_memory * total + build,
    }


def measure_process(
    home, user: str, query: str, now: str, *, embedder: str = "e5", reembed_sample: int = 0, timeout: float = 600
) -> dict:
    """Runs the child once; adds ``cold_start_s`` (spawn to first retrieval, parent's clock)."""
    cmd = [
        sys.executable,
        "-B",  # no .pyc written (PYTHONDONTWRITEBYTECODE); the environment is inherited as it is
        "-m",
        "siliconfriend.bench.process",
        "--home",
        str(home),
        "--user",
        user,
        "--query",
        query,
        "--now",
        now,
        "--embedder",
        embedder,
        "--reembed-sample",
        str(reembed_sample),
    ]
    spawned = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["cold_start_s"] = result.pop("wall_first") - spawned
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m siliconfriend.bench.process")
    parser.add_argument("--home", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--query", required=True)
    parser.add_argument("--now", required=True)
    parser.add_argument("--embedder", default="e5")
    parser.add_argument("--reembed-sample", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(_child(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
