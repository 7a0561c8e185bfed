"""Retrieval evaluation on MemoryBank probing questions with evidence labels.

The bank is loaded into a temporary home (never the user's), "now" is the day after the bank's
last date, and each labelled question runs the retrieval a chat turn uses, for its user, without
reinforcing. recall@k is the share of a question's evidence turns among the first k distinct
dialogue turns retrieved (other kinds of hits are skipped); hit@k is whether at least one is.
"""
from __future__ import annotations

import json
import tempfile
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Callable

from memory.bank import MemoryBank
from memory.embedders import Embedder
from memory.forgetting import ForgettingPolicy
from memory.memorybank_format import BankFormatError, import_bank, parse_bank
from memory.records import Kind
from memory.retrieval import RetrievalConfig

KS = (1, 2, 3, 5, 10)


def load_labels(path: Path | str) -> list[dict]:
    labels = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                item["bank_user"], item["question"], item["evidence"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise BankFormatError(f"{path}: line {n}: not a label ({exc})") from None
            labels.append(item)
    return labels


def evaluate_retrieval(bank_file: Path | str, labels_file: Path | str, embedder: Embedder, **kw) -> dict:
    return evaluate_label_sets(bank_file, [labels_file], embedder, **kw)[0]


def evaluate_label_sets(bank_file: Path | str, labels_files: list[Path | str], embedder: Embedder, *,
                        policy: ForgettingPolicy | None = None, config: RetrievalConfig | None = None,
                        ks: tuple[int, ...] = KS, progress: Callable | None = None,
                        details: list | None = None) -> list[dict]:
    """Import the bank once, then score each label file on it."""
    label_sets = [[label for label in load_labels(f) if label.get("evidence")] for f in labels_files]
    parsed = parse_bank(bank_file)
    last = max((t[2] for p in parsed for t in p.turns), default=datetime(1970, 1, 1))
    now = datetime.combine(last.date() + timedelta(days=1), time(9, 0))
    config = config or RetrievalConfig()
    depth = max(ks)
    results = []
    with tempfile.TemporaryDirectory(prefix="sf-eval-") as home:
        bank = MemoryBank(home, embedder, policy=policy, retrieval=config)
        try:
            import_bank(bank, bank_file, progress=progress)
            for labels in label_sets:
                results.append(_score(bank, labels, now, ks, depth, details))
        finally:
            bank.close()
    return results


def _score(bank: MemoryBank, labels: list[dict], now: datetime, ks: tuple[int, ...], depth: int,
           details: list | None) -> dict:
    sums = {f"recall@{k}": 0.0 for k in ks} | {f"hit@{k}": 0.0 for k in ks}
    for label in labels:
        evidence = {(e["date"], int(e["turn"])) for e in label["evidence"]}
        # ask for enough hits that `depth` distinct turns remain after skipping summaries
        hits = bank.retrieve(label["bank_user"].strip(), label["question"], now, k=depth * 2)
        turns: list[tuple[str, int]] = []
        for h in hits:
            key = (h.record.day.isoformat(), h.record.position)
            if h.record.kind == Kind.TURN and key not in turns:
                turns.append(key)
        for k in ks:
            found = len(evidence & set(turns[:k]))
            sums[f"recall@{k}"] += found / len(evidence)
            sums[f"hit@{k}"] += 1.0 if found else 0.0
        if details is not None:
            details.append({"qid": label.get("qid"), "question": label["question"],
                            "evidence": sorted(evidence), "retrieved": turns[:depth]})
    n = len(labels)
    out = {"n": n}
    for k in ks:
        out[f"recall@{k}"] = round(sums[f"recall@{k}"] / n, 4) if n else 0.0
    for k in ks:
        out[f"hit@{k}"] = round(sums[f"hit@{k}"] / n, 4) if n else 0.0
    return out
