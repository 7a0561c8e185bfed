"""What the API does, without HTTP: a key becomes its user, a chat request becomes one companion
turn, and the memory calls touch only that user's memories.

``ApiService`` shares the companion (and so the memory bank, its locks and the day rollover)
with the web app when both run in one process; ``routes.py`` only adapts it to HTTP.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Callable, Sequence

from memory.bank import USED, MemoryBank, UnknownMemory
from memory.memorybank_format import export_person
from memory.records import Kind, MemoryRecord, State
from memory.retrieval import Hit
from memory.shown import UsedMemory, shown

from ..accounts.keys import ApiKeys, KeyOwner
from ..accounts.users import Accounts
from ..backends.base import Message, Role, takes_tools
from ..config import Settings
from ..core.companion import MAX_MESSAGE_CHARS, MEMORY_CHARS, TODAY, Companion, Limits, ReplyStream
from ..core.known import known
from ..core.memory_view import memory_id as parse_memory_id
from ..core.memory_view import search as search_memories
from .frontends import Task, app_of, compacted, fold, person_words, sends_whole_chat, task_of
from .keys import KeyLimiter, LoginStyleLimiter, RateLimited
from .resent import Change, Placed, place

MODEL_ID = "siliconfriend"  # the one model /v1/models lists: the companion with its memory
MAX_PERSONA_CHARS = 4000  # a client's system prompt, used as the persona for the turn
MAX_REQUEST_CHARS = 2_000_000  # all the messages of one request together
MAX_PAGE = 200
MAX_OFFSET = 10**12  # past any user's memories, and far inside the 64-bit integers a store takes
MAX_SEARCH = 50
MAX_QUERY_CHARS = 2000
# what asks the model to go on with a reply that ends the request (a continue with prefill)
CONTINUE_NUDGE = (
    "Continue the last message from exactly where it stops. Write only what comes next, without repeating any of it."
)


class ApiError(Exception):
    """A refusal in OpenAI's shape: HTTP ``status``, error ``type`` and ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict | None = None,
    ):
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        self.headers = headers or {}
        super().__init__(message)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, type="invalid_request_error", code="invalid_api_key")


def rate_limited(exc: RateLimited) -> ApiError:
    return ApiError(
        429,
        str(exc),
        type="rate_limit_error",
        code="rate_limit_exceeded",
        headers={"Retry-After": str(int(exc.retry_after) + 1)},
    )


def not_found(memory_id: Any) -> ApiError:
    return ApiError(404, f"no memory {str(memory_id)[:40]!r} for this key's user", code="memory_not_found")


def backend_down(message: str) -> ApiError:
    return ApiError(503, message, type="server_error", code="backend_unavailable")


# -- a chat request ---------------------------------------------------------------------------------
def content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    raise bad_request("a message's content is a string or a list of content parts", "messages")


@dataclass
class ChatTurn:
    """What the companion makes of a chat request."""

    text: str  # the last user message as remembered: the person's words (and what was attached)
    history: list[tuple[str, str]]  # the client's earlier exchanges (never stored again)
    persona: str | None  # the client's system prompt, if any
    shown: str | None = None  # the last message as the model sees it, where it carries more (a file's text)
    greeted: bool = False  # the chat opens with the app's greeting (so the request shows its start)


ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def system_texts(messages: Sequence[dict]) -> list[str]:
    """The request's system (and developer) messages, whole."""
    return [content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]


def read_items(messages: Sequence[dict]) -> list[tuple[str, Any]]:
    """A request's messages as (role, content), checked (400 on a bad request). A tool's result
    and an assistant message that only calls tools are left out: they are neither the person's
    words nor a reply (a chat app that ran its tools with another model sends them back)."""
    if not messages:
        raise bad_request("messages is empty: send at least one user message", "messages")
    total = 0
    items: list[tuple[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] is not an object", "messages")
        role = m.get("role")
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role must be system, user or assistant, not {role!r}", "messages")
        content = m.get("content")
        total += len(content_text(content))
        if total > MAX_REQUEST_CHARS:
            raise bad_request(
                f"the messages are too long together (at most {MAX_REQUEST_CHARS:,} characters)", "messages"
            )
        if role in ("tool", "function"):
            continue
        if (
            role == "assistant"
            and (m.get("tool_calls") or m.get("function_call"))
            and not content_text(content).strip()
        ):
            continue
        items.append((role, content))
    if not items:
        raise bad_request("messages holds only tool calls and their results: send the person's message", "messages")
    return items


def read_messages(messages: Sequence[dict]) -> ChatTurn:
    """The turn, the history and the persona of a request's messages (400 on a bad request). A
    person's messages are read without the front end's markup (``frontends.person_words``)."""
    items = read_items(messages)
    # instructions after the person's message (SillyTavern's post-history instructions) join the
    # client's system prompt; the turn is the message before them
    after = len(items)
    while after > 1 and items[after - 1][0] in ("system", "developer"):
        after -= 1
    trailing = [content_text(c).strip() for _, c in items[after:]]
    items = items[:after]
    role, content = items[-1]
    if role != "user":
        raise bad_request("the last message must be the user's (it is the turn the companion answers)", "messages")
    said = person_words(content)
    text = said.stored
    if not text:
        raise bad_request("the last user message is empty: type something to say", "messages")
    if len(text) > MAX_MESSAGE_CHARS:
        raise bad_request(f"a message can have at most {MAX_MESSAGE_CHARS:,} characters", "messages")
    system = "\n".join(
        [t for r, c in items[:-1] if r in ("system", "developer") and (t := content_text(c).strip())]
        + [t for t in trailing if t]
    )
    history: list[tuple[str, str]] = []
    pending: list[str] = []
    spoken = [r for r, _ in items if r in ("user", "assistant")]
    greeted = bool(spoken) and spoken[0] == "assistant"
    for r, c in items[:-1]:
        if r == "user":
            t = person_words(c).stored[:MAX_MESSAGE_CHARS]
            if t:
                pending.append(t)
        elif r == "assistant" and pending:  # (a greeting before the user's first words is left out)
            history.append(("\n".join(pending), content_text(c).strip()[:MAX_MESSAGE_CHARS]))
            pending = []
    shown = said.shown if said.shown != said.text else None
    if pending:  # the user spoke twice in a row: one turn of the conversation
        text = "\n".join([*pending, text])[-MAX_MESSAGE_CHARS:]
        shown = "\n".join([*pending, shown]) if shown else None
    return ChatTurn(
        text, history, system[:MAX_PERSONA_CHARS] or None, shown[:MAX_MESSAGE_CHARS] if shown else None, greeted
    )


@dataclass(frozen=True)
class Switches:
    """What a client says of its request itself (``X-SiliconFriend-Task`` / ``-Memory`` headers, or
    the body's ``siliconfriend`` object): ``task`` names a front-end task (answered, never
    remembered); ``memory`` "off" answers as the companion but writes and reinforces nothing,
    "on" makes the request a turn of the person's even where it looks like a task."""

    task: str | None = None
    memory: str | None = None
    chat: str | None = None  # the client's id of the chat (``resent.py``)
    app: str = ""  # the chat app the request comes from, where it says (``frontends.app_of``)
    whole: bool = False  # the app sends its chat whole with every request (``sends_whole_chat``)

    @classmethod
    def of(cls, headers: dict[str, str], body: Any, fields: dict[str, Any] | None = None) -> "Switches":
        """``headers`` in lower case, ``body`` the request's ``siliconfriend`` object, ``fields``
        its other fields (``tools``...)."""
        app = app_of(headers, fields or {})
        body = body if isinstance(body, dict) else {}
        task = headers.get("x-siliconfriend-task") or body.get("task")
        memory = headers.get("x-siliconfriend-memory") or body.get("memory")
        chat = headers.get("x-siliconfriend-chat") or headers.get("x-openwebui-chat-id") or body.get("chat")
        if chat is not None and (not isinstance(chat, str) or not 0 < len(chat.strip()) <= 200):
            raise bad_request("the chat id is a string of 1 to 200 characters", "siliconfriend.chat")
        if task is not None and (not isinstance(task, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", task.strip())):
            raise bad_request("the task is a short name such as title, tags or queries", "siliconfriend.task")
        if memory is not None and (not isinstance(memory, str) or memory.strip().lower() not in ("on", "off")):
            raise bad_request('memory is "on" or "off"', "siliconfriend.memory")
        return cls(
            task.strip().lower() if task else None,
            memory.strip().lower() if memory else None,
            chat.strip() if chat else None,
            app,
            sends_whole_chat(headers, fields or {}),
        )


@dataclass
class Completion:
    """A running or finished chat completion."""

    id: str
    created: int
    model: str
    stream: ReplyStream
    first: str | None = None  # the first chunk, taken before the answer starts
    remembered: list[UsedMemory] = field(default_factory=list)  # "what I remembered"
    task: Task | None = None  # a front end's task: answered, never remembered
    placed: Placed = field(default_factory=Placed)  # the turn it regenerates or edits, if any


# -- the service --------------------------------------------------------------------------------------
class ApiService:
    def __init__(
        self,
        settings: Settings,
        accounts: Accounts,
        bank: MemoryBank,
        *,
        companion: Callable[[], Companion],
        keys: ApiKeys | None = None,
        limiter: KeyLimiter | None = None,
        clock: Callable[[], datetime] | None = None,
    ):
        self.settings = settings
        self.accounts = accounts
        self.bank = bank
        self._companion = companion  # a function: the web app builds its companion on the first chat
        self.keys = keys or ApiKeys(accounts)
        self.limiter = limiter or LoginStyleLimiter(accounts, requests_per_minute=settings.api_requests_per_minute)
        self._clock = clock
        # the replies being streamed, per user: a message that repeats one of them is not a turn
        self._live: dict[str, list[ReplyStream]] = {}
        self._live_lock = threading.Lock()

    @property
    def companion(self) -> Companion:
        return self._companion()

    def now(self) -> datetime:
        return self._clock() if self._clock is not None else self.companion.clock()

    # -- keys ---------------------------------------------------------------------------------
    def authenticate(self, authorization: str | None, client: str | None) -> KeyOwner:
        """The owner of the request's key (``Authorization: Bearer sf-...``), or an ApiError:
        401 for a missing, unknown or revoked key, 429 while rate-limited.

        A valid key is never refused because of other keys' failures: it is looked up first (a
        256-bit key cannot be guessed, so looking it up gives a guesser nothing), and only a wrong
        one counts against its client and, past the client's limit, gets 429 instead of 401. One
        stale key left in one app thus never locks out the other apps behind the same address."""
        scheme, _, key = (authorization or "").strip().partition(" ")
        owner = self.keys.owner(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
        if owner is None:
            try:
                self.limiter.check_client(client)
            except RateLimited as exc:
                raise rate_limited(exc) from None
        if scheme.lower() != "bearer" or not key.strip():
            raise unauthorized(
                "no API key: send `Authorization: Bearer sf-...` (make a key on the account page "
                "or with `siliconfriend keys create --user NAME`)"
            )
        if owner is None:
            self.limiter.failed(client)
            raise unauthorized("this API key is unknown or was revoked: make a new one on the account page")
        try:
            self.limiter.allow_request(owner.key_id)
        except RateLimited as exc:
            raise rate_limited(exc) from None
        return owner

    # -- chat ---------------------------------------------------------------------------------
    def models(self) -> list[dict]:
        return [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "siliconfriend"}]

    def start_chat(
        self,
        user: str,
        messages: Sequence[dict],
        *,
        model: str | None = None,
        switches: Switches = Switches(),
        limits: Limits | None = None,
    ) -> Completion:
        """Begin a turn and run it up to its first chunk (so that a dead backend is a 503 before
        any reply has been sent). The caller iterates ``completion.stream`` for the rest.

        A front end's task (``frontends.task_of``, the client's own switch, a continue of the
        chat's last reply, or a message that repeats the companion's words) is answered by the
        model as it is sent, and remembers nothing. Otherwise the request's history is followed
        first (``resent.place``: what the person edited, swiped or deleted in their chat), then
        its message is the turn. ``limits``: the client's settings for the reply."""
        task = self.task_of(messages, switches)
        if task is not None:
            return self._task(user, messages, task, model, limits)
        turn = read_messages(messages)
        prefs = self.accounts.prefs(user)
        persona = turn.persona if turn.persona is not None else (prefs.get("persona") or None)
        lang = prefs.get("lang") if prefs.get("lang") in ("en", "zh") else None
        store = switches.memory != "off"
        tail = self._tool_tail(messages) if limits is not None and limits.tools and self.passes_tools else []
        placed = Placed()
        if store:  # a regenerate, an edit, and what the history changed (resent.py)
            placed = place(
                self.bank,
                user,
                turn.text,
                turn.history,
                self.now().date(),
                chat=switches.chat,
                whole=turn.greeted or (switches.whole and not compacted(system_texts(messages))),
                streaming=self._streaming(user),
            )
            if placed.echo:  # the companion's own words sent back (an app's classifier): not a turn
                return self._task(user, messages, Task("", "echo"), model, limits)
            self._follow(user, placed.changes)
        stream = self.companion.respond(
            user,
            turn.text,
            lang=lang,
            history=turn.history,
            persona=persona,
            shown=turn.shown,
            store=store,
            extra=placed.extra,
            replaces=placed.replaces,
            supersedes=placed.supersedes,
            limits=limits,
            tail=tail,
        )
        completion = self._begin(stream, model, None)
        completion.placed = placed
        with self._live_lock:
            live = self._live.setdefault(user, [])
            live[:] = [s for s in live if s.result is None] + [stream]
        return completion

    @property
    def passes_tools(self) -> bool:
        """Whether the backend is given a client's tools (an OpenAI-compatible server that takes
        them); otherwise the companion answers in text."""
        backend = self.companion.backend
        return takes_tools(backend) and not getattr(backend, "refuses_tools", False)

    @staticmethod
    def _tool_tail(messages: Sequence[dict]) -> list[Message]:
        """This turn's tool round trips: after the person's last message, the model's calls of the
        client's tools and the results the client sends back, as they came."""
        last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
        tail: list[Message] = []
        for m in messages[last + 1 :]:
            text = content_text(m.get("content"))[:MAX_MESSAGE_CHARS]
            if m.get("role") == "assistant" and m.get("tool_calls"):
                tail.append(Message("assistant", text, tool={"tool_calls": m["tool_calls"]}))
            elif m.get("role") == "tool":
                tail.append(Message("tool", text, tool={"tool_call_id": m.get("tool_call_id")}))
        return tail

    def _streaming(self, user: str) -> list[str]:
        """The replies being written for ``user`` in this process now (not stored yet)."""
        with self._live_lock:
            return ["".join(s.parts) for s in self._live.get(user, []) if s.result is None]

    def _follow(self, user: str, changes: Sequence[Change]) -> None:
        """What the client's history changed in its chat's stored turns, done before the reply
        (so that its prompt already remembers the chat as the person now has it)."""
        for change in changes:
            if change.kind == "reply":
                self.companion.replace_reply(user, change.turn, change.reply)
            elif change.kind == "edited":
                self.companion.restate(user, change.turn, change.query, change.reply, extra=change.extra)
            else:
                self.companion.take_back(user, change.turn, change.kind)

    def _task(
        self, user: str, messages: Sequence[dict], task: Task, model: str | None, limits: Limits | None
    ) -> Completion:
        """A request that is not the person talking, answered by the model as it is sent."""
        items = read_items(messages)
        roles: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
        sent = [Message(roles[r], content_text(c)) for r, c in items if r in roles]
        if not any(m.content.strip() for m in sent):
            raise bad_request("the messages are empty: there is nothing to answer", "messages")
        if task.name == "continue" and sent[-1].role == "assistant":
            sent.append(Message("system", CONTINUE_NUDGE))
        persona = None
        if task.persona:  # the companion speaks: the account's persona, else the configured one
            name = self.settings.companion_name
            persona = self.accounts.prefs(user).get("persona") or self.settings.persona or f"You are {name}."
        stream = self.companion.answer_as_sent(sent, persona=persona, limits=limits)
        return self._begin(stream, model, task)

    @staticmethod
    def task_of(messages: Sequence[dict], switches: Switches) -> Task | None:
        if switches.task and switches.task not in ("chat", "none"):
            return Task("", switches.task)
        if switches.memory == "on" or switches.task in ("chat", "none"):
            return None
        items = read_items(messages)
        if items[-1][0] == "assistant":
            # the chat's last reply, sent to be continued (SillyTavern's Continue with prefill):
            # the continuation is the app's to add to that reply; the next request shows it
            return Task("", "continue")
        if switches.app == "SillyTavern" and not any(r == "assistant" for r, _ in items):
            # a chat's request always has its "[Start a new Chat]" marker (new_chat_prompt) before
            # the chat; a /genraw, a Quick Reply's or an extension's raw prompt has neither that
            # nor the character's greeting
            if not any(r == "system" and fold(content_text(c)).startswith("[start a new") for r, c in items):
                return Task("SillyTavern", "raw")
        return task_of([(r, content_text(c)) for r, c in items])

    def _begin(self, stream: ReplyStream, model: str | None, task: Task | None) -> Completion:
        completion = Completion(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model or MODEL_ID, stream, task=task)
        chunks = iter(stream)
        try:
            completion.first = next(chunks)
        except StopIteration:
            result = stream.result
            if result is not None and result.error:
                raise backend_down(result.error) from None
        completion.remembered = [UsedMemory.of_hit(h, MEMORY_CHARS) for h in stream.used]
        return completion

    def finish(self, completion: Completion) -> dict:
        """The rest of a turn, without streaming: the OpenAI ``chat.completion`` object."""
        for _ in completion.stream:
            pass
        result = completion.stream.result
        if result is None or result.error:
            raise backend_down(result.error if result is not None and result.error else "the reply did not finish")
        return self.completion_body(completion, result.reply)

    def completion_body(self, completion: Completion, reply: str) -> dict:
        result = completion.stream.result
        calls = result.tool_calls if result is not None else []
        message: dict[str, Any] = {"role": "assistant", "content": reply or (None if calls else reply)}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": completion.id,
            "object": "chat.completion",
            "created": completion.created,
            "model": completion.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": self.usage(completion, reply),
            "siliconfriend": self.extension(completion),
        }

    def usage(self, completion: Completion, reply: str) -> dict:
        count = self.companion.backend.count_tokens
        prompt = sum(count(m.content) for m in completion.stream.messages)
        done = count(reply) if reply else 0
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    def extension(self, completion: Completion) -> dict:
        """What the companion did besides answering: the memories it used ("what I remembered"),
        the stored turn, and what a day rollover before this turn summarised."""
        result = completion.stream.result
        report = completion.stream.consolidation
        stored = result is not None and result.turn is not None
        return {
            "memories": [m.as_json() for m in completion.remembered],
            # names of the reply in neither the memories, the prompt nor the talk: not from memory
            "not_from_memory": list(result.not_from_memory) if result is not None else [],
            "task": completion.task.name if completion.task is not None else None,
            "turn_id": result.turn.id if result is not None and result.turn is not None else None,
            # a regenerate replaced this turn's reply; an edit superseded that turn
            "regenerated": stored and completion.placed.replaces is not None,
            "supersedes": completion.placed.supersedes.id if stored and completion.placed.supersedes else None,
            "day_rollover": None
            if report is None
            else {
                "summarised": [d.isoformat() for d in report.summarised],
                "archived": report.archived,
                "failed": {d.isoformat(): why for d, why in report.failed.items()},
                "left_out": report.dropped,  # unsupported sentences the grounding check left out
            },
        }

    # -- memories -----------------------------------------------------------------------------
    def memory_json(self, rec: MemoryRecord, now: datetime, hit: Hit | None = None) -> dict:
        return shown(rec, self.bank.policy_for(rec.user), now, hit=hit).as_json()

    def _get(self, user: str, memory_id: Any) -> MemoryRecord:
        try:
            mid = parse_memory_id(memory_id)
            if not self.bank.has_user(user):
                raise not_found(memory_id)
            return self.bank.get(user, mid)
        except UnknownMemory:
            raise not_found(memory_id) from None

    def list_memories(
        self,
        user: str,
        *,
        kind: str | None = None,
        state: str | None = None,
        day: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> dict:
        """One page of the user's memories, newest day first."""
        if not 1 <= limit <= MAX_PAGE:
            raise bad_request(f"limit is 1 to {MAX_PAGE}", "limit")
        if not 0 <= offset <= MAX_OFFSET:
            raise bad_request(f"offset is 0 to {MAX_OFFSET:,}", "offset")
        try:
            kind_v = Kind(kind) if kind else None
        except ValueError:
            raise bad_request(f"kind is one of {', '.join(k.value for k in Kind)}", "kind") from None
        try:
            state_v = State(state) if state else None
        except ValueError:
            raise bad_request(f"state is one of {', '.join(s.value for s in State)}", "state") from None
        try:
            day_v = date.fromisoformat(day) if day else None
        except ValueError:
            raise bad_request("day is a date like 2024-05-01", "day") from None
        now = self.now()
        page: list[MemoryRecord] = []
        total = 0
        if self.bank.has_user(user):  # the page is read in SQL: a 100k-memory user costs one page
            filters = {"kind": kind_v, "state": state_v}
            page = self.bank.records(user, **filters, day=day_v, limit=limit, offset=offset, newest_first=True)
            total = (
                self.bank.count(user, **filters)
                if day_v is None
                else len(self.bank.records(user, **filters, day=day_v))
            )
        more = offset + limit < total
        return {
            "object": "list",
            "data": [self.memory_json(r, now) for r in page],
            "total": total,
            "limit": limit,
            "offset": offset,
            "has_more": more,
            "next_offset": offset + limit if more else None,
        }

    def known(self, user: str, *, lang: str = "en") -> dict:
        """What I know about you: the profile and the facts the user stated, each with its turn."""
        if lang not in ("en", "zh"):
            raise bad_request("lang is en or zh", "lang")
        return known(self.bank, user).as_json(lang)

    def search(self, user: str, query: str, *, limit: int = 10, include_archived: bool = False) -> dict:
        query = (query or "").strip()
        if not query:
            raise bad_request("q is empty: say what to search for", "q")
        if len(query) > MAX_QUERY_CHARS:
            raise bad_request(f"q can have at most {MAX_QUERY_CHARS} characters", "q")
        if not 1 <= limit <= MAX_SEARCH:
            raise bad_request(f"limit is 1 to {MAX_SEARCH}", "limit")
        if not self.bank.has_user(user):
            return {"object": "list", "data": [], "query": query}
        now = self.now()
        # the memory page's search and cut-off: only real matches, an empty list for none
        hits = search_memories(self.bank, user, query, now, limit=limit, include_archived=include_archived)
        return {"object": "list", "query": query, "data": [self.memory_json(h.record, now, h) for h in hits]}

    def get(self, user: str, memory_id: Any) -> dict:
        return self.memory_json(self._get(user, memory_id), self.now())

    def turn(self, user: str, turn_id: Any) -> dict:
        """One stored turn of the user's with what its reply remembered (the memories in its
        prompt, kept with the turn): "what I remembered" for a person whose app dropped the
        extension field. Another user's turn, or a memory that is not a turn, is "no such turn"."""
        try:
            rec = self._get(user, turn_id)
        except ApiError:
            rec = None
        if rec is None or rec.kind != Kind.TURN:
            raise ApiError(404, f"no turn {str(turn_id)[:40]!r} for this key's user", code="turn_not_found")
        extra = dict(rec.extra)
        out = self.memory_json(rec, self.now())
        out["object"] = "turn"
        used, today = extra.pop(USED, None), extra.pop(TODAY, None)
        # None for a turn stored before they were kept
        out["remembered"] = None if used is None else [m.as_json() for m in UsedMemory.all_of(used)]
        out["today_in_prompt"] = [m.as_json() for m in UsedMemory.all_of(today)]
        out["extra"] = extra
        return out

    def pin(self, user: str, memory_id: Any, pinned: bool) -> dict:
        rec = self._get(user, memory_id)
        return self.memory_json(self.bank.pin(user, rec.stored_id, pinned), self.now())

    def archive(self, user: str, memory_id: Any) -> dict:
        rec = self._get(user, memory_id)
        if rec.kind.is_global:
            raise bad_request("the global summary and profile are never archived; edit them on the memory page")
        return self.memory_json(self.bank.archive(user, rec.stored_id), self.now())

    def restore(self, user: str, memory_id: Any) -> dict:
        rec = self._get(user, memory_id)
        if rec.state != State.ARCHIVED:
            raise ApiError(409, f"memory {rec.id} is not archived: there is nothing to restore", code="not_archived")
        return self.memory_json(self.bank.restore(user, rec.stored_id, self.now()), self.now())

    def delete(self, user: str, memory_id: Any) -> dict:
        """Delete for good, with what was written from it (``Companion.forget``)."""
        rec = self._get(user, memory_id)
        self.companion.forget(user, [rec.stored_id])  # with every copy of its words
        return {"id": rec.id, "object": "memory", "deleted": True}

    def export(self, user: str) -> dict:
        return export_person(self.bank, user, self.now(), self.accounts.prefs(user))


__all__ = ["ApiService", "ApiError", "Completion", "ChatTurn", "Switches", "read_messages", "MODEL_ID"]
