"""``siliconfriend eval grounding``: does the day rollover write only what was said?

The first users of a MemoryBank file live their first days, one day at a time, in a temporary
home; after each day the rollover runs with the given backend (``core/consolidate.py``: daily
summary and personality, the global ones, each checked by ``core/grounding.py``). Reported, for
the summaries (daily and global events) and the profiles (daily and global personality):

- ``grounded``: the share of the sentences the model wrote (its first text) that the check finds
  grounded in what was said; ``invented_per_summary``: names, places and numbers not said, per
  text the model wrote;
- ``paths``: how each summary ended (``model``: as written; ``regenerated``: written again after
  the check named the failure; ``kept``: only its grounded sentences; ``extractive``: the user's
  own statements; ``none``: no profile), and ``fallback``: the share that took ``extractive`` or
  ``none``;
- ``dropped``: unsupported sentences left out; ``stored_invented``: names in what was finally
  stored that the day's turns never mention (0 is the promise).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Callable

from memory.bank import MemoryBank
from memory.embedders import Embedder
from memory.memorybank_format import parse_bank
from memory.records import Kind
from memory.stores.sqlite import SqliteStores

from ..backends.base import ChatBackend, Sampling
from ..core.consolidate import SUMMARY_SAMPLING, Consolidator, Written
from ..core.grounding import GroundingChecker, join_sentences
from ..core.prompting import load_prompts

GROUPS = {
    "summary": (Kind.DAILY_EVENTS, Kind.GLOBAL_EVENTS),
    "personality": (Kind.DAILY_PERSONALITY, Kind.GLOBAL_PERSONALITY),
}


def evaluate_grounding(
    bank_file: Path | str,
    embedder: Embedder,
    backend: ChatBackend,
    *,
    users: int = 3,
    days: int = 2,
    lang: str = "en",
    summary_tokens: int = 120,
    companion_name: str = "SiliconFriend",
    progress: Callable[[str], None] | None = None,
    sampling: Sampling | None = SUMMARY_SAMPLING,
) -> dict:
    """``sampling``: the summaries' generation settings (None: the backend's own, a reply's)."""
    parsed = parse_bank(bank_file)[:users]
    written: list[Written] = []
    stored_invented = 0
    prompts = load_prompts(lang)
    with tempfile.TemporaryDirectory(prefix="sf-grounding-") as home:
        bank = MemoryBank(SqliteStores(home), embedder)
        checker = GroundingChecker(embedder, bank.tokenizer)
        try:
            consolidator = Consolidator(
                bank,
                backend,
                companion_name=companion_name,
                summary_tokens=summary_tokens,
                checker=checker,
                sampling=sampling,
            )
            for p in parsed:
                lived = sorted({t[2].date() for t in p.turns})[:days]
                for day in lived:
                    bank.add_turns(p.name, [(q, r, when) for q, r, when, _, _ in p.turns if when.date() == day])
                    report = consolidator.run(p.name, datetime.combine(day + timedelta(days=1), time(9)), lang=lang)
                    written += report.written
                    if progress:
                        for w in report.written:
                            first = w.attempts[0] if w.attempts else None
                            wrote = join_sentences([v.sentence for v in first.verdicts]) if first else ""
                            invented = ", ".join(first.invented) if first else ""
                            progress(
                                f"{p.name} {day} {w.kind.value}: {w.path}; the model wrote: {wrote[:300]!r}"
                                + (f"; not said: {invented}" if invented else "")
                            )
                    turns = bank.turns_on(p.name, day)
                    sources = checker.sources(
                        [x for t in turns for x in (t.query, t.response)],
                        allowed=[p.name, companion_name, prompts.format_date(day)],
                    )
                    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
                        rec = bank.get_summary(p.name, kind, day)
                        if rec is not None:
                            stored_invented += len(checker.unsupported_names(rec.text, sources))
        finally:
            bank.close()
    out: dict = {
        "users": len(parsed),
        "days": days,
        "lang": lang,
        "backend": f"{backend.name}:{getattr(backend, 'preset', None) or backend.model}",
        "sampling": "summary" if sampling == SUMMARY_SAMPLING else "backend" if sampling is None else str(sampling),
    }
    for group, kinds in GROUPS.items():
        ws = [w for w in written if w.kind in kinds and w.attempts]
        sentences = sum(len(w.attempts[0].verdicts) for w in ws)
        grounded = sum(len(w.attempts[0].kept) for w in ws)
        every = [a for w in ws for a in w.attempts]
        paths = Counter(w.path for w in written if w.kind in kinds)
        out[group] = {
            "written": len(ws),
            "sentences": sentences,
            "grounded": round(grounded / sentences, 3) if sentences else None,
            "grounded_any_attempt": round(
                sum(len(a.kept) for a in every) / max(1, sum(len(a.verdicts) for a in every)), 3
            ),
            "invented_per_summary": round(sum(len(a.invented) for a in every) / len(every), 2) if every else None,
            "paths": dict(paths),
            # of the texts the model was asked for (a first global one copied from its one day is not)
            "fallback": round(
                (paths["extractive"] + paths["none"]) / max(1, sum(n for p, n in paths.items() if p != "daily")), 3
            ),
            "dropped": sum(w.dropped for w in written if w.kind in kinds),
        }
    out["stored_invented"] = stored_invented
    return out


def format_grounding(result: dict) -> str:
    lines = [
        f"{result['users']} users x {result['days']} days ({result['lang']}), backend {result['backend']}, "
        f"sampling {result['sampling']}"
    ]
    for group in GROUPS:
        g = result[group]
        grounded = "-" if g["grounded"] is None else f"{g['grounded']:.3f}"
        invented = "-" if g["invented_per_summary"] is None else f"{g['invented_per_summary']:.2f}"
        paths = ", ".join(f"{k} {v}" for k, v in sorted(g["paths"].items()))
        lines.append(
            f"{group:12} {g['written']} written, {g['sentences']} sentences, grounded {grounded} "
            f"(any attempt {g['grounded_any_attempt']:.3f}), invented names per text {invented}, "
            f"fallback {g['fallback']:.3f}, dropped {g['dropped']}; paths: {paths or '-'}"
        )
    lines.append(f"names in the stored daily texts that were never said: {result['stored_invented']}")
    return "\n".join(lines)
