"""The companion: one chat turn, top to bottom.

``respond`` reads the clock, rolls finished days over (daily and global summaries, forgetting),
retrieves the memories closest to the message, fits the meta-prompt (persona, global summary and
personality, memories with their dates, today's conversation) into the model's context, streams
the reply, and when the reply is complete stores the turn and reinforces the memories that were in
the prompt. An LLM failure stores nothing and says what went wrong in ``result.error``.
"""

from __future__ import annotations

import logging
import secrets
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any, Callable, Iterator, Sequence

from memory.activation import confirmed_by, confirms, reply_uses, words
from memory.bank import TODAY, USED, MemoryBank, UnknownMemory, user_key
from memory.message import Message as Text
from memory.records import Kind, MemoryRecord, State
from memory.retrieval import Hit, TalkLine
from memory.shown import NOT_FROM_MEMORY, UsedMemory
from memory.stores.base import StoreUnavailable
from memory.tiers import CORE_CUE, WHY_CONFIRMED, WHY_PINNED, Line, allot, parse_shares, whole_sentences

from ..backends.base import BackendError, ChatBackend, Message, Sampling, ToolCalls, takes_sampling, takes_tools
from ..config import Settings
from . import bring_up
from .consolidate import SUMMARY_TOKENS, ConsolidationReport, Consolidator
from .grounding import GroundingChecker
from .prompting import PromptSet, fit_chat, load_prompts, truncate_tokens

log = logging.getLogger("siliconfriend.core.companion")

# what a turn says to the person (``Text``: its id, English and Chinese; the page shows it in its language)
EMPTY_MESSAGE = Text("chat.empty", en="the message is empty: type something to say", zh="消息是空的：请先输入内容。")
NOTHING_TO_REGENERATE = Text(
    "chat.nothing_to_regenerate", en="there is no reply to regenerate today", zh="今天还没有可以重新生成的回复。"
)
REPLY_FAILED = Text(
    "reply.failed",
    en="No reply: {why}. Your message was not lost; send it again to retry.",
    zh="没有回复（{why}）。你的消息没有丢失，再发一次即可重试。",
)
REPLY_EMPTY = Text(
    "reply.empty",
    en="No reply: the model returned nothing. Your message was not lost; send it again to retry.",
    zh="没有回复：模型什么也没有返回。你的消息没有丢失，再发一次即可重试。",
)
TASK_FAILED = Text("task.failed", en="No reply: {why}.", zh="没有回复（{why}）。")
TASK_EMPTY = Text("task.empty", en="No reply: the model returned nothing.", zh="没有回复：模型什么也没有返回。")
NOT_SAVED = Text(
    "reply.not_saved",
    en="Your message and this reply could not be saved: {why}",
    zh="你的消息和这条回复没能保存：{why}",
)
REGENERATED_EMPTY = Text(
    "reply.regenerated_empty",
    en="The new reply was empty: the previous reply was kept.",
    zh="新的回复是空的：保留了之前的回复。",
)
REGENERATED_GONE = Text(
    "reply.regenerated_gone",
    en="That message was deleted in the meantime: the new reply was not stored.",
    zh="那条消息在此期间被删除了：新的回复没有保存。",
)
NOT_A_TURN = Text(
    "memory.not_a_turn", en="memory {id} is a {kind}, not a dialogue turn", zh="记忆 {id} 是 {kind}，不是一轮对话"
)
MAX_MESSAGE_CHARS = 20_000  # the longest message a person may send (the web app and the API refuse more)
QUERY_CHARS = 2000  # what of a (very long) message is used as the retrieval query
MEMORY_CHARS = 400  # a remembered message or reply is cut to this many characters in the prompt
# today's conversation in the prompt: each earlier message (and reply) of the day is cut to this
# many characters, and the day's turns fill at most HISTORY_TOKENS (see ``day_window``); so one
# long message does not ride along in every later prompt of the day
HISTORY_CHARS = 1000
HISTORY_TOKENS = 1200
HISTORY_TURNS = 20  # ... and at most this many turns (the default of ``Companion(history_turns)``)
# the conversation retrieval takes as its second cue: today's latest exchanges (an older one
# weighs little: see RetrievalConfig.talk_decay); in the API a line the store does not have is
# embedded, so this also bounds what a long foreign history costs
TALK_TURNS = 6
# with retrieval-induced forgetting on, the memories the cue calls up past the prompt's that count
# as its competitors
COMPETITORS = 5


def cue_text(text: str) -> str:
    """What of a (very long) message or line of the talk retrieval embeds as a cue: all of it up
    to QUERY_CHARS, else its start and its end."""
    if len(text) <= QUERY_CHARS:
        return text
    return f"{text[: QUERY_CHARS // 2]}\n{text[-QUERY_CHARS // 2 :]}"


def prompt_candidates(
    bank: MemoryBank, user: str, text: str, now: datetime, *, exclude: set, talk: Sequence[TalkLine]
) -> list[Hit]:
    """What a turn's message (``cue_text``) and talk call up for its prompt, none of ``exclude``
    (today's turns already in it): ``retrieval_k`` hits and, with the user's retrieval-induced
    forgetting on, COMPETITORS more past them."""
    k = bank.retrieval_config.k
    rivals = COMPETITORS if getattr(bank.policy_for(user), "competitor_loss", 0.0) > 0 else 0
    found = bank.retrieve(user, cue_text(text), now, k=k + rivals + len(exclude), talk=talk)
    return [h for h in found if h.record.id not in exclude]


def competitors_of(found: Sequence[Hit], placed: set) -> dict[int, float]:
    """The memories the cue called up (``found``) that the prompt did not take (ids not in
    ``placed``), each with how close it came to the best (0..1): a recall's competitors."""
    best = max((h.score for h in found), default=0.0)
    return {h.record.stored_id: h.score / best for h in found if h.record.id not in placed and best > 0 and h.score > 0}


def day_window(costs: Sequence[int], *, turns: int, tokens: int) -> int:
    """The first of today's turns the prompt shows (an index into ``costs``, each turn's tokens,
    oldest first), so that the prompt holds at most ``turns`` turns and ``tokens`` tokens of them.

    The window does not slide one turn at a time: when a new turn makes it too long, the oldest
    turns leave until a third of the room is free, and then it stays where it is for the next
    turns. So each turn's prompt starts with the previous one's (the backend reuses that work)
    except at those steps. The start is worked out from the day's turns alone, the same at
    every turn; the newest turn is always shown."""
    start, used = 0, 0
    for i, cost in enumerate(costs):
        used += cost
        if i + 1 - start > turns or used > tokens:
            while start < i and (i + 1 - start > turns * 2 // 3 or used > tokens * 2 // 3):
                used -= costs[start]
                start += 1
    return start


def _clip(text: str, n: int, marker: str) -> str:
    return text if len(text) <= n else f"{text[:n].rstrip()} {marker}"


def _fit_as_sent(messages: list[Message], budget: int, count: Callable[[str], int]) -> list[Message]:
    """A chat app's task prompt within the model's context: the oldest messages after the first
    system one go first, then the middle of what is left is cut (the app's instructions are at
    its start and end)."""
    cost = [count(m.content) + 4 for m in messages]
    head = 1 if messages and messages[0].role == "system" and len(messages) > 1 else 0
    while sum(cost) > budget and len(messages) > head + 1:
        del messages[head], cost[head]
    if sum(cost) > budget and messages:
        keep = max(1, budget - sum(cost[:-1]) - 4)
        last = messages[-1]
        messages[-1] = Message(last.role, truncate_tokens(last.content, keep, count, marker="…", middle=True))
    return messages


@dataclass
class TurnResult:
    reply: str  # the whole reply (what was generated before a failure, if one happened)
    used: list[Hit]  # the memories put into the prompt (reinforced when the turn was stored)
    turn: MemoryRecord | None  # the stored turn (None if nothing was stored)
    messages: list[Message]  # the exact prompt sent
    error: str | None = None  # a user-readable message when the LLM failed; nothing was stored
    text: str = ""  # the user's message, kept so that it can be sent again
    stopped: bool = False  # the reply was stopped early (what came so far is the reply)
    today: list[MemoryRecord] = field(default_factory=list)  # today's turns that were in the prompt
    # names (people, pets, places) and numbers of the reply found nowhere in its prompt
    not_from_memory: list[str] = field(default_factory=list)
    # the model's calls of the client's tools: the turn is not over (nothing is stored); the
    # client runs them and sends their results, and the final reply is the turn
    tool_calls: list[dict] = field(default_factory=list)


class ReplyStream:
    """Iterate to get the reply's text chunks; afterwards ``result`` is the TurnResult.
    ``messages``, ``used`` and ``today`` are set as soon as the prompt is built; ``consolidation`` tells
    what a day rollover before this turn did (None if none ran)."""

    def __init__(self, run: Callable[["ReplyStream"], Iterator[str]]):
        self.result: TurnResult | None = None
        self.messages: list[Message] = []
        self.used: list[Hit] = []
        self.today: list[MemoryRecord] = []  # today's turns in the prompt
        self.consolidation: ConsolidationReport | None = None
        self.parts: list[str] = []  # the reply so far, as it streams
        self.tool_calls: list[dict] = []  # the model's calls of the client's tools, once it made them
        self._stop = threading.Event()
        self._chunks = run(self)

    def __iter__(self) -> Iterator[str]:
        return self._chunks

    def stop(self) -> None:
        """Stop generating: what was generated so far is kept as the reply and stored."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def collect(self) -> TurnResult:
        """Run the turn to its end (without streaming) and return its result."""
        for _ in self._chunks:
            pass
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class Limits:
    """A client's settings for one reply (an API request's ``max_tokens``, ``temperature``,
    ``top_p``, ``stop``, penalties): ``max_tokens`` caps the reply below the server's own limit;
    ``stop`` ends it before the first of those strings (with any backend); ``sampling`` goes to a
    backend that takes it (``takes_sampling``), which applies what it has."""

    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    sampling: Sampling | None = None
    # the client's tools, for a backend that calls them (``takes_tools``); others answer in text
    tools: tuple[dict, ...] = ()
    tool_choice: Any = None


def until_stop(chunks: Iterator[str], stop: Sequence[str]) -> Iterator[str]:
    """``chunks`` up to the first of the ``stop`` strings (which is left out), however the text is
    cut into chunks: what could be the start of one is held back until the next chunk says. The
    backend's stream is closed at the stop (a local model stops generating there)."""
    stop = [s for s in stop if s]
    hold = max(len(s) for s in stop) - 1
    pending = ""
    try:
        for chunk in chunks:
            if not isinstance(chunk, str):  # the model's tool calls: not text to cut
                yield chunk
                continue
            pending += chunk
            found = [i for i in (pending.find(s) for s in stop) if i >= 0]
            if found:
                if min(found):
                    yield pending[: min(found)]
                return
            if len(pending) > hold:
                cut = len(pending) - hold
                yield pending[:cut]
                pending = pending[cut:]
        if pending:
            yield pending
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


@dataclass
class _Turn:
    user: str
    text: str
    now: datetime
    lang: str
    backend: ChatBackend
    replace: MemoryRecord | None = None  # regenerate: the turn whose reply is replaced
    store: bool = True
    history: list[MemoryRecord] = field(default_factory=list)
    given_history: list[tuple[str, str]] | None = None  # the client's own earlier exchanges (API)
    persona: str | None = None  # replaces the settings' persona for this turn
    shown: str | None = None  # the message as the model sees it, when more than the words stored
    extra: dict = field(default_factory=dict)  # kept with the stored turn
    supersedes: MemoryRecord | None = None  # an edit: this turn leaves active memory once the new one is stored
    limits: "Limits | None" = None  # the client's generation settings for this reply
    # the memories the cue called up that did not reach the prompt, with how close each came
    # (retrieval-induced forgetting: they lose strength when the turn's recall is done)
    competitors: dict[int, float] = field(default_factory=dict)
    # after the message: the model's calls of the client's tools and their results, this turn's
    tail: list[Message] = field(default_factory=list)


ROLLOVER_MARK = "rollover_mark"  # changed whenever a summarised day becomes pending again


class Companion:
    def __init__(
        self,
        bank: MemoryBank,
        backend: ChatBackend,
        *,
        settings: Settings,
        clock: Callable[[], datetime] = datetime.now,
        consolidator: Consolidator | None = None,
        summary_tokens: int | None = None,
        prompt_budget: int | None = None,
        history_turns: int = HISTORY_TURNS,
    ):
        self.bank = bank
        self.backend = backend
        self.settings = settings
        self.clock = clock
        self.max_new_tokens = settings.max_new_tokens
        self.prompt_budget = prompt_budget
        self.history_turns = history_turns
        self.tier_shares = parse_shares(settings.memory_tier_shares)
        self.memory_tokens = settings.memory_tokens
        self.consolidator = consolidator or Consolidator(
            bank,
            backend,
            companion_name=settings.companion_name,
            summary_tokens=summary_tokens or min(settings.max_new_tokens, SUMMARY_TOKENS),
            prompt_budget=prompt_budget,
        )
        self._names_check = GroundingChecker(None, bank.tokenizer)  # names only: no embedding in a turn
        self._guard = threading.Lock()
        self._store_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._rollover_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        # user -> (the day a complete rollover was last checked, the store's rollover mark then):
        # the mark changes when any process invalidates a summarised day, so that this note
        # never hides a day another worker made pending again
        self._rolled: dict[str, tuple[date, str | None]] = {}
        # the backends that were told whose conversation a prompt was (``keeps_prefix``), so that
        # a deletion drops every prompt kept of the user, whichever model the person chose; weak,
        # so that a model let go of (the web's pool of models) is not kept alive for this
        self._prefix_keepers: list[weakref.ref] = []

    # -- the turn -----------------------------------------------------------------------------
    def respond(
        self,
        user: str,
        text: str,
        *,
        lang: str | None = None,
        backend: ChatBackend | None = None,
        store: bool = True,
        history: Sequence[tuple[str, str]] | None = None,
        persona: str | None = None,
        shown: str | None = None,
        extra: dict | None = None,
        replaces: MemoryRecord | None = None,
        supersedes: MemoryRecord | None = None,
        limits: Limits | None = None,
        tail: Sequence[Message] = (),
    ) -> ReplyStream:
        """Answer ``text``. Nothing happens until the stream is iterated. ``store=False`` answers
        without writing the turn or reinforcing (probing questions). ``history``: the earlier
        exchanges (user's words, reply) as a client keeps them (a chat app resending its chat),
        used as the conversation so far instead of today's stored turns, and never stored again;
        ``persona`` replaces the configured persona for this turn. ``shown``: the message as the
        model sees it where it carries more than the person's words (the file contents a chat app
        attached), never stored; ``extra`` is kept with the stored turn.
        ``replaces``: a regenerate of that stored turn (its reply is replaced, as ``regenerate``
        does); ``supersedes``: an edit of that turn's message (it leaves active memory, with the
        reason "edited", once this turn is stored). ``limits``: the client's settings for this
        reply (``Limits``); ``tail``: this turn's tool round trips so far (the model's calls of the
        client's tools and their results, after the message), for a backend that takes tools.
        A reply that calls tools stores nothing: the turn is the message and its final reply."""
        user_key(user)  # a bad user name is a ValueError now, not halfway through
        if not isinstance(text, str) or not text.strip():
            raise ValueError(EMPTY_MESSAGE())
        turn = _Turn(
            user,
            text.strip(),
            self.clock(),
            self._lang(lang),
            backend or self.backend,
            replace=replaces,
            store=store,
            given_history=None if history is None else [(str(q), str(a)) for q, a in history],
            persona=persona,
            shown=shown.strip() if shown and shown.strip() else None,
            extra=dict(extra or {}),
            supersedes=supersedes,
            limits=limits,
            tail=list(tail),
        )
        return ReplyStream(lambda stream: self._run(stream, turn))

    def answer_as_sent(
        self,
        messages: Sequence[Message],
        *,
        persona: str | None = None,
        backend: ChatBackend | None = None,
        limits: Limits | None = None,
    ) -> ReplyStream:
        """A chat app's own task (a title, search queries, an impersonation): its messages go to the
        model as they are sent; nothing is retrieved, stored or reinforced, and no day rolls over.
        ``persona``: opens the prompt (a reply that speaks as the companion); ``limits``: the
        client's settings for the reply."""
        backend = backend or self.backend
        sent = [Message(m.role, m.content) for m in messages if m.content.strip()]
        if persona and persona.strip():
            sent.insert(0, Message("system", persona.strip()))
        sent = _fit_as_sent(sent, self._budget(backend), backend.count_tokens)

        def run(stream: ReplyStream) -> Iterator[str]:
            stream.messages = sent
            parts = stream.parts
            error = None
            try:
                chunks = self._generate(backend, sent, limits)
                try:
                    for chunk in chunks:
                        if stream.stopped:
                            break
                        if isinstance(chunk, ToolCalls):
                            stream.tool_calls = list(chunk.calls)
                            continue
                        parts.append(chunk)
                        yield chunk
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
            except BackendError as exc:
                log.warning("a front end's task failed: %s", exc)
                error = TASK_FAILED(why=str(exc))
            reply = "".join(parts).strip()
            if error is None and not reply and not stream.stopped and not stream.tool_calls:
                error = TASK_EMPTY()
            stream.result = TurnResult(
                reply, [], None, sent, error, stopped=stream.stopped, tool_calls=list(stream.tool_calls)
            )

        return ReplyStream(run)

    def regenerate(self, user: str, *, lang: str | None = None, backend: ChatBackend | None = None) -> ReplyStream:
        """A new reply to the last message of today, replacing the stored one when it is complete."""
        now = self.clock()
        turns = self.bank.turns_on(user, now.date())
        if not turns:
            raise ValueError(NOTHING_TO_REGENERATE())
        last = turns[-1]
        turn = _Turn(user, last.query, now, self._lang(lang), backend or self.backend, replace=last)
        return ReplyStream(lambda stream: self._run(stream, turn))

    def _lang(self, lang: str | None) -> str:
        lang = lang or self.settings.lang
        load_prompts(lang)  # an unknown language fails here, clearly
        return lang

    def _run(self, stream: ReplyStream, turn: _Turn) -> Iterator[str]:
        stream.consolidation = self._rollover(turn.user, turn.now, turn.lang, turn.backend)
        prompts = load_prompts(turn.lang)
        # what today's turns kept of their prompts is not used here: not read (kilobytes a turn)
        today = self.bank.turns_on(turn.user, turn.now.date(), extra=False)
        if turn.replace is not None and turn.given_history is None:
            today = [t for t in today if t.position < turn.replace.position]
        if turn.given_history is not None:
            # the stored turns the client shows again are in the prompt as its history already
            said = {" ".join(q.split()) for q, _ in turn.given_history}
            turn.history = [t for t in today if " ".join(t.query.split()) in said]
        else:
            turn.history = today[self._window(self._pairs(today, prompts, turn.backend), turn.backend) :]
        stream.messages, stream.used, stream.today = self._prompt(turn, prompts)
        parts = stream.parts
        error = None
        try:
            chunks = self._stream(turn, stream.messages)
            try:
                for chunk in chunks:
                    if stream.stopped:
                        break
                    if isinstance(chunk, ToolCalls):
                        stream.tool_calls = list(chunk.calls)
                        continue
                    parts.append(chunk)
                    yield chunk
                    if stream.stopped:
                        break
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()  # a local model stops generating at its next token
        except BackendError as exc:
            log.warning("reply for %s failed: %s", turn.user, exc)
            error = REPLY_FAILED(why=str(exc))
        except GeneratorExit:  # the consumer went away mid-reply (a closed tab): keep what came
            stream.stop()
            stream.result = self._finish(stream, turn, "".join(parts), None)
            raise
        stream.result = self._finish(stream, turn, "".join(parts), error)

    def _stream(self, turn: _Turn, messages: Sequence[Message]) -> Iterator[str]:
        """The backend's reply; a backend that keeps each conversation's prompt prefix between
        turns (``keeps_prefix``: the local model's KV cache) is told whose conversation it is."""
        if getattr(turn.backend, "keeps_prefix", False):
            self._keeps_prefixes(turn.backend)
            return self._generate(turn.backend, messages, turn.limits, cache_key=user_key(turn.user))
        return self._generate(turn.backend, messages, turn.limits)

    def _generate(
        self, backend: ChatBackend, messages: Sequence[Message], limits: Limits | None, **options
    ) -> Iterator[str]:
        """The backend's reply within the client's ``limits``: at most the fewer of its
        ``max_tokens`` and the server's, cut at its ``stop`` strings, with its sampling where the
        backend takes it."""
        limits = limits or Limits()
        cap = self.max_new_tokens if limits.max_tokens is None else max(1, min(limits.max_tokens, self.max_new_tokens))
        if limits.sampling is not None and takes_sampling(backend):
            options["sampling"] = limits.sampling
        if limits.tools and takes_tools(backend):
            options["tools"], options["tool_choice"] = limits.tools, limits.tool_choice
        chunks = backend.stream(messages, max_tokens=cap, **options)
        return until_stop(chunks, limits.stop) if any(limits.stop) else chunks

    def _finish(self, stream: ReplyStream, turn: _Turn, reply: str, error: str | None) -> TurnResult:
        reply = reply.strip()
        result = TurnResult(
            reply,
            list(stream.used),
            None,
            list(stream.messages),
            error,
            turn.text,
            stream.stopped,
            today=list(stream.today),
        )
        result.tool_calls = list(stream.tool_calls)
        if error is None and not reply and not stream.stopped and not result.tool_calls:
            result.error = REPLY_EMPTY()
        if reply and result.error is None:
            result.not_from_memory = self._not_from_memory(turn, reply, stream.messages)
        if result.error or not turn.store or result.tool_calls:
            return result  # (tool calls: the final reply, in the client's next request, is the turn)
        try:
            return self._store(turn, result, reply)
        except StoreUnavailable as exc:  # the database went away mid-turn
            log.warning("turn of %s not (completely) stored: %s", turn.user, exc)
            if result.turn is None:  # nothing of this turn was committed: the user may resend
                result.error = NOT_SAVED(why=str(exc))
            return result  # else the turn is stored; only its recall counts were not

    def _store(self, turn: _Turn, result: TurnResult, reply: str) -> TurnResult:
        with self._store_lock(turn.user):
            if turn.replace is not None:
                if not reply:
                    result.turn = turn.replace
                    result.error = REGENERATED_EMPTY()
                    return result
                try:
                    result.turn = self.bank.edit_text(
                        turn.user, turn.replace.stored_id, reply, extra={**turn.extra, **self._extra(result)}
                    )
                except UnknownMemory:
                    result.error = REGENERATED_GONE()
                    return result
                self._invalidate_if_summarised(turn.user, turn.replace.day)
            else:
                extra = {**turn.extra, **self._extra(result)}
                # the reply's vector is queued once the memories used are reinforced, so that its
                # embedding does not take the cores from the rest of the turn; the turn's links
                # are written with it (nothing reads them before the next message)
                result.turn = self.bank.add_turn(
                    turn.user, turn.text, reply, turn.now, extra=extra, replies="queued", links="later"
                )
                try:
                    if turn.supersedes is not None and result.turn is not None:
                        self._supersede(turn.user, turn.supersedes, "edited", result.turn)
                    self._reinforce(turn, result)
                finally:
                    self.bank.queue_replies(turn.user)
                return result
            self._reinforce(turn, result)
        return result

    def _reinforce(self, turn: _Turn, result: TurnResult) -> None:
        """The memories in the prompt gain by how well they matched and whether the reply used
        them (``activation.recall_gains``); those the person confirmed gain more (``_confirmed``)."""
        tokenizer = self.bank.tokenizer
        confirmed = self._confirmed(turn, result)
        reply_words = words(tokenizer, result.reply)
        # a memory brought up: the prompt offered it, the reply may take it up or not
        offered = [h for h in result.used if h.cue == bring_up.BRING_UP_CUE]
        for h in offered:
            bring_up.offered(self.bank, turn.user, h.record.stored_id, reply_uses(tokenizer, h.record, reply_words))
        # a core memory is in every prompt (and one brought up was offered): each counts as
        # recalled only when the reply used it, and as the best match of the prompt
        given = (CORE_CUE, bring_up.BRING_UP_CUE)
        recalled = [h for h in result.used if h.cue not in given or reply_uses(tokenizer, h.record, reply_words)]
        best = max((h.score for h in recalled), default=0.0)
        scored = [(h.record, best if h.cue in given else h.score) for h in recalled]
        # the memories as the retrieval read them: not read again (one recalled since is)
        self.bank.recall(turn.user, scored, result.reply, turn.now, confirmed=confirmed, competitors=turn.competitors)

    def _confirmed(self, turn: _Turn, result: TurnResult) -> set[int]:
        """The memories this message confirms (``activation.confirmed_by``): those it says again
        in the person's words, and, when it begins by agreeing ("yes, still Pixel"), those the
        previous reply used (read only then)."""
        recalled: list[MemoryRecord] = []
        previous = turn.history[-1] if turn.history and turn.replace is None else None
        if previous is not None and previous.id is not None and confirms(turn.text):
            try:  # the memories the previous reply had in its prompt
                before = UsedMemory.all_of(self.bank.get(turn.user, previous.stored_id).extra.get(USED))
                ids = [m.id for m in before if m.id is not None]
                recalled = list(self.bank.get_many(turn.user, ids).values()) if ids else []
            except UnknownMemory:
                pass  # deleted meanwhile: nothing of it to confirm
        reply = previous.response if previous is not None else ""
        return confirmed_by(self.bank.tokenizer, [h.record for h in result.used], turn.text, recalled, reply)

    def _not_from_memory(self, turn: _Turn, reply: str, messages: Sequence[Message]) -> list[str]:
        """The names of ``reply`` that its prompt (memories, summaries, persona, today's talk and
        the message) never mentions: said as if remembered, but made up."""
        said = self._names_check.sources(
            [m.content for m in messages] + [turn.text], allowed=[turn.user, self.settings.companion_name]
        )
        return self._names_check.unsupported_names(reply, said)

    @staticmethod
    def _extra(result: TurnResult) -> dict:
        """What a stored turn keeps of its prompt: the memories used and today's lines in it,
        whether its reply was stopped before its end (what came so far is the reply), and the
        names of the reply that were not from memory."""
        out = {
            USED: [UsedMemory.of_hit(h, MEMORY_CHARS).as_json() for h in result.used],
            TODAY: [UsedMemory.of_today(t, MEMORY_CHARS).as_json() for t in result.today],
            "stopped": result.stopped,
        }
        if result.not_from_memory:
            out[NOT_FROM_MEMORY] = list(result.not_from_memory)
        return out

    def _supersede(self, user: str, old: MemoryRecord, reason: str, new: MemoryRecord) -> None:
        try:
            self.bank.supersede(user, old.stored_id, reason, by=new.stored_id, when=new.created_at)
        except UnknownMemory:  # deleted meanwhile: nothing left to supersede
            return
        self._invalidate_if_summarised(user, old.day)

    def _store_lock(self, user: str) -> threading.Lock:
        with self._guard:
            return self._store_locks[user]

    # -- the prompt ---------------------------------------------------------------------------
    @staticmethod
    def _pairs(turns: Sequence[MemoryRecord], prompts: PromptSet, backend: ChatBackend) -> list[tuple[str, str]]:
        """Today's turns as the prompt shows them: each message (and reply) cut to HISTORY_CHARS."""
        cut = prompts.fragment("cut")
        return [(_clip(t.query, HISTORY_CHARS, cut), _clip(t.response, HISTORY_CHARS, cut)) for t in turns]

    def _window(self, pairs: Sequence[tuple[str, str]], backend: ChatBackend) -> int:
        """Where today's conversation in the prompt starts (an index into ``pairs``): see
        ``day_window``, with at most ``history_turns`` turns and HISTORY_TOKENS tokens."""
        if not self.history_turns:
            return len(pairs)
        costs = [backend.count_tokens(q) + backend.count_tokens(r) for q, r in pairs]
        return day_window(costs, turns=self.history_turns, tokens=HISTORY_TOKENS)

    def _prompt(self, turn: _Turn, prompts: PromptSet) -> tuple[list[Message], list[Hit], list[MemoryRecord]]:
        exclude = {t.id for t in turn.history}
        if turn.replace is not None:
            exclude.add(turn.replace.id)
        if turn.supersedes is not None:  # the words an edit takes back are not a memory of this turn
            exclude.add(turn.supersedes.id)
        found = prompt_candidates(self.bank, turn.user, turn.text, turn.now, exclude=exclude, talk=self._talk(turn))
        hits = found[: self.bank.retrieval_config.k]
        if turn.given_history is not None:
            pairs = turn.given_history[self._window(turn.given_history, turn.backend) :]
        else:
            pairs = self._pairs(turn.history, prompts, turn.backend)
        values = self.meta_values(turn.user, turn.now, prompts, turn.backend, persona=turn.persona)
        hits, lines = self._tiered(turn, hits, exclude, values, prompts)
        turn.competitors = competitors_of(found, {h.record.id for h in hits})
        fitted = fit_chat(
            prompts,
            values,
            lines,
            pairs,
            turn.shown or turn.text,
            budget=self._budget(turn.backend),
            count=turn.backend.count_tokens,
        )
        if fitted.shortened:
            log.info("prompt for %s shortened to fit: %s", turn.user, ", ".join(fitted.shortened))
        if turn.tail and takes_tools(turn.backend):  # this turn's tool round trips, after the message
            fitted.messages.extend(turn.tail)
        kept = pairs[len(pairs) - fitted.kept_history :] if fitted.kept_history else []
        if turn.given_history is not None:
            said = {" ".join(q.split()) for q, _ in kept}
            today = [t for t in turn.history if " ".join(t.query.split()) in said]
        else:
            today = turn.history[len(turn.history) - len(kept) :] if kept else []
        return fitted.messages, hits[: fitted.kept_memories], today

    def _tiered(
        self, turn: _Turn, hits: list[Hit], exclude: set, values: dict[str, str], prompts: PromptSet
    ) -> tuple[list[Hit], list[str]]:
        """The memories of the prompt by tier (``memory/tiers.py``): the core's (pinned and
        confirmed memories, always there; those the cue found too keep their place and scores),
        then the cue's, each tier within its share of the memory budget, a memory that does not
        fit whole shortened to whole sentences. The profile in the system message is the core's
        too: its tokens come out of the core's share."""
        count = turn.backend.count_tokens
        core = {r.stored_id: r for r in self.bank.core(turn.user) if r.id not in exclude}
        policy = self.bank.policy_for(turn.user)

        def why(rec: MemoryRecord) -> str:
            return WHY_PINNED() if rec.pinned else WHY_CONFIRMED()

        found = [
            replace(h, tier="core", reasons=[*h.reasons, why(h.record)]) if h.record.id in core else h for h in hits
        ]
        retrieved = {h.record.id for h in found}
        nothing = prompts.fragment("nothing_yet")
        for rec in core.values():
            if rec.id not in retrieved:
                found.append(
                    Hit(
                        rec,
                        0.0,
                        retention=policy.retention(rec, turn.now),
                        reasons=[why(rec)],
                        cue=CORE_CUE,
                        tier="core",
                    )
                )
        found.sort(key=lambda h: h.tier != "core")  # the core first, each part in its order
        up = bring_up.offer(self.bank, turn.user, {h.record.id for h in found} | exclude)
        if up is not None:
            rec, reason = up
            retention = policy.retention(rec, turn.now)
            found.append(
                Hit(
                    rec,
                    0.0,
                    retention=retention,
                    reasons=[reason],
                    cue=bring_up.BRING_UP_CUE,
                    tier=policy.tier(rec, retention),
                )
            )
        profile = values.get("global_personality", "")
        spent = {"core": count(profile) if profile and profile != nothing else 0}
        budget = min(self.memory_tokens, self._budget(turn.backend) // 2)
        placed = allot(
            [self.memory_parts(h.record, prompts, h.tier, ask=h.cue == bring_up.BRING_UP_CUE) for h in found],
            budget,
            count,
            self.tier_shares,
            spent=spent,
        )
        return [found[p.index] for p in placed], [p.text for p in placed]

    def _talk(self, turn: _Turn) -> list[TalkLine]:
        """The conversation before this message, retrieval's second cue: today's latest stored
        turns, with their stored vectors; in the API the client's own history, where a line that
        is one of today's stored turns takes its vector and the others are embedded."""
        if turn.given_history is None:
            return self.bank.talk(turn.user, turn.history[-TALK_TURNS:])
        stored: dict[str, dict[str, TalkLine]] = {}
        key = ""
        for line in self.bank.talk(turn.user, turn.history):
            if line.role == "user":
                key = " ".join(line.text.split())
            stored.setdefault(key, {})[line.role] = line  # a reply follows its message
        lines: list[TalkLine] = []
        for q, a in turn.given_history[-TALK_TURNS:]:
            known = stored.get(" ".join(q.split()), {})
            mine = known.get("user")
            # a line the client sent that is not stored is embedded now: cut as the query is, so
            # that a history of huge messages costs a few chunks, not hundreds
            lines.append(mine if mine is not None else TalkLine("user", cue_text(q)))
            if a.strip():
                reply = known.get("assistant")
                same = reply is not None and " ".join(reply.text.split()) == " ".join(a.split())
                lines.append(reply if same and reply is not None else TalkLine("assistant", cue_text(a)))
        return lines

    def _budget(self, backend: ChatBackend) -> int:
        room = backend.context_tokens - self.max_new_tokens - 32
        return min(room, self.prompt_budget) if self.prompt_budget else room

    def meta_values(
        self,
        user: str,
        now: datetime,
        prompts: PromptSet,
        backend: ChatBackend | None = None,
        *,
        persona: str | None = None,
    ) -> dict[str, str]:
        """What fills the meta-prompt besides the memories, for ``user`` at ``now``. With a
        fine-tuned adapter that was trained with a system prompt in this language, the meta-prompt
        opens with that prompt (``trained_prompt``)."""
        found = self.bank.global_summaries(user)
        events, personality = found.get(Kind.GLOBAL_EVENTS), found.get(Kind.GLOBAL_PERSONALITY)
        nothing = prompts.fragment("nothing_yet")
        persona = (self.settings.persona if persona is None else persona).strip()
        trained = (getattr(backend or self.backend, "system_prompts", None) or {}).get(prompts.lang, "")
        return {
            "trained_prompt": f"{trained}\n" if trained else "",
            "companion_name": self.settings.companion_name,
            "user_name": user,
            "today": prompts.format_date(now.date()),
            "persona": prompts.fragment("persona", persona=persona) if persona else "",
            "global_events": events.text if events else nothing,
            "global_personality": personality.text if personality else nothing,
        }

    @staticmethod
    def memory_line(rec: MemoryRecord, prompts: PromptSet) -> str:
        """One memory as the meta-prompt shows it: with its date."""
        return Companion.memory_parts(rec, prompts).text()

    @staticmethod
    def memory_parts(rec: MemoryRecord, prompts: PromptSet, tier: str = "active", *, ask: bool = False) -> Line:
        """One memory for the prompt's memory budget (``memory/tiers.py``): its tier and its parts
        (a turn: the message and the reply), each kept to its whole sentences within
        MEMORY_CHARS, and how the line is written from them, with its date. ``ask``: a memory
        worth bringing up (``bring_up.py``), said as something the companion may ask about."""
        line = Companion._memory_parts(rec, prompts, tier)
        if not ask:
            return line
        note = prompts.fragment("bring_up", user_name=rec.user)
        return Line(line.tier, line.parts, lambda p: f"{line.render(p)} {note}")

    @staticmethod
    def _memory_parts(rec: MemoryRecord, prompts: PromptSet, tier: str) -> Line:
        when = prompts.format_date(rec.day)
        cut = prompts.fragment("cut")

        def short(s: str) -> str:
            s = " ".join(s.split())
            if len(s) <= MEMORY_CHARS:
                return s
            kept = whole_sentences(s, lambda x: len(x) <= MEMORY_CHARS)
            if kept is None:  # a first sentence longer than that: kept whole unless it runs on and on
                kept = whole_sentences(s, lambda x: len(x) <= 3 * MEMORY_CHARS)
            return kept if kept is not None else f"{s[:MEMORY_CHARS].rstrip()} {cut}"

        if rec.kind == Kind.TURN:
            if rec.response.strip():
                return Line(
                    tier,
                    (short(rec.query), short(rec.response)),
                    lambda p: prompts.fragment("memory_turn", date=when, user_name=rec.user, query=p[0], response=p[1]),
                )
            return Line(
                tier,
                (short(rec.query),),
                lambda p: prompts.fragment("memory_user_only", date=when, user_name=rec.user, query=p[0]),
            )
        if rec.kind == Kind.DAILY_EVENTS:
            return Line(
                tier, (short(rec.text),), lambda p: prompts.fragment("memory_daily_events", date=when, text=p[0])
            )
        if rec.kind == Kind.DAILY_PERSONALITY:
            return Line(
                tier,
                (short(rec.text),),
                lambda p: prompts.fragment("memory_daily_personality", date=when, user_name=rec.user, text=p[0]),
            )
        return Line(tier, (short(rec.text),), lambda p: prompts.fragment("memory_other", date=when, text=p[0]))

    # -- the day ------------------------------------------------------------------------------
    def _rollover(self, user: str, now: datetime, lang: str, backend: ChatBackend) -> ConsolidationReport | None:
        """Summarise the finished days, once per user and day (again while a summary keeps failing)."""
        today = now.date()
        mark = self.bank.user_meta(user, ROLLOVER_MARK)
        if self._rolled.get(user) == (today, mark):
            return None
        if self._rolled.get(user, (today,))[0] != today:  # a new day: yesterday's prompt is done with
            self._drop_prefix(backend, user)
        with self._guard:
            lock = self._rollover_locks[user]
        with lock, self.bank.exclusive(user, "rollover"):
            # another tab, or another worker over the same store, may have done it meanwhile:
            # then nothing is pending and no summary is written twice
            if self._rolled.get(user) == (today, mark):
                return None
            report = self.consolidator.run(user, now, lang=lang, backend=backend)
            if report.ok:
                self._rolled[user] = (today, mark)
                bring_up.choose(self.bank, user, now)  # once a day: what is worth bringing up
        return report

    def days_to_summarise(self, user: str) -> list[date]:
        """The finished days that ``user``'s next message summarises before it is answered (the
        day rollover: a model's summaries, then the forgetting pass); [] once today's is done.
        A chat page says so meanwhile: with a slow local model it takes a while."""
        now = self.clock()
        if self._rolled.get(user) == (now.date(), self.bank.user_meta(user, ROLLOVER_MARK)):
            return []
        return self.consolidator.pending_days(user, now.date() - timedelta(days=1))

    def consolidation(
        self,
        user: str,
        *,
        until: date | None = None,
        lang: str | None = None,
        backend: ChatBackend | None = None,
        forget: bool | None = None,
    ) -> ConsolidationReport:
        """Summarise the days up to ``until`` (inclusive; default: every day before today) and fold
        them into the global summaries, then forget what faded. The full report."""
        user_key(user)
        now = self.clock()
        with self._guard:
            lock = self._rollover_locks[user]
        with lock, self.bank.exclusive(user, "rollover"):
            report = self.consolidator.run(
                user, now, until=until, lang=self._lang(lang), backend=backend or self.backend, forget=forget
            )
            if report.ok and (until is None or until >= now.date()):
                self._rolled[user] = (now.date(), self.bank.user_meta(user, ROLLOVER_MARK))
        return report

    def consolidate(self, user: str, *, until: date | None = None, lang: str | None = None) -> list[date]:
        """The days summarised now (see ``consolidation``), written in ``lang``."""
        return self.consolidation(user, until=until, lang=lang).summarised

    def _invalidate_if_summarised(self, user: str, day: date) -> None:
        if any(self.bank.get_summary(user, kind, day) for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY)):
            self.consolidator.invalidate_day(user, day)
            self.bank.set_user_meta(user, ROLLOVER_MARK, secrets.token_hex(8))  # for every worker
            self._rolled.pop(user, None)

    @staticmethod
    def _drop_prefix(backend: ChatBackend, user: str) -> None:
        drop = getattr(backend, "drop_prefix", None)
        if drop is not None:
            drop(user_key(user))

    def _keeps_prefixes(self, backend: ChatBackend) -> None:
        with self._guard:
            # changed in place: the web's variants of a companion (copies) share the list
            self._prefix_keepers[:] = [r for r in self._prefix_keepers if r() is not None]
            if not any(r() is backend for r in self._prefix_keepers):
                self._prefix_keepers.append(weakref.ref(backend))

    def _drop_prefixes(self, user: str) -> None:
        """The prompts kept of ``user``'s conversation dropped, by every backend that keeps one."""
        with self._guard:
            keepers = [b for r in self._prefix_keepers if (b := r()) is not None]
        for backend in [self.backend, *(b for b in keepers if b is not self.backend)]:
            self._drop_prefix(backend, user)

    def forget_user(self, user: str) -> None:
        """Drop what this companion keeps in memory about ``user`` (after the account is deleted)."""
        self._drop_prefixes(user)
        with self._guard:
            self._rolled.pop(user, None)
            self._store_locks.pop(user, None)
            self._rollover_locks.pop(user, None)

    # -- the chat and the profile -------------------------------------------------------------
    def today(self, user: str) -> list[MemoryRecord]:
        """Today's turns in order (to show the chat again after a reload)."""
        return self.bank.turns_on(user, self.clock().date())

    # -- a chat app's history, followed ----------------------------------------------------------
    def replace_reply(self, user: str, turn: MemoryRecord, reply: str) -> MemoryRecord | None:
        """A stored turn's reply becomes ``reply`` (the one the person kept in their chat app: a
        swipe, an edited or a continued reply); its day is summarised again. None if it is gone."""
        try:
            with self._store_lock(user):
                rec = self.bank.edit_text(user, turn.stored_id, reply)
        except UnknownMemory:
            return None
        self._invalidate_if_summarised(user, turn.day)
        return rec

    def restate(self, user: str, turn: MemoryRecord, query: str, reply: str, *, extra: dict) -> MemoryRecord | None:
        """An earlier exchange the person edited in their chat app: stored as it now stands, at the
        old one's time, and the old one superseded (reason "edited"). Nothing is generated."""
        with self._store_lock(user):
            new = self.bank.add_turn(user, query, reply, turn.created_at, extra=extra)
            if new is not None:
                self._supersede(user, turn, "edited", new)
        return new

    def take_back(self, user: str, turn: MemoryRecord, reason: str = "deleted") -> None:
        """A turn the person removed from their chat leaves active memory (superseded with
        ``reason``): kept and shown, never retrieved or summarised again."""
        with self._store_lock(user):
            try:
                self.bank.supersede(user, turn.stored_id, reason, when=self.clock())
            except UnknownMemory:
                return
        self._invalidate_if_summarised(user, turn.day)

    def delete_turn(self, user: str, turn_id: int) -> None:
        """Delete a turn and its memory; the summaries of its day are written again without it."""
        rec = self.bank.get(user, turn_id)
        if rec.kind != Kind.TURN:
            raise ValueError(NOT_A_TURN(id=str(turn_id), kind=rec.kind.value))
        self.forget(user, [rec.stored_id])

    def forget(self, user: str, memory_ids: Sequence[int]) -> int:
        """Delete memories for good, wherever their words went: the memories themselves and what
        was written from them (a turn's day summaries and the global ones, written again at the
        next rollover without it; the global ones for a daily summary), in one
        ``MemoryBank.delete`` (which also drops the records of prompts that held them), then the
        prompts kept of the user's conversation by every model this companion (or a variant of
        it) has run it with. Every deletion a person asks for
        (the memory page, the chat page, the API) comes here. UnknownMemory unless all are theirs."""
        return self._forget(user, [self.bank.get(user, int(i)) for i in memory_ids])

    def purge_archived(self, user: str) -> int:
        """Every archived memory deleted for good, as ``forget`` deletes (``forget --purge``)."""
        return self._forget(user, self.bank.records(user, state=State.ARCHIVED, extra=False))

    def _forget(self, user: str, records: Sequence[MemoryRecord]) -> int:
        ids = {r.stored_id for r in records}
        days = {r.day for r in records if r.kind == Kind.TURN}
        derived: set[int] = set()
        for day in days:
            derived |= self.consolidator.summaries_of(user, day)
        if (days and derived) or any(r.kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY) for r in records):
            derived |= self.consolidator.global_summaries(user)
        with self._store_lock(user):
            self.bank.delete(user, sorted(ids | derived))
        if derived:
            self.bank.set_user_meta(user, ROLLOVER_MARK, secrets.token_hex(8))  # for every worker
            self._rolled.pop(user, None)
        self._drop_prefixes(user)
        return len(records)

    def profile(self, user: str) -> dict:
        """What the companion has made of the user: the global summaries and each day's."""
        found = self.bank.global_summaries(user)
        glob_events, glob_personality = found.get(Kind.GLOBAL_EVENTS), found.get(Kind.GLOBAL_PERSONALITY)
        events = {r.day: r.text for r in self.bank.summaries(user, Kind.DAILY_EVENTS)}
        persona = {r.day: r.text for r in self.bank.summaries(user, Kind.DAILY_PERSONALITY)}
        return {
            "global_events": glob_events.text if glob_events else "",
            "global_personality": glob_personality.text if glob_personality else "",
            "daily": [
                {"day": d.isoformat(), "events": events.get(d, ""), "personality": persona.get(d, "")}
                for d in sorted(set(events) | set(persona))
            ],
        }
