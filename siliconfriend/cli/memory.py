"""Memory commands: import / export of MemoryBank files, listing and searching memories, the
forgetting pass, and the retrieval evaluation."""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory.shown import ShownMemory


def _bank(args):
    """The configured bank, its embedder loaded only when something is embedded: listing,
    exporting, forgetting and a refused file take a second, not the model's load."""
    from ..config import Settings
    from ..factory import build_bank

    settings = Settings.load(home=args.home)
    return build_bank(settings, lazy=True)


def _known_user(bank, user: str) -> bool:
    if bank.has_user(user):
        return True
    print(f"siliconfriend: no memories for user {user!r}", file=sys.stderr)
    return False


def _now(args) -> datetime:
    return datetime.fromisoformat(args.now) if getattr(args, "now", None) else datetime.now()


def cmd_import(args) -> int:
    from tqdm import tqdm

    from memory.memorybank_format import BankFormatError, import_bank

    bank = _bank(args)
    try:
        counts = import_bank(bank, args.file, only_user=args.user, rename=args.as_user, progress=tqdm)
    except BankFormatError as exc:
        print(f"siliconfriend: nothing imported: {exc}", file=sys.stderr)
        return 1
    finally:
        bank.close()
    for user, n in counts.items():
        print(f"{user}: {n} turns imported")
    return 0


def cmd_export(args) -> int:
    from memory.memorybank_format import export_bank

    bank = _bank(args)
    try:
        users = [args.user] if args.user else None
        if args.user and not _known_user(bank, args.user):
            return 1
        data = json.dumps(export_bank(bank, users), ensure_ascii=False, indent=2)
    finally:
        bank.close()
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(data, encoding="utf-8")
        tmp.replace(args.out)
        print(f"written {args.out}", file=sys.stderr)
    else:
        print(data)
    return 0


def _fmt(m: ShownMemory, extra: str = "") -> str:
    flag = "pinned" if m.pinned else m.state
    text = m.text.replace("\n", " / ")
    if len(text) > 100:
        text = text[:97] + "..."
    return f"#{m.id:<5} {m.day or '':<10}  {m.kind:<18} S={round(m.strength, 3):<4g} R={m.retention:.3f} {flag:<8} {extra}{text}"


def _companion(bank, args):
    """The companion over ``bank``, for a deletion: its model is built only if a deletion needs it
    (it never does: the days are summarised again at the next rollover)."""
    from ..config import Settings
    from ..factory import build_backend, build_companion

    settings = Settings.load(home=args.home)
    return build_companion(settings, bank=bank, backend=build_backend(settings, lazy=True))


def _delete(bank, args) -> int:
    """Delete memories for good, as the memory page and the API do (``Companion.forget``: with
    what was written from them and every copy of their words)."""
    from memory.bank import UnknownMemory

    from ..core.memory_view import memory_id

    if not args.query:
        print("siliconfriend: memories delete needs the ids of the memories", file=sys.stderr)
        return 2
    companion = _companion(bank, args)
    try:
        n = companion.forget(args.user, [memory_id(i) for i in args.query])
    except UnknownMemory as exc:
        print(f"siliconfriend: {exc.args[0] if exc.args else exc}: nothing was deleted", file=sys.stderr)
        return 1
    print(f"{n} memories deleted for good, with every copy of their words")
    return 0


def cmd_memories(args) -> int:
    from memory.records import Kind, State
    from memory.shown import shown

    bank = _bank(args)
    now = _now(args)
    try:
        if not _known_user(bank, args.user):
            return 1
        if args.action == "delete":
            return _delete(bank, args)
        if args.action == "search":
            if not args.query:
                print("siliconfriend: memories search needs a query", file=sys.stderr)
                return 2
            for hit in bank.search_text(args.user, " ".join(args.query), now, k=args.k, include_archived=args.all):
                print(_fmt(shown(hit.record, bank.policy_for(args.user), now), f"score={hit.score:.3f} "))
                print(f"        why: {'; '.join(hit.reasons)}")
        else:
            filters: dict[str, Any] = {}
            if args.day:
                filters["day"] = date.fromisoformat(args.day)
            if args.kind:
                filters["kind"] = Kind(args.kind)
            if not args.all:
                filters["state"] = State.ACTIVE
            for rec in bank.records(args.user, **filters):
                print(_fmt(shown(rec, bank.policy_for(args.user), now)))
    finally:
        bank.close()
    return 0


def cmd_forget(args) -> int:
    from memory.shown import shown

    bank = _bank(args)
    now = _now(args)
    try:
        if not _known_user(bank, args.user):
            return 1
        if args.shadow:
            return _shadow(bank, args.user, now, args)
        decisions = bank.forget_pass(args.user, now, rng=random.Random(args.seed), dry_run=args.dry_run)
        for d in decisions:
            mark = "ARCHIVE" if d.archived else "keep   "
            print(f"{mark} {_fmt(shown(d.record, bank.policy_for(args.user), now))}")
        n = sum(d.archived for d in decisions)
        verb = "would be archived" if args.dry_run else "archived"
        print(f"{n} of {len(decisions)} memories {verb} (threshold {bank.policy.threshold}, mode {bank.policy.mode})")
        configured = bank.policy.paces()
        print(
            "paces (t runs at this share of the clock; learned where it differs from the setting): "
            + ", ".join(
                f"{sort} {pace:g}" + (f" (set {configured[sort]:g})" if pace != configured[sort] else "")
                for sort, pace in bank.paces(args.user).items()
            )
        )
        if args.purge and not args.dry_run:
            n = _companion(bank, args).purge_archived(args.user)
            print(
                f"{n} archived memories deleted for good, with what was written from them (their days are summarised again)"
            )
    finally:
        bank.close()
    return 0


def _shadow(bank, user: str, now, args) -> int:
    """``forget --shadow SPEC``: the pass of the policy in use and of another beside it, both dry:
    what each would archive, and where they differ."""
    from memory.forgetting import EbbinghausPolicy, varied
    from memory.shown import shown

    in_use = bank.policy_for(user)
    try:
        if not isinstance(in_use, EbbinghausPolicy):
            raise ValueError("the policy in use is not the forgetting curve's: no shadow of it")
        other = varied(in_use, args.shadow)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mine = bank.forget_pass(user, now, rng=random.Random(args.seed), dry_run=True)
    theirs = {
        d.record.stored_id: d
        for d in bank.forget_pass(user, now, rng=random.Random(args.seed), dry_run=True, policy=other)
    }
    both = sum(d.archived and theirs[d.record.stored_id].archived for d in mine)
    for d in mine:
        shadow = theirs[d.record.stored_id]
        if d.archived != shadow.archived:
            who = "only in use" if d.archived else "only shadow"
            print(f"{who:11} {_fmt(shown(d.record, in_use, now))} R={d.retention:.3f} / {shadow.retention:.3f}")
    n_mine, n_theirs = sum(d.archived for d in mine), sum(d.archived for d in theirs.values())
    print(f"in use: {n_mine} of {len(mine)} active memories would be archived")
    print(
        f"shadow ({args.shadow}): {n_theirs} would be archived; both {both}, only in use {n_mine - both}, only shadow {n_theirs - both}"
    )
    print("nothing was archived (a shadow pass is always dry)")
    return 0


def _ablations():
    from dataclasses import replace

    return {
        "hybrid": lambda c: c,
        "dense-only": lambda c: replace(c, dense_weight=1.0, previous_weight=0, next_weight=0, use_dates=False),
        "lexical-only": lambda c: replace(c, dense_weight=0.0, previous_weight=0, next_weight=0, use_dates=False),
        "no-dates": lambda c: replace(c, use_dates=False),
        "no-neighbours": lambda c: replace(c, previous_weight=0, next_weight=0),
        "no-replies": lambda c: replace(c, use_replies=False),
        "no-archive": lambda c: replace(c, archive_penalty=None),
        "flat-archive": lambda c: replace(c, graded_archive=False),  # every archived memory pays the penalty
        "archive-bar-best": lambda c: replace(c, archive_bar="best"),  # only the pool's best match goes free
        # fresher memories first among near-ties: a share of each memory's retention added to its score
        "retention-term": lambda c: replace(c, retention_weight=0.05),
        # memory as a network (memory/links.py): no spreading at all, or along one kind of link
        "no-links": lambda c: replace(c, link_weight=0.0),
        "links-entities-only": lambda c: replace(
            c, spread=replace(c.spread, summary_share=0.0, conversation_share=0.0)
        ),
        "links-conversation-only": lambda c: replace(c, spread=replace(c.spread, entity_share=0.0, summary_share=0.0)),
        "links-one-hop": lambda c: replace(c, spread=replace(c.spread, decay=0.0)),  # no second hop
        # the sides weighed by their evidence for each query, instead of half each
        "fusion-evidence": lambda c: replace(c, fusion="evidence"),
        "fusion-vocabulary": lambda c: replace(c, fusion="vocabulary"),
        # the embedder reads alone, whatever the message's words say (no second reader asked)
        "no-second-reader": lambda c: replace(c, second_reader_below=0.0),
    }


ABLATIONS = _ablations()


def cmd_eval(args) -> int:
    from dataclasses import replace

    from memory.embedders import create_embedder
    from memory.retrieval import RetrievalConfig
    from memory.tiers import parse_shares

    from ..bench.retrieval_eval import PROMPT_WAYS, PromptBudget, evaluate_retrieval
    from ..config import Settings
    from ..factory import build_policy

    if (args.users or args.days) and not args.as_used:
        print("error: --users and --days bound the days lived: add --as-used", file=sys.stderr)
        return 2
    settings = Settings.load(home=args.home)
    ks = tuple(sorted({1, 2, 3, 5, 10, args.k}))
    details: list | None = [] if args.details else None
    config = ABLATIONS[args.ablation](RetrievalConfig(k=settings.retrieval_k))
    backend = None
    if args.backend:
        from ..factory import build_backend

        backend = build_backend(replace(settings, backend=args.backend, model=args.model or settings.model))
    from tqdm import tqdm

    result = evaluate_retrieval(
        args.bank,
        args.labels,
        create_embedder(args.embedder or settings.embedder),
        policy=build_policy(settings),
        config=config,
        ks=ks,
        details=details,
        as_used=args.as_used,
        backend=backend,
        lang=args.lang or settings.lang,
        progress=tqdm,  # the turns imported (or lived) so far and an ETA, on stderr: long banks take minutes
        database_url=args.database_url,
        second=create_embedder(settings.second_reader) if settings.second_reader else None,
        users=args.users,
        days=args.days,
        compress=settings.compress_before_archiving,
        prompt=PromptBudget(
            tokens=args.prompt_tokens,
            shares=tuple(parse_shares(settings.memory_tier_shares).items()),
            k=settings.retrieval_k,
            lang=args.lang or settings.lang,
        )
        if args.prompt_tokens
        else None,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['n']} questions with evidence")
        print("k      " + "  ".join(f"{k:>6}" for k in ks))
        print("recall " + "  ".join(f"{result[f'recall@{k}']:6.3f}" for k in ks))
        print("hit    " + "  ".join(f"{result[f'hit@{k}']:6.3f}" for k in ks))
        for cue, c in result.get("by_cue", {}).items():
            print(f"found by {cue}: recall@5 {c['recall@5']:.3f}, recall@10 {c['recall@10']:.3f}")
        for category, c in result.get("by_category", {}).items():
            print(
                f"category {category}: {c['n']} questions, recall@5 {c['recall@5']:.3f}, recall@10 {c['recall@10']:.3f}"
            )
        if result.get("evidence_kept") is not None:
            print(
                f"evidence kept (active when asked) {result['evidence_kept']:.3f}; turns archived"
                f" {result['turns_archived']:.3f} (their words {result['turn_words_archived']:.3f}),"
                f" a year on {result['turns_archived_a_year_on']:.3f}"
            )
        if "prompt" in result:
            p = result["prompt"]
            print(
                f"in a prompt of {p['tokens']} memory tokens: "
                + "; ".join(
                    f"{way} {p[way]['prompt_recall']:.3f} of the evidence"
                    f" ({p[way]['prompt_turns']:.1f} turns, {p[way]['prompt_tokens']:.0f} tokens)"
                    for way in PROMPT_WAYS
                )
            )
        if "summaries" in result:
            print("summaries written: " + ", ".join(f"{k} {n}" for k, n in result["summaries"].items()))
    if details is not None:
        for d in details:
            print(json.dumps(d, ensure_ascii=False), file=sys.stderr)
    return 0


def cmd_eval_grounding(args) -> int:
    from dataclasses import replace

    from memory.embedders import create_embedder

    from ..bench.grounding_eval import evaluate_grounding, format_grounding
    from ..config import Settings
    from ..core.consolidate import SUMMARY_SAMPLING
    from ..factory import build_backend

    settings = Settings.load(home=args.home)
    if args.backend or args.model:
        settings = replace(settings, backend=args.backend or settings.backend, model=args.model or settings.model)
    backend = build_backend(settings)

    def log(line: str) -> None:
        if not args.json or args.verbose:
            print(f"[grounding] {line}", file=sys.stderr, flush=True)

    result = evaluate_grounding(
        args.bank,
        create_embedder(args.embedder or settings.embedder),
        backend,
        users=args.users,
        days=args.days,
        lang=args.lang or settings.lang,
        summary_tokens=args.summary_tokens,
        companion_name=settings.companion_name,
        progress=log,
        sampling=None if args.summary_sampling == "backend" else SUMMARY_SAMPLING,
    )
    print(json.dumps(result, ensure_ascii=False) if args.json else format_grounding(result))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-memorybank", help="import a MemoryBank JSON file")
    p.add_argument("file")
    p.add_argument("--user", help="import only this user of the file")
    p.add_argument("--as-user", help="store under this user name instead")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export-memorybank", help="export memories as MemoryBank JSON")
    p.add_argument("--user", help="only this user (default: all)")
    p.add_argument("--out", help="file to write (default: standard output)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("memories", help="list, search or delete a user's memories, with S and R")
    p.add_argument("action", choices=["list", "search", "delete"])
    p.add_argument("query", nargs="*", help="search: the words; delete: the memory ids")
    p.add_argument("--user", required=True)
    p.add_argument("--day", help="only this day (YYYY-MM-DD)")
    p.add_argument(
        "--kind", choices=["turn", "daily_events", "global_events", "daily_personality", "global_personality"]
    )
    p.add_argument("--all", action="store_true", help="include archived memories")
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--now", help="the time to compute retention at (default: now)")
    p.set_defaults(func=cmd_memories)

    p = sub.add_parser("forget", help="the forgetting pass: archive what has faded")
    p.add_argument("--user", required=True)
    p.add_argument("--dry-run", action="store_true", help="show S, R and what would be archived")
    p.add_argument("--purge", action="store_true", help="then delete archived memories for good")
    p.add_argument("--seed", type=int, default=0, help="seed for the probabilistic mode")
    p.add_argument(
        "--shadow",
        metavar="POLICY",
        help="run another policy beside the one in use and report what each would archive (nothing is archived): "
        "one-pace, one-threshold, paper, or settings such as threshold=0.2,pace.people=0.25",
    )
    p.add_argument("--now")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("eval", help="evaluations")
    esub = p.add_subparsers(dest="what", required=True)
    e = esub.add_parser("retrieval", help="recall@k / hit@k on labelled probing questions")
    e.add_argument("--bank", required=True)
    e.add_argument("--labels", required=True)
    e.add_argument("--k", type=int, default=5)
    e.add_argument("--embedder", help="override the configured embedder")
    e.add_argument("--json", action="store_true")
    e.add_argument(
        "--details",
        action="store_true",
        help="per-question rankings on stderr, each retrieved turn with the cue and the side that found it "
        "and the link it was reached along",
    )
    e.add_argument(
        "--ablation",
        choices=sorted(ABLATIONS),
        default="hybrid",
        help="switch parts of retrieval off, to see what each one brings",
    )
    e.add_argument(
        "--database-url",
        help="evaluate the PostgreSQL store: the bank goes into a scratch database on this server (dropped afterwards)",
    )
    e.add_argument(
        "--as-used",
        action="store_true",
        help="live the bank's days as the companion does (importance, rehearsal, the default "
        "forgetting at each day's end), then ask each question at its time",
    )
    e.add_argument(
        "--backend",
        help="with --as-used: write the daily summaries with this backend "
        "(default: the summaries the bank file carries)",
    )
    e.add_argument("--model", help="with --backend: the model")
    e.add_argument("--lang", choices=["en", "zh"], help="language of the summaries written with --backend")
    e.add_argument("--users", type=int, help="with --as-used: only the first N users of the file")
    e.add_argument(
        "--days",
        type=int,
        help="with --as-used: only each user's first N days (questions whose evidence lies later are left out)",
    )
    e.add_argument(
        "--prompt-tokens",
        type=int,
        metavar="N",
        help="also measure what a prompt's memory budget of N tokens holds (the settings' "
        "memory_tokens: 1000), filled by tier (memory_tier_shares) from the first retrieval_k "
        "hits, in the ranking's order from the same hits, and from the ranking without the cap",
    )
    e.set_defaults(func=cmd_eval)

    e = esub.add_parser(
        "grounding",
        help="do the daily and global summaries say only what was said? (the configured backend writes them)",
        description="Lives the first days of the first users of a MemoryBank file, with the day "
        "rollover after each day, and reports the share of summary and personality sentences "
        "grounded in what was said, invented names per text, and how often the extractive "
        "fallback was taken.",
    )
    e.add_argument("--bank", required=True)
    e.add_argument("--backend", help="override the configured backend")
    e.add_argument("--model", help="override the configured model")
    e.add_argument("--users", type=int, default=3, help="the first N users of the file (default 3)")
    e.add_argument("--days", type=int, default=2, help="the first N days of each (default 2)")
    e.add_argument("--lang", choices=["en", "zh"], help="the prompts' language (default: the configured one)")
    e.add_argument("--summary-tokens", type=int, default=120, help="the longest summary, in tokens (default 120)")
    e.add_argument("--embedder", help="override the configured embedder (the check's)")
    e.add_argument(
        "--summary-sampling",
        choices=["summary", "backend"],
        default="summary",
        help="the summaries' generation: the companion's for summaries (greedy; the default) or the "
        "backend's own, as for a reply",
    )
    e.add_argument("--json", action="store_true")
    e.add_argument("-v", "--verbose", action="store_true", help="what the model wrote, on stderr, with --json too")
    e.set_defaults(func=cmd_eval_grounding)
