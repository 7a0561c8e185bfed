"""What the web app does, without Gradio: every method takes the client's session token, turns
it into a user name on the server (``user``), and only ever touches that user's data.

The Gradio layer (``app.py``, ``web/chat.py``, ``web/memory_page.py``) only adapts these results to
components; tests can drive this class directly.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

from memory.bank import MemoryBank, UnknownMemory, user_key
from memory.memorybank_format import export_person
from memory.records import Kind, MemoryRecord, State

from ..accounts.users import Accounts, Session
from ..backends.base import BackendError
from ..config import Settings
from ..core.companion import MAX_MESSAGE_CHARS, used_entry
from ..core.private_files import tighten
from .client import proxy_networks

log = logging.getLogger("siliconfriend.web")

EXPORT_DIR = Path(tempfile.gettempdir()) / "siliconfriend-exports"  # used only without a home
MAX_MEMORY_ID = 2**63 - 1  # SQLite's largest integer
# the memory page's search shows a memory only when it really matches: it shares words with the
# search, is on a day the search names, or its meaning is close both absolutely and against the
# rest. e5-small puts any two short texts at 0.77-0.85 (measured on ten turns, en and zh: "banana",
# "zzqxj", "quantum physics" reach 0.83 in English; Chinese runs higher: "宠物" -> an unrelated
# "我昨天去公园跑步了。" 0.852, "小猫" -> "我今天开始学小提琴了。" 0.848), while real matches by
# meaning only reach 0.85-0.91 ("kitten" -> "My cat is called Pixel" 0.851, "小猫" -> "我的猫叫小白"
# 0.907, "宠物" -> it 0.881, "音乐" -> the violin 0.873). So a match by meaning needs a cosine of at
# least SEARCH_MIN_SIMILARITY (a search with Chinese characters: SEARCH_MIN_SIMILARITY_ZH) and
# SEARCH_MARGIN above the median of the memories found. The price: weak true matches by meaning
# alone ("mountains" -> "hiking in the Alps", 0.835) are left out. With another embedder (MiniLM's
# cosines are far lower) the search is by words and days only.
SEARCH_MIN_SIMILARITY = 0.845
SEARCH_MIN_SIMILARITY_ZH = 0.865
SEARCH_MARGIN = 0.04
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


class NotLoggedIn(PermissionError):
    """No valid session: the caller must log in (again)."""


@dataclass(frozen=True)
class MemoryRow:
    id: int
    day: str
    kind: str
    state: str
    pinned: bool
    strength: float
    retention: float
    recalls: int
    text: str
    why: str = ""
    importance: float = 0.0  # 0 small talk .. 1 a personal fact, rated when written
    status: str = ""  # the forgetting state in words: when it fades, or since when archived


class ModelUnavailable(ValueError):
    """The chosen model cannot be used now; the details are in the server's log, for its operator."""


def user_export(bank: MemoryBank, accounts: Accounts, user: str, now: datetime) -> dict:
    """Everything of ``user`` (``memorybank_format.export_person``), with their preferences."""
    return export_person(bank, user, now, accounts.prefs(user))


class BackendPool:
    """Chat backends other than the companion's own, built on first use and kept (a few). Each
    one is built at most once at a time: two users choosing the same model wait for one load."""

    def __init__(self, factory: Callable[..., Any], keep: int = 2):
        self.factory = factory
        self.keep = keep
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    def get(self, name: str, model: str, **options) -> Any:
        key = (name, model)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if key in self._cache:  # built by whoever held the lock before us
                    return self._cache[key]
            try:
                backend = self.factory(name, model=model or None, **options)
            except (BackendError, OSError, ValueError) as exc:
                log.error("model %s:%s could not be loaded: %s", name, model, exc)
                raise ModelUnavailable(
                    "that model is not available on this server right now; pick another "
                    "one or ask the server's operator"
                ) from exc
            with self._lock:
                self._cache[key] = backend
                while len(self._cache) > self.keep:
                    self._cache.popitem(last=False)
        return backend


@dataclass
class _Export:
    user: str
    token: str
    browser: str | None  # the cookie of the browser that asked (web/client.py); None: no browser
    path: Path
    expires: float
    timer: threading.Timer | None = field(default=None, repr=False)


def memory_id(value: Any) -> int:
    """A memory id from the client: a positive integer SQLite can hold, else UnknownMemory."""
    try:
        number = int(value)
        if float(value) != number:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise UnknownMemory(f"no memory {str(value)[:40]}") from None
    if not 1 <= number <= MAX_MEMORY_ID:
        raise UnknownMemory(f"no memory {str(number)[:40]}")
    return number


def real_matches(hits: list, query: str = "") -> list:
    """The hits of a memory-page search for ``query`` that match it (see SEARCH_MIN_SIMILARITY),
    best first."""
    dense = sorted(h.dense for h in hits if h.dense)
    median = dense[len(dense) // 2] if dense else 0.0
    floor = SEARCH_MIN_SIMILARITY_ZH if _CJK.search(query or "") else SEARCH_MIN_SIMILARITY
    return [
        h for h in hits if h.lexical > 0 or h.on_named_day or (h.dense >= floor and h.dense >= median + SEARCH_MARGIN)
    ]


def _no_other_backends(name: str, **options: Any) -> Any:
    raise BackendError(f"no backend other than the companion's own is configured here (asked for {name!r})")


class WebService:
    def __init__(
        self,
        settings: Settings,
        accounts: Accounts,
        bank: MemoryBank,
        *,
        companion: Any = None,
        companion_factory: Callable[[], Any] | None = None,
        clock: Callable[[], datetime] | None = None,
        backends: BackendPool | None = None,
        choices: dict[str, list[str]] | None = None,
        labels: dict[str, str] | None = None,
        api_keys: Any = None,
    ):
        """``backends``, ``choices`` (the models a user may pick) and ``labels`` ("backend:model" ->
        the name users see) come from ``factory.build_web_service``; without them only the
        companion's own model is offered.
        ``api_keys`` (``siliconfriend.api.keys.ApiKeys``) when the app serves the API."""
        self.settings = settings
        self.accounts = accounts
        self.bank = bank
        self._companion = companion
        self._companion_factory = companion_factory
        self._companion_lock = threading.Lock()
        self.clock = clock or getattr(companion, "clock", None) or datetime.now
        self.backends = backends or BackendPool(_no_other_backends)
        self.choices = choices or {settings.default_backend: [settings.model] if settings.model else []}
        self.model_labels = labels or {f"{b}:{m}": m for b, models in self.choices.items() for m in models}
        self.trusted_proxies = proxy_networks(settings.trusted_proxies)
        self._streams: dict[str, Any] = {}  # user -> the reply being generated
        self._waiting: list[tuple[str, Any]] = []  # (user, stream) of each reply not finished, in order
        self._variants: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._exports: dict[str, _Export] = {}  # ticket -> the export it names
        self._exports_lock = threading.Lock()
        self.export_dir = settings.home / "exports" if settings.home else EXPORT_DIR
        self.export_seconds = settings.export_minutes * 60
        self.api_keys = api_keys  # siliconfriend.api.keys.ApiKeys, when the app serves /v1

    # -- sessions -----------------------------------------------------------------------------
    def signup(self, name: str, password: str) -> Session:
        return self.accounts.signup(name, password)

    def login(self, name: str, password: str, *, client: str | None = None) -> Session:
        return self.accounts.login(name, password, client=client)

    def logout(self, token: str | None) -> None:
        user = self.accounts.user_for(token)
        if user and token is not None:
            self.stop(token)
        self.accounts.logout(token)

    def user(self, token: str | None) -> str:
        """The session's user, or NotLoggedIn. Every other method starts here."""
        user = self.accounts.user_for(token)
        if user is None:
            raise NotLoggedIn("please log in")
        return user

    def now(self) -> datetime:
        return self.clock()

    # -- preferences --------------------------------------------------------------------------
    def prefs(self, token: str | None) -> dict:
        user = self.user(token)
        saved = self.accounts.prefs(user)
        backend = next(iter(self.choices))
        defaults = {
            "lang": self.settings.lang,
            "backend": backend,
            "model": self.settings.model or (self.choices[backend] or [""])[0],
            "companion_name": self.settings.companion_name,
            "persona": self.settings.persona,
        }
        out = {**defaults, **{k: v for k, v in saved.items() if v not in (None, "")}}
        if out["model"] not in self.choices.get(out["backend"], []):  # no longer offered: the default
            out["backend"], out["model"] = defaults["backend"], defaults["model"]
        return out

    def save_prefs(self, token: str, **prefs) -> dict:
        user = self.user(token)
        if "lang" in prefs and prefs["lang"] not in ("en", "zh"):
            raise ValueError("language must be en or zh")
        if "backend" in prefs and prefs["backend"] not in self.choices:
            raise ValueError("that model is not offered on this server; pick one from the list")
        if prefs.get("model") is not None:
            backend = prefs.get("backend") or self.prefs(token)["backend"]
            if str(prefs["model"]).strip() not in self.choices.get(backend, []):
                raise ValueError("that model is not offered on this server; pick one from the list")
        for key in ("companion_name", "persona", "model"):
            if key in prefs and prefs[key] is not None:
                prefs[key] = str(prefs[key]).strip()[:2000]
        self.accounts.set_prefs(user, **prefs)
        return self.prefs(token)

    # -- chat ---------------------------------------------------------------------------------
    @property
    def companion(self) -> Any:
        with self._companion_lock:
            if self._companion is None:
                if self._companion_factory is None:
                    raise RuntimeError("no companion configured")
                self._companion = self._companion_factory()
            return self._companion

    def _backend_for(self, prefs: dict) -> Any:
        """None for the configured default (the companion's own), else the chosen backend."""
        default_backend = next(iter(self.choices))
        default_model = self.settings.model or (self.choices[default_backend] or [""])[0]
        if (prefs["backend"], prefs["model"]) == (default_backend, default_model):
            return None
        return self.backends.get(prefs["backend"], prefs["model"])

    def _companion_for(self, prefs: dict) -> Any:
        """The companion, speaking as this user's chosen name and persona. The variant is a
        shallow copy sharing the bank, backend, consolidator and locks; only its settings differ."""
        base = self.companion
        settings = getattr(base, "settings", None)
        name, persona = prefs.get("companion_name") or "", prefs.get("persona") or ""
        if (
            not isinstance(settings, Settings)
            or (name or settings.companion_name) == settings.companion_name
            and persona == settings.persona
        ):
            return base
        key = (name or settings.companion_name, persona)
        with self._companion_lock:
            variant = self._variants.get(key)
            if variant is None:
                variant = copy.copy(base)
                variant.settings = replace(settings, companion_name=key[0], persona=persona)
                self._variants[key] = variant
                while len(self._variants) > 64:
                    self._variants.popitem(last=False)
            self._variants.move_to_end(key)
            return variant

    def _start(self, token: str, method: str, *args) -> Any:
        user = self.user(token)
        prefs = self.prefs(token)
        backend = self._backend_for(prefs)
        stream = getattr(self._companion_for(prefs), method)(user, *args, lang=prefs["lang"], backend=backend)
        self._streams[user] = stream
        with self._companion_lock:
            self._waiting.append((user, stream))
        return stream

    def ahead(self, token: str) -> int:
        """How many replies started before this user's latest one and are not finished yet (the
        model answers one at a time)."""
        user = self.user(token)
        with self._companion_lock:
            mine = [i for i, (name, _) in enumerate(self._waiting) if name == user]
            return mine[-1] if mine else 0

    @staticmethod
    def check_message(text: str | None) -> str:
        """The message to send, or ValueError saying what is wrong with it (nothing is lost)."""
        text = (text or "").strip()
        if not text:
            raise ValueError("the message is empty: type something to say")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ValueError(
                f"the message has {len(text):,} characters, more than the {MAX_MESSAGE_CHARS:,} "
                f"one message can hold: split it into parts (it is still in the box)"
            )
        return text

    def respond(self, token: str, text: str) -> Any:
        self.user(token)
        return self._start(token, "respond", self.check_message(text))

    def regenerate(self, token: str) -> Any:
        return self._start(token, "regenerate")

    def finished(self, token: str, stream: Any) -> None:
        """The reply ``stream`` is over (also after a logout: found by the stream itself)."""
        with self._companion_lock:
            self._waiting = [(name, s) for name, s in self._waiting if s is not stream]
        for name, current in list(self._streams.items()):
            if current is stream:
                del self._streams[name]

    def stop(self, token: str) -> bool:
        user = self.user(token)
        stream = self._streams.get(user)
        if stream is None:
            return False
        stream.stop()
        return True

    def today(self, token: str) -> list[MemoryRecord]:
        return list(self.companion.today(self.user(token)))

    def delete_turn(self, token: str, turn_id: int) -> None:
        user = self.user(token)
        self.bank.get(user, memory_id(turn_id))  # UnknownMemory unless it is this user's
        self.companion.delete_turn(user, memory_id(turn_id))

    # -- API keys (account page) --------------------------------------------------------------
    def _keys(self) -> Any:
        if self.api_keys is None:
            raise ValueError("this server does not serve the API")
        return self.api_keys

    def list_api_keys(self, token: str) -> list:
        user = self.user(token)
        return self._keys().list(user)

    def create_api_key(self, token: str, label: str = ""):
        """A new key for this user: its text is in the result once and never again."""
        user = self.user(token)
        return self._keys().create(user, label)

    def revoke_api_key(self, token: str, key_id: int):
        user = self.user(token)
        return self._keys().revoke(user, int(key_id))

    # -- memory page --------------------------------------------------------------------------
    def _row(self, rec: MemoryRecord, now: datetime, why: str = "") -> MemoryRow:
        return MemoryRow(
            rec.stored_id,
            rec.day.isoformat() if not rec.kind.is_global else "",
            rec.kind.value,
            rec.state.value,
            rec.pinned,
            round(rec.strength, 2),
            round(self.bank.retention(rec, now), 3),
            rec.recall_count,
            rec.text,
            why,
            round(rec.importance, 2),
            self._status(rec, now),
        )

    def _status(self, rec: MemoryRecord, now: datetime) -> str:
        """The memory's forgetting state, in words, for the memory page."""
        if rec.pinned:
            return "pinned: never fades"
        if rec.kind.is_global:
            return "global summary: never fades"
        if rec.state == State.ARCHIVED:
            since = f" since {rec.archived_at.date().isoformat()}" if rec.archived_at else ""
            return f"faded{since}: back only on a strong cue, or restore it"
        if rec.state == State.SUPERSEDED:
            why = rec.extra.get("superseded") or {}
            by = f" by #{why['by']}" if why.get("by") else ""
            return f"superseded ({why.get('reason') or 'replaced'}){by}: kept, never used again"
        fades = getattr(self.bank.policy, "fades_at", lambda r: None)(rec)
        if fades is None:
            return "active"
        days = (fades - now).total_seconds() / 86400
        return f"active: fades in {days:.0f} days unless recalled" if days > 0 else "active: fades at the next rollover"

    def memories(
        self,
        token: str,
        *,
        day: str | date | None = None,
        kind: str | None = None,
        state: str | None = None,
        query: str = "",
        include_archived: bool = True,
    ) -> list[MemoryRow]:
        user = self.user(token)
        if not self.bank.has_user(user):
            return []
        now = self.now()
        day = date.fromisoformat(day) if isinstance(day, str) and day else (day or None)
        kind_v = Kind(kind) if kind else None
        state_v = State(state) if state else None
        if query and query.strip():
            hits = self.bank.search_text(user, query.strip(), now, k=50, include_archived=include_archived)
            hits = real_matches(hits, query)
            rows = [
                self._row(h.record, now, "; ".join(r for r in h.reasons if r != "closest of what is remembered"))
                for h in hits
            ]
            return [
                r
                for r in rows
                if (not day or r.day == day.isoformat())
                and (not kind_v or r.kind == kind_v.value)
                and (not state_v or r.state == state_v.value)
            ]
        recs = self.bank.records(user, kind=kind_v, state=state_v, day=day)
        if not include_archived:
            recs = [r for r in recs if r.state == State.ACTIVE]
        recs.sort(key=lambda r: (r.day, r.kind.value != "turn", r.position, r.id or 0), reverse=True)
        return [self._row(r, now) for r in recs]

    def days(self, token: str) -> list[str]:
        user = self.user(token)
        if not self.bank.has_user(user):
            return []
        return [d.isoformat() for d in sorted(self.bank.days(user), reverse=True) if d.year > 1970]

    def pin(self, token: str, memory: int, pinned: bool = True) -> MemoryRecord:
        user = self.user(token)
        return self.bank.pin(user, self.bank.get(user, memory_id(memory)).stored_id, pinned)

    def restore(self, token: str, memory: int) -> MemoryRecord:
        """Bring back an archived memory (as if just recalled). An active one is refused: restoring
        it again and again would raise its strength each time."""
        user = self.user(token)
        rec = self.bank.get(user, memory_id(memory))
        if rec.state != State.ARCHIVED:
            raise ValueError(f"memory #{rec.id} is not archived: only archived memories can be restored")
        return self.bank.restore(user, rec.stored_id, self.now())

    def delete_memories(self, token: str, memory_ids: list[int]) -> int:
        """Delete for good. A dialogue turn goes through the companion, so that the summaries of
        its day are written again without it."""
        user = self.user(token)
        records = [self.bank.get(user, memory_id(i)) for i in memory_ids]  # UnknownMemory unless all are hers
        for rec in records:
            if rec.kind == Kind.TURN and hasattr(self.companion, "delete_turn"):
                self.companion.delete_turn(user, rec.stored_id)
            else:
                self.bank.delete(user, [rec.stored_id])
        return len(records)

    def summaries(self, token: str, day: str | None = None) -> dict:
        """Daily events and personality of ``day`` (or the latest day), and the global ones."""
        user = self.user(token)
        grounding: dict[str, dict] = {}
        out: dict[str, Any] = {
            "day": day or "",
            "daily_events": "",
            "daily_personality": "",
            "global_events": "",
            "global_personality": "",
            "summary_days": [],
            "grounding": grounding,  # key -> {"path", "dropped"}: what the day rollover's check did
        }
        if not self.bank.has_user(user):
            return out
        summary_days = sorted(
            {r.day for k in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY) for r in self.bank.summaries(user, k)},
            reverse=True,
        )
        out["summary_days"] = [d.isoformat() for d in summary_days]
        if not day and summary_days:
            day = summary_days[0].isoformat()
        out["day"] = day or ""
        if day:
            d = date.fromisoformat(day)
            for key, kind in (("daily_events", Kind.DAILY_EVENTS), ("daily_personality", Kind.DAILY_PERSONALITY)):
                rec = self.bank.get_summary(user, kind, d)
                out[key] = rec.text if rec else ""
                grounding[key] = _grounding(rec)
        for key, kind in (("global_events", Kind.GLOBAL_EVENTS), ("global_personality", Kind.GLOBAL_PERSONALITY)):
            rec = self.bank.get_summary(user, kind)
            out[key] = rec.text if rec else ""
            grounding[key] = _grounding(rec)
        return out

    def save_summaries(self, token: str, *, day: str | None = None, **texts: str) -> list[str]:
        """Replace the given summaries (``daily_events``, ``daily_personality`` for ``day``;
        ``global_events``, ``global_personality``); blank or unchanged ones are left alone."""
        user = self.user(token)
        current = self.summaries(token, day)
        saved = []
        for key, text in texts.items():
            kind = Kind(key)
            if text is None or not text.strip() or text == current.get(key):
                continue
            if kind.is_daily and not day:
                raise ValueError("pick the day whose summary you are editing")
            self.bank.set_summary(
                user, kind, text.strip(), self.now(), day=date.fromisoformat(day) if kind.is_daily and day else None
            )
            saved.append(key)
        return saved

    def summarise_now(
        self,
        token: str,
        *,
        include_today: bool = False,
        progress: Callable[[int, int, date], None] | None = None,
    ) -> list[date]:
        """Summarise every finished day not summarised yet (today too, and again, only when
        ``include_today``: it is not over), one day at a time (``progress(done, total, day)``
        before each), then the global summaries."""
        user = self.user(token)
        today = self.now().date()
        if not self.bank.has_user(user):
            return []
        summarised = {r.day for r in self.bank.summaries(user, Kind.DAILY_EVENTS)}
        pending = sorted(d for d in self.bank.days(user) if d.year > 1970 and d < today and d not in summarised)
        if include_today:
            pending.append(today)
        done: list[date] = []
        for i, day in enumerate(pending):
            if progress is not None:
                progress(i, len(pending), day)
            done += [d for d in self.companion.consolidate(user, until=day) if d not in done]
        return done

    def memory(self, token: str, memory: Any) -> MemoryRecord:
        """One of this user's memories (UnknownMemory for anyone else's, or a bad id)."""
        return self.bank.get(self.user(token), memory_id(memory))

    def retention_curves(self, token: str, *, limit: int = 12, horizon_days: int = 14) -> dict:
        """R over time for the user's most recent memories: from each one's last recall to
        ``horizon_days`` ahead (points for a plot), with the forgetting threshold."""
        user = self.user(token)
        now = self.now()
        curves = []
        if self.bank.has_user(user):
            recs = [r for r in self.bank.records(user, state=State.ACTIVE) if not r.kind.is_global]
            recs.sort(key=lambda r: r.anchor, reverse=True)
            for rec in recs[:limit]:
                start, end = rec.anchor, now + timedelta(days=horizon_days)
                steps = 40
                times = [start + (end - start) * i / steps for i in range(steps + 1)]
                curves.append(
                    {
                        "id": rec.id,
                        "label": f"#{rec.id} {rec.kind.value} {rec.day.isoformat()}",
                        "kind": rec.kind.value,
                        "day": rec.day.isoformat(),
                        "times": times,
                        "values": [self.bank.retention(rec, t) for t in times],
                        "now": self.bank.retention(rec, now),
                    }
                )
        return {
            "now": now,
            "threshold": self.settings.forgetting_threshold,
            "curves": curves,
            "active": self.bank.count(user, state=State.ACTIVE) if self.bank.has_user(user) else 0,
            "archived": self.bank.count(user, state=State.ARCHIVED) if self.bank.has_user(user) else 0,
        }

    # -- export and deletion ------------------------------------------------------------------
    def export_data(self, token: str) -> dict:
        """Everything of this user (see ``user_export``)."""
        return user_export(self.bank, self.accounts, self.user(token), self.now())

    def export_file(self, token: str, browser: str | None = None) -> str:
        """Write this user's export (0600, in a 0700 folder of the data home) and return the
        ticket that downloads it once (``take_export``): only to the browser that asked (its
        ``browser`` cookie), while this session lasts, and at most ``export_minutes`` after; then
        the file is deleted."""
        user = self.user(token)
        data = self.export_data(token)
        self.sweep_exports()
        root = self._export_root()
        ticket = secrets.token_urlsafe(24)
        path = root / f"{ticket}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=2)
        export = _Export(user, token, browser, path, time.monotonic() + self.export_seconds)
        export.timer = threading.Timer(self.export_seconds + 1, self.sweep_exports)
        export.timer.daemon = True
        export.timer.start()
        with self._exports_lock:
            self._exports[ticket] = export
        return ticket

    def take_export(self, ticket: str, browser: str | None = None) -> tuple[str, bytes] | None:
        """(file name, content) of the export ``ticket`` names, once, to the browser that asked
        for it; None when the ticket is unknown, used, expired, its session has ended, or
        ``browser`` is not the one that asked (then the ticket stays good for its owner)."""
        with self._exports_lock:
            export = self._exports.get(ticket) if isinstance(ticket, str) else None
            if export is None or export.browser is None or browser != export.browser:
                return None
            self._exports.pop(ticket)
        try:
            if time.monotonic() > export.expires or self.accounts.user_for(export.token) != export.user:
                return None
            return f"siliconfriend-{user_key(export.user)}.json", export.path.read_bytes()
        except OSError:
            return None
        finally:
            self._drop_export(export)

    def sweep_exports(self) -> None:
        """Delete the exports that expired or whose session ended."""
        with self._exports_lock:
            stale = [
                t
                for t, e in self._exports.items()
                if time.monotonic() > e.expires or self.accounts.user_for(e.token) != e.user
            ]
            dropped = [self._exports.pop(t) for t in stale]
        for export in dropped:
            self._drop_export(export)

    @staticmethod
    def _drop_export(export: _Export) -> None:
        if export.timer is not None:
            export.timer.cancel()
        export.path.unlink(missing_ok=True)

    def _export_root(self) -> Path:
        self.export_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tighten(self.export_dir)
        return self.export_dir

    def clear_exports(self) -> None:
        """At start: exports left by a previous run (a crash) are deleted."""
        if self.export_dir.is_dir():
            for path in self.export_dir.glob("*.json"):
                path.unlink(missing_ok=True)

    def delete_account(
        self, token: str, password: str, *, extra_dirs: Sequence[Path] = (), client: str | None = None
    ) -> None:
        """The account, its sessions, every memory and file: gone. Needs the password again."""
        user = self.user(token)
        self.accounts.verify_password(user, password, client=client)
        stream = self._streams.pop(user, None)
        if stream is not None:
            stream.stop()
        with self._companion_lock:
            self._waiting = [(name, s) for name, s in self._waiting if name != user]
        forget = getattr(self._companion, "forget_user", None)
        if callable(forget):
            forget(user)
        for companion in [self._companion, *self._variants.values()]:
            rolled = getattr(companion, "_rolled", None)  # the companion's note of the last rollover
            if isinstance(rolled, dict):
                rolled.pop(user, None)
        self.bank.delete_user(user)
        name = f"siliconfriend-{user_key(user)}.json"
        with self._exports_lock:
            mine = [t for t, e in self._exports.items() if e.user == user]
            dropped = [self._exports.pop(t) for t in mine]
        for export in dropped:
            self._drop_export(export)
        for root in [self.export_dir, *extra_dirs]:  # e.g. copies an older version left
            if Path(root).is_dir():
                for copy in Path(root).rglob(name):
                    copy.unlink(missing_ok=True)
        self.accounts.delete(user)

    def remembered(self, hits: list) -> list[dict]:
        """The memories a reply used, for the "what I remembered" panel (``companion.used_entry``)."""
        return [used_entry(h) for h in hits or []]


__all__ = [
    "WebService",
    "NotLoggedIn",
    "MemoryRow",
    "BackendPool",
    "ModelUnavailable",
    "memory_id",
    "UnknownMemory",
    "user_export",
]


def _grounding(rec: MemoryRecord | None) -> dict:
    """What the day rollover's grounding check did to a summary: how it was written (``path``,
    None when written by hand or before the check) and how many sentences it left out."""
    info = rec.extra.get("grounding") if rec is not None and isinstance(rec.extra, dict) else None
    if not isinstance(info, dict):
        return {"path": None, "dropped": 0}
    return {"path": info.get("path"), "dropped": int(info.get("dropped") or 0)}
