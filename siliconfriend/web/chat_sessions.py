"""Chat sessions: each user's reply being generated, the queue of replies not finished, the
companion speaking with each user's chosen name, persona and model."""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from dataclasses import replace
from datetime import date, datetime
from typing import Any, Callable

from memory.bank import MemoryBank
from memory.message import Message as Text
from memory.records import MemoryRecord
from memory.retrieval import Hit
from memory.shown import UsedMemory

from ..backends.base import BackendError, ChatBackend
from ..core.companion import EMPTY_MESSAGE, MAX_MESSAGE_CHARS, MEMORY_CHARS, Companion, ReplyStream
from ..core.memory_view import memory_id
from .account_service import AccountService

log = logging.getLogger("siliconfriend.web")


MODEL_UNAVAILABLE = Text(
    "model.unavailable",
    en="that model is not available on this server right now; pick another one or ask the server's operator",
    zh="这个模型目前在本服务器上不可用；请换一个，或联系服务器管理员。",
)
TOO_LONG = Text(
    "chat.too_long",
    en="the message has {n} characters, more than the {limit} one message can hold: split it into parts "
    "(it is still in the box)",
    zh="这条消息有 {n} 个字符，超过了一条消息的上限 {limit}：请分成几段发送（内容还在输入框里）。",
)


class ModelUnavailable(ValueError):
    """The chosen model cannot be used now; the details are in the server's log, for its operator."""


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
                raise ModelUnavailable(MODEL_UNAVAILABLE()) from exc
            with self._lock:
                self._cache[key] = backend
                while len(self._cache) > self.keep:
                    self._cache.popitem(last=False)
        return backend


def no_other_backends(name: str, **options: Any) -> Any:
    raise BackendError(f"no backend other than the companion's own is configured here (asked for {name!r})")


def check_message(text: str | None) -> str:
    """The message to send, or ValueError saying what is wrong with it (nothing is lost)."""
    text = (text or "").strip()
    if not text:
        raise ValueError(EMPTY_MESSAGE())
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValueError(TOO_LONG(n=f"{len(text):,}", limit=f"{MAX_MESSAGE_CHARS:,}"))
    return text


class ChatSessions:
    def __init__(
        self,
        account: AccountService,
        bank: MemoryBank,
        *,
        companion: Companion | None = None,
        companion_factory: Callable[[], Companion] | None = None,
        backends: BackendPool | None = None,
    ):
        self.account = account
        self.bank = bank
        self._companion = companion
        self._companion_factory = companion_factory
        self._lock = threading.Lock()
        self.backends = backends or BackendPool(no_other_backends)
        self._streams: dict[str, ReplyStream] = {}  # user -> the reply being generated
        self._waiting: list[tuple[str, ReplyStream]] = []  # (user, stream) of each reply not finished, in order
        self._variants: OrderedDict[tuple[str, str], Companion] = OrderedDict()

    @property
    def companion(self) -> Companion:
        with self._lock:
            if self._companion is None:
                if self._companion_factory is None:
                    raise RuntimeError("no companion configured")
                self._companion = self._companion_factory()
            return self._companion

    def _backend_for(self, prefs: dict) -> ChatBackend | None:
        """None for the configured default (the companion's own), else the chosen backend."""
        if (prefs["backend"], prefs["model"]) == self.account.models.default:
            return None
        return self.backends.get(prefs["backend"], prefs["model"])

    def _companion_for(self, prefs: dict) -> Companion:
        """The companion, speaking as this user's chosen name and persona. The variant is a
        shallow copy sharing the bank, backend, consolidator and locks; only its settings differ."""
        base = self.companion
        settings = base.settings
        name, persona = prefs.get("companion_name") or "", prefs.get("persona") or ""
        if (name or settings.companion_name) == settings.companion_name and persona == settings.persona:
            return base
        key = (name or settings.companion_name, persona)
        with self._lock:
            variant = self._variants.get(key)
            if variant is None:
                variant = copy.copy(base)
                variant.settings = replace(settings, companion_name=key[0], persona=persona)
                self._variants[key] = variant
                while len(self._variants) > 64:
                    self._variants.popitem(last=False)
            self._variants.move_to_end(key)
            return variant

    def _start(self, token: str, text: str | None = None) -> ReplyStream:
        user = self.account.user(token)
        prefs = self.account.prefs(token)
        backend = self._backend_for(prefs)
        companion = self._companion_for(prefs)
        if text is None:
            stream = companion.regenerate(user, lang=prefs["lang"], backend=backend)
        else:
            stream = companion.respond(user, text, lang=prefs["lang"], backend=backend)
        self._streams[user] = stream
        with self._lock:
            self._waiting.append((user, stream))
        return stream

    def days_to_summarise(self, token: str) -> list[date]:
        """The finished days this user's next reply waits for (``Companion.days_to_summarise``)."""
        user = self.account.user(token)
        return self._companion_for(self.account.prefs(token)).days_to_summarise(user)

    def ahead(self, token: str) -> int:
        """How many replies started before this user's latest one and are not finished yet (the
        model answers one at a time)."""
        user = self.account.user(token)
        with self._lock:
            mine = [i for i, (name, _) in enumerate(self._waiting) if name == user]
            return mine[-1] if mine else 0

    check_message = staticmethod(check_message)

    def respond(self, token: str, text: str) -> ReplyStream:
        self.account.user(token)
        return self._start(token, check_message(text))

    def regenerate(self, token: str) -> ReplyStream:
        return self._start(token)

    def finished(self, token: str, stream: ReplyStream) -> None:
        """The reply ``stream`` is over (also after a logout: found by the stream itself)."""
        with self._lock:
            self._waiting = [(name, s) for name, s in self._waiting if s is not stream]
        for name, current in list(self._streams.items()):
            if current is stream:
                del self._streams[name]

    def stop(self, token: str) -> bool:
        user = self.account.user(token)
        stream = self._streams.get(user)
        if stream is None:
            return False
        stream.stop()
        return True

    def today(self, token: str) -> list[MemoryRecord]:
        return list(self.companion.today(self.account.user(token)))

    def delete_turn(self, token: str, turn_id: int) -> None:
        user = self.account.user(token)
        self.bank.get(user, memory_id(turn_id))  # UnknownMemory unless it is this user's
        self.companion.delete_turn(user, memory_id(turn_id))

    def now(self) -> datetime:
        return self.companion.clock()

    @staticmethod
    def remembered(hits: list[Hit] | None) -> list[UsedMemory]:
        """The memories a reply used, for the "what I remembered" panel."""
        return [UsedMemory.of_hit(h, MEMORY_CHARS) for h in hits or []]

    def forget(self, user: str) -> None:
        """A deleted account: its reply stops, leaves the queue, and the companion (when it was
        built) drops what it keeps about the user."""
        stream = self._streams.pop(user, None)
        if stream is not None:
            stream.stop()
        with self._lock:
            self._waiting = [(name, s) for name, s in self._waiting if name != user]
        if self._companion is not None:  # the variants share its per-user state
            self._companion.forget_user(user)
