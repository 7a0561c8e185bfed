"""Retrieval evaluation on MemoryBank probing questions with evidence labels.

The bank is loaded into a temporary home (never the user's) and each labelled question runs the
retrieval a chat turn uses, for its user, without reinforcing. recall@k is the share of a
question's evidence turns among the first k distinct dialogue turns retrieved (other kinds of hits
are skipped); hit@k is whether at least one is.

"Now" for a question is its label's ``asked_at`` (an ISO date or datetime, or LongMemEval's
``YYYY/MM/DD (Day) HH:MM``) when it has one, else 09:00 on the day after the bank's last date.
A label's optional ``context`` (``[{"role", "content"}]``: the talk before the question, as in
MADial-Bench) is given to retrieval as the turn gives it today's conversation (``label_talk``);
each retrieved turn is credited to the cue that found it (``Hit.cue``), counted per cue.

Two ways to load the bank:
- plain: imported at once, as ``import-memorybank`` does (the file's strengths, nothing forgotten);
- ``as_used``: lived as the companion lives it. Day by day, each message recalls what a chat
  turn's prompt would (``_TurnRecall``: retrieval by the message and the day's talk so far), the
  turn is stored as chat turns are (importance rated, both vectors), and what was recalled gains
  by how the recorded reply used it; at each day's end the rollover runs: the day's
  summary (written by ``backend`` when one is given, else the summary the file carries), the
  rehearsal it brings (``MemoryBank.rehearse``), then the default forgetting pass. A question is
  asked when its time comes, so that it sees only what was said before it; one asked after the
  last day comes with a forgetting pass at its time, as the companion's rollover would run.
  With a ``backend`` the summaries are written as the companion writes them (its summary length,
  the grounding check, the fallbacks), and the result says how each ended (``summaries``).
  ``users`` / ``days`` live only the first users of the file, each its first days (a slow
  backend writes eight texts a day at most); a question whose evidence lies outside is left out.

What the prompt holds (``prompt``, a ``PromptBudget``): recall@k is the ranking's, but the reply
sees only what fits the prompt's memory budget. With a budget, each question's first ``k`` hits
are laid out as the companion lays them out (``Companion.memory_parts``, each memory's line with
its date) and placed by ``tiers.allot``: by tier, each within its share of the budget
(``tiers``), or in the ranking's order within the same budget (``rank_order``), or the ranking's
hits, as many as the budget holds, without the cap of ``k`` (``filled``). ``prompt_recall`` is
the share of the evidence each puts in the prompt; ``prompt_memories`` the memories it holds.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Callable, Iterator

from memory.activation import confirmed_by
from memory.bank import MemoryBank
from memory.embedders import Embedder
from memory.forgetting import ForgettingPolicy
from memory.memorybank_format import BankFormatError, ParsedUser, import_bank, parse_bank
from memory.records import Kind, State
from memory.retrieval import Hit, RetrievalConfig, TalkLine, link_reason
from memory.stores.sqlite import SqliteStores
from memory.tiers import DEFAULT_SHARES, allot

KS = (1, 2, 3, 5, 10)
_LONGMEM_TIME = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*$")


@dataclass(frozen=True)
class PromptBudget:
    """The prompt's memory budget as the companion spends it (``Settings.memory_tokens``, its
    ``memory_tier_shares``, ``retrieval_k``), tokens estimated as for a remote model."""

    tokens: int = 1000
    shares: tuple[tuple[str, float], ...] = tuple(DEFAULT_SHARES.items())
    k: int = 5
    lang: str = "en"


# the ways a prompt can be filled from the ranking (see the module's text)
PROMPT_WAYS = ("tiers", "rank_order", "filled")


def parse_asked_at(value: str) -> datetime:
    """A label's ``asked_at``: ``2023-05-08``, ``2023-05-08T14:30``, ``2023/05/20 (Sat) 02:21``.
    A date alone means 09:00 that day."""
    text = str(value).strip()
    m = _LONGMEM_TIME.match(text)
    if m:
        y, mo, d, hh, mm = m.groups()
        return datetime(int(y), int(mo), int(d), int(hh or 9), int(mm or 0))
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time(9, 0))
        return datetime.fromisoformat(text)
    except ValueError:
        raise BankFormatError(
            f"asked_at {value!r} is not a date (YYYY-MM-DD[THH:MM] or YYYY/MM/DD (Day) HH:MM)"
        ) from None


def load_labels(path: Path | str) -> list[dict]:
    labels = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                item["bank_user"], item["question"], item["evidence"]
                context = item.get("context")
                if context is not None and not (
                    isinstance(context, list) and all(isinstance(m, dict) and "content" in m for m in context)
                ):
                    raise TypeError('context must be a list of {"role", "content"} objects')
                if item.get("asked_at"):
                    item["asked_at"] = parse_asked_at(item["asked_at"])
            except (json.JSONDecodeError, KeyError, TypeError, BankFormatError) as exc:
                raise BankFormatError(f"{path}: line {n}: not a label ({exc})") from None
            labels.append(item)
    return labels


def evaluate_retrieval(bank_file: Path | str, labels_file: Path | str, embedder: Embedder, **kw) -> dict:
    return evaluate_label_sets(bank_file, [labels_file], embedder, **kw)[0]


def evaluate_label_sets(
    bank_file: Path | str,
    labels_files: list[Path | str],
    embedder: Embedder,
    *,
    policy: ForgettingPolicy | None = None,
    config: RetrievalConfig | None = None,
    ks: tuple[int, ...] = KS,
    progress: Callable | None = None,
    details: list | None = None,
    as_used: bool = False,
    backend=None,
    lang: str = "en",
    database_url: str | None = None,
    users: int | None = None,
    days: int | None = None,
    summary_tokens: int | None = None,
    compress: bool = False,
    prompt: PromptBudget | None = None,
    second: Embedder | None = None,
) -> list[dict]:
    """Load the bank once (plain or ``as_used``), then score each label file on it. With
    ``database_url`` the bank goes into a scratch database on that PostgreSQL server (dropped
    afterwards), not a temporary home. ``users`` / ``days`` (``as_used`` only): the first users
    of the file, their first days. ``summary_tokens``: the longest summary ``backend`` writes
    (default: the companion's). ``compress``: long turns are compressed before they are archived
    (``memory/compression.py``), as the companion's settings say. ``prompt``: also measure what
    the prompt's memory budget holds (see the module's text). ``second``: the second reader
    (``MemoryBank.second``)."""
    label_sets = [[label for label in load_labels(f) if label.get("evidence")] for f in labels_files]
    parsed = parse_bank(bank_file)
    if users is not None or days is not None:
        if not as_used:
            raise ValueError("users and days bound the days lived: they need as_used")
        parsed = _first(parsed, users, days)
        lived = {(p.name, t[2].date().isoformat()) for p in parsed for t in p.turns}
        label_sets = [
            [x for x in labels if all((x["bank_user"].strip(), e["date"]) in lived for e in x["evidence"])]
            for labels in label_sets
        ]
    last = max((t[2] for p in parsed for t in p.turns), default=datetime(1970, 1, 1))
    default_now = datetime.combine(last.date() + timedelta(days=1), time(9, 0))
    config = config or RetrievalConfig()
    depth = max(ks)
    with _scratch_store(database_url) as where:
        bank: MemoryBank
        if database_url:
            from memory.stores.postgres import PostgresStores

            bank = MemoryBank(
                PostgresStores(where), embedder, policy=policy, retrieval=config, compress=compress, second=second
            )
        else:
            bank = MemoryBank(
                SqliteStores(where), embedder, policy=policy, retrieval=config, compress=compress, second=second
            )
        written: Counter = Counter()
        kept: dict[tuple[int, int], float] = {}
        held: dict[int, dict[str, list[tuple[str, int]]]] = {}
        asker = _Asker(bank, depth, prompt, held)
        archive: dict[str, float] = {}
        try:
            if as_used:
                rankings = _live_and_ask(
                    bank, parsed, label_sets, default_now, asker, backend, lang, progress, written, kept=kept
                )
                archive = _archived(bank, parsed, label_sets, default_now)
            else:
                import_bank(bank, bank_file, progress=progress)
                bank.settle()
                rankings = [
                    [asker(label, label.get("asked_at") or default_now) for label in labels] for labels in label_sets
                ]
        finally:
            bank.close()
    results = [_score(labels, ranked, ks, depth, details) for labels, ranked in zip(label_sets, rankings)]
    if prompt is not None:
        for labels, r in zip(label_sets, results):
            r["prompt"] = _prompt_scores(labels, held, prompt)
    if as_used:
        for s, r in enumerate(results):
            shares = [kept[(s, i)] for i in range(len(label_sets[s])) if (s, i) in kept]
            r["evidence_kept"] = round(sum(shares) / len(shares), 4) if shares else None
            r.update(archive)
    if backend is not None and as_used:
        for r in results:
            r["summaries"] = {f"{kind} {path}": n for (kind, path), n in sorted(written.items())}
    return results


def _first(parsed: list[ParsedUser], users: int | None, days: int | None) -> list[ParsedUser]:
    """The first ``users`` of the file, each with the turns of its first ``days`` days."""
    out = []
    for p in parsed[:users]:
        keep = sorted({t[2].date() for t in p.turns})[:days]
        out.append(
            ParsedUser(
                p.name,
                [t for t in p.turns if t[2].date() in keep],
                {d: x for d, x in p.daily_events.items() if d in keep},
                {d: x for d, x in p.daily_personality.items() if d in keep},
            )
        )
    return out


@contextmanager
def _scratch_store(database_url: str | None) -> Iterator[str]:
    """A temporary home folder, or a scratch database on the server of ``database_url``."""
    if not database_url:
        with tempfile.TemporaryDirectory(prefix="sf-eval-") as home:
            yield home
        return
    from memory.stores.pg_db import scratch_database

    with scratch_database(database_url, prefix="sf_eval") as url:
        yield url


def label_talk(label: dict) -> list[TalkLine]:
    """A label's ``context`` (the talk before its question, ``[{"role", "content"}]``) as the
    conversation a turn gives retrieval: each line embedded as today's stored turn would have it
    (the user's message on the query side, the reply as a passage)."""
    talk = label.get("context") or []
    return [
        TalkLine("user" if m.get("role") == "user" else "assistant", str(m.get("content") or ""))
        for m in talk
        if str(m.get("content") or "").strip()
    ]


class _Asker:
    """Asks a label's question (``_ask``) and, with a ``PromptBudget``, notes which turns each way
    of filling the prompt holds (``held``, by the label's id)."""

    def __init__(self, bank: MemoryBank, depth: int, prompt: PromptBudget | None, held: dict):
        self.bank, self.depth, self.prompt, self.held = bank, depth, prompt, held
        self.prompts = None
        if prompt is not None:
            from ..core.prompting import load_prompts

            self.prompts = load_prompts(prompt.lang)

    def __call__(self, label: dict, now: datetime) -> list[tuple]:
        hits: list[Hit] = []
        turns = _ask(self.bank, label, now, self.depth, found=hits)
        if self.prompt is not None:
            self.held[id(label)] = self._held(label, hits)
        return turns

    def _held(self, label: dict, hits: list[Hit]) -> dict[str, list[tuple[str, int]]]:
        """For each way (``PROMPT_WAYS``), the turns (day, position) in the prompt, in its order."""
        from ..backends.openai_chat import estimate_tokens
        from ..core.companion import Companion

        assert self.prompt is not None
        user = label["bank_user"].strip()
        copies = self.bank.compressed(user)
        originals = self.bank.get_many(
            user, sorted({copies[h.record.stored_id] for h in hits if h.record.stored_id in copies})
        )

        def key(h: Hit) -> tuple[str, int] | None:
            rec = originals.get(copies.get(h.record.stored_id, -1), h.record)
            return (rec.day.isoformat(), rec.position) if h.record.kind == Kind.TURN else None

        shares = dict(self.prompt.shares)
        one_tier = {t: (1.0 if t == "active" else 0.0) for t in shares}
        first = hits[: self.prompt.k]
        out: dict[str, list[tuple[str, int]]] = {}
        for way, chosen, tiered in (("tiers", first, True), ("rank_order", first, False), ("filled", hits, False)):
            lines = [
                Companion.memory_parts(h.record, self.prompts, h.tier if tiered else "active")  # type: ignore[arg-type]
                for h in chosen
            ]
            placed = allot(lines, self.prompt.tokens, estimate_tokens, shares if tiered else one_tier)
            out[way] = [k for p in placed if (k := key(chosen[p.index])) is not None]
            out[f"{way} tokens"] = [sum(estimate_tokens(p.text) + 1 for p in placed)]  # type: ignore[list-item]
        return out


def _prompt_scores(labels: list[dict], held: dict, prompt: PromptBudget) -> dict:
    """Of each label's evidence, the share that each way of filling the prompt holds, on average;
    how many turns it holds, and the tokens its memories take."""
    out: dict = {"tokens": prompt.tokens, "k": prompt.k}
    for way in PROMPT_WAYS:
        recall = memories = tokens = 0.0
        for label in labels:
            evidence = {(e["date"], int(e["turn"])) for e in label["evidence"]}
            inside = held.get(id(label), {}).get(way, [])
            recall += len(evidence & set(inside)) / len(evidence)
            memories += len(inside)
            tokens += sum(held.get(id(label), {}).get(f"{way} tokens", [0]))
        n = max(1, len(labels))
        out[way] = {
            "prompt_recall": round(recall / n, 4),
            "prompt_turns": round(memories / n, 2),
            "prompt_tokens": round(tokens / n, 1),
        }
    return out


def _ask(bank: MemoryBank, label: dict, now: datetime, depth: int, found: list[Hit] | None = None) -> list[tuple]:
    """The first ``depth`` distinct turns (day, position) retrieved for the label's question, with
    the cue that found each, the side of the search that gave it the most, and the link it was
    reached along (``link_reason``) or None. ``found``: filled with the hits themselves."""
    # ask for enough hits that `depth` distinct turns remain after skipping summaries
    hits: list[Hit] = bank.retrieve(
        label["bank_user"].strip(), label["question"], now, k=depth * 2, talk=label_talk(label)
    )
    if found is not None:
        found.extend(hits)
    turns: list[tuple] = []
    seen: set[tuple[str, int]] = set()
    # a compressed copy (memory/compression.py) is the turn it was made from, shortened
    copies = bank.compressed(label["bank_user"].strip())
    originals = bank.get_many(
        label["bank_user"].strip(), sorted({copies[h.record.stored_id] for h in hits if h.record.stored_id in copies})
    )
    for h in hits:
        rec = originals.get(copies.get(h.record.stored_id, -1), h.record)
        key = (rec.day.isoformat(), rec.position)
        if h.record.kind == Kind.TURN and key not in seen:
            seen.add(key)
            turns.append((*key, h.cue, h.side, link_reason(h.link) if h.link else None))
    return turns[:depth]


def _live_and_ask(
    bank: MemoryBank,
    parsed: list[ParsedUser],
    label_sets: list[list[dict]],
    default_now: datetime,
    asker: "_Asker",
    backend,
    lang: str,
    progress: Callable | None,
    written: Counter,
    summary_tokens: int | None = None,
    *,
    kept: dict[tuple[int, int], float] | None = None,
) -> list[list]:
    """Each user's days lived in order with the day rollover, each question asked at its time.
    ``kept``: for each question (label set, index), the share of its evidence still active when
    it is asked."""
    rankings: list[list] = [[None] * len(labels) for labels in label_sets]
    asked: dict[str, list[tuple[datetime, int, int]]] = defaultdict(list)
    for s, labels in enumerate(label_sets):
        for i, label in enumerate(labels):
            asked[label["bank_user"].strip()].append((label.get("asked_at") or default_now, s, i))
    recall = _TurnRecall(bank)
    consolidator = None
    if backend is not None:
        from ..core.consolidate import SUMMARY_TOKENS, Consolidator

        consolidator = Consolidator(bank, backend, summary_tokens=summary_tokens or SUMMARY_TOKENS)
    bar = progress(total=sum(len(p.turns) for p in parsed), desc="living the days", unit="turn") if progress else None
    for p in parsed:
        queue = sorted(asked.get(p.name, []), key=lambda q: q[0])

        def ask_until(moment: datetime, queue: list = queue) -> None:
            while queue and queue[0][0] <= moment:
                when, s, i = queue.pop(0)
                rankings[s][i] = asker(label_sets[s][i], when)
                if kept is not None:
                    kept[(s, i)] = _evidence_active(bank, label_sets[s][i])

        by_day: dict[date, list] = defaultdict(list)
        for turn in p.turns:
            by_day[turn[2].date()].append(turn)
        previous: date | None = None
        for day in sorted(by_day):
            start = datetime.combine(day, time(0, 0))
            if previous is not None:
                _rollover(bank, p, previous, start, consolidator, lang, ask_until, written)
            ask_until(start)
            today: list = []
            recall.new_day()
            for query, response, when, _, _ in by_day[day]:
                ask_until(when)
                used, competitors = recall.before(p.name, query, when, today) if query.strip() else ([], {})
                today.extend(bank.add_turns(p.name, [(query, response, when)]))
                if used:
                    recall.after(p.name, query, response, when, used, competitors)
            previous = day
            if bar:
                bar.update(len(by_day[day]))
        if previous is not None:
            _rollover(
                bank,
                p,
                previous,
                datetime.combine(previous + timedelta(days=1), time(0, 0)),
                consolidator,
                lang,
                ask_until,
                written,
            )
        while queue:
            # a later question comes with the rollover of its own day: the forgetting pass at its
            # time (without recalls in between, one pass then archives what daily passes would)
            bank.forget_pass(p.name, queue[0][0])
            ask_until(queue[0][0])
    if bar:
        bar.close()
    return rankings


class _TurnRecall:
    """What a chat turn's prompt recalls, as the companion's turn does it (``Companion._prompt``
    and ``_reinforce``): the message (``cue_text``) and the day's latest exchanges
    (``TALK_TURNS``) cue retrieval; the memories already in the prompt as today's conversation
    (its last ``HISTORY_TURNS`` turns) are left out; the first ``retrieval_k`` hits are the
    prompt's memories. Once the turn is stored they gain by how well they matched and whether the
    recorded reply used them, and those the message confirms are validated (``MemoryBank.recall``).
    What the companion adds to a prompt beside the cue's hits (the core tier, a memory brought
    up) is not: the file's days are not a companion's conversation."""

    def __init__(self, bank: MemoryBank):
        self.bank = bank
        self.previous: tuple[list[Hit], str] = ([], "")

    def new_day(self) -> None:
        self.previous = ([], "")  # a confirmation answers today's previous reply only

    def before(self, user: str, query: str, when: datetime, today: list) -> tuple[list[Hit], dict[int, float]]:
        """The prompt's memories for ``query``, and their competitors (retrieval-induced forgetting)."""
        from ..core.companion import HISTORY_TURNS, TALK_TURNS, competitors_of, prompt_candidates

        exclude = {t.id for t in today[-HISTORY_TURNS:]}
        talk = self.bank.talk(user, today[-TALK_TURNS:])
        found = prompt_candidates(self.bank, user, query, when, exclude=exclude, talk=talk)
        used = found[: self.bank.retrieval_config.k]
        return used, competitors_of(found, {h.record.id for h in used})

    def after(self, user: str, query: str, reply: str, when: datetime, used: list[Hit], competitors: dict) -> None:
        before, previous_reply = self.previous
        previous = [h.record for h in before]
        confirmed = confirmed_by(self.bank.tokenizer, [h.record for h in used], query, previous, previous_reply)
        scored = [(h.record, h.score) for h in used]
        self.bank.recall(user, scored, reply, when, confirmed=confirmed, competitors=competitors)
        self.previous = (used, reply)


def _evidence_active(bank: MemoryBank, label: dict) -> float:
    """The share of a label's evidence turns that are active (not archived) now."""
    user = label["bank_user"].strip()
    active = 0
    kept_by_copy = {original for copy, original in bank.compressed(user).items()}
    for e in label["evidence"]:
        day = date.fromisoformat(e["date"])
        active += any(
            t.position == int(e["turn"])
            and (t.state == State.ACTIVE or (t.stored_id in kept_by_copy and _copy_active(bank, user, t.stored_id)))
            for t in bank.turns_on(user, day)
        )
    return active / len(label["evidence"])


def _copy_active(bank: MemoryBank, user: str, original: int) -> bool:
    """Whether the compressed copy of an archived turn is still active (the turn lives on, shortened)."""
    copy = next((c for c, o in bank.compressed(user).items() if o == original), None)
    found = bank.get_many(user, [copy]) if copy is not None else {}
    return any(r.state == State.ACTIVE for r in found.values())


def _archived(bank: MemoryBank, parsed: list[ParsedUser], label_sets: list[list[dict]], default_now: datetime) -> dict:
    """What forgetting let go once every question was asked: the share of the turns archived,
    the share of their words (what a prompt that carried all active memory would not carry),
    and the share of the turns that a forgetting pass a year after each user's last question (or
    last day) would leave archived, no recall in between."""
    last: dict[str, datetime] = {}
    for labels in label_sets:
        for label in labels:
            user, when = label["bank_user"].strip(), label.get("asked_at") or default_now
            last[user] = max(last.get(user, when), when)
    turns = archived = words = archived_words = year_on = 0
    for p in parsed:
        records = bank.records(p.name, kind=Kind.TURN)
        n_words = [len(bank.tokenizer.tokenize(r.text)) for r in records]
        turns += len(records)
        archived += sum(r.state == State.ARCHIVED for r in records)
        words += sum(n_words)
        archived_words += sum(n for r, n in zip(records, n_words) if r.state == State.ARCHIVED)
        end = max([last.get(p.name, default_now), *(t[2] for t in p.turns)])
        decisions = bank.forget_pass(p.name, end + timedelta(days=365), dry_run=True)
        year_on += sum(r.state == State.ARCHIVED for r in records) + sum(
            d.archived for d in decisions if d.record.kind == Kind.TURN
        )
    return {
        "turns_archived": round(archived / turns, 4) if turns else 0.0,
        "turn_words_archived": round(archived_words / words, 4) if words else 0.0,
        "turns_archived_a_year_on": round(year_on / turns, 4) if turns else 0.0,
    }


def _rollover(
    bank: MemoryBank,
    p: ParsedUser,
    day: date,
    at: datetime,
    consolidator,
    lang: str,
    ask_until: Callable[[datetime], None],
    written: Counter,
) -> None:
    """The end of ``day``: its summary, the rehearsal, the forgetting pass (as ``Consolidator.run``)."""
    ask_until(at - timedelta(seconds=1))
    if consolidator is not None:
        report = consolidator.run(p.name, at, until=day, lang=lang, forget=True)
        written.update((w.kind.value, w.path) for w in report.written)
        if report.failed:  # a day whose summaries the backend failed to write (retried next night)
            written[("daily", "failed")] += len(report.failed)
        return
    for kind, texts in ((Kind.DAILY_EVENTS, p.daily_events), (Kind.DAILY_PERSONALITY, p.daily_personality)):
        if day in texts:
            bank.set_summary(p.name, kind, texts[day], at, day=day)
    bank.rehearse(p.name, day, at)
    bank.forget_pass(p.name, at)


def _score(labels: list[dict], rankings: list, ks: tuple[int, ...], depth: int, details: list | None) -> dict:
    """recall@k and hit@k; per category (LoCoMo's); and per cue: of all the evidence, the share
    found within the first 5 and 10 turns by each cue (the message, the conversation, ...)."""
    sums = {f"recall@{k}": 0.0 for k in ks} | {f"hit@{k}": 0.0 for k in ks}
    per_category: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # n, recall@5, recall@10
    per_cue: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # evidence share found @5, @10
    for label, ranked in zip(labels, rankings):
        evidence = {(e["date"], int(e["turn"])) for e in label["evidence"]}
        ranked = ranked or []
        turns = [(day, pos) for day, pos, *_ in ranked]
        for k in ks:
            found = len(evidence & set(turns[:k]))
            sums[f"recall@{k}"] += found / len(evidence)
            sums[f"hit@{k}"] += 1.0 if found else 0.0
        for rank, (day, pos, cue, *_) in enumerate(ranked[:10]):
            if (day, pos) in evidence:
                per_cue[cue][1] += 1 / len(evidence)
                if rank < 5:
                    per_cue[cue][0] += 1 / len(evidence)
        if "category" in label:
            c = per_category[str(label["category"])]
            c[0] += 1
            c[1] += len(evidence & set(turns[:5])) / len(evidence)
            c[2] += len(evidence & set(turns[:10])) / len(evidence)
        if details is not None:
            details.append(
                {
                    "qid": label.get("qid"),
                    "question": label["question"],
                    "evidence": sorted(evidence),
                    # each turn: its day and place, the cue and the side that found it, the link
                    "retrieved": [list(turn) for turn in ranked[:depth]],
                }
            )
    n = len(labels)
    out: dict = {"n": n}
    for k in ks:
        out[f"recall@{k}"] = round(sums[f"recall@{k}"] / n, 4) if n else 0.0
    for k in ks:
        out[f"hit@{k}"] = round(sums[f"hit@{k}"] / n, 4) if n else 0.0
    if per_category:
        out["by_category"] = {
            c: {"n": int(v[0]), "recall@5": round(v[1] / v[0], 4), "recall@10": round(v[2] / v[0], 4)}
            for c, v in sorted(per_category.items())
        }
    if per_cue and n:
        out["by_cue"] = {
            c: {"recall@5": round(v[0] / n, 4), "recall@10": round(v[1] / n, 4)} for c, v in sorted(per_cue.items())
        }
    return out
