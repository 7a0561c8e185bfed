"""MemoryBank: every user's memories, the API the companion uses, over one store.

The bank holds the logic once (storing turns and summaries, retrieval, forgetting, rehearsal,
the replies' vectors); where the memories live is its store (``memory/stores``): a home folder
of SQLite files with their FAISS indexes, or a PostgreSQL database. Every call names its user
and only ever opens that user's store. Open users are kept in a small LRU so that a server with
many users does not hold every index.

A turn is stored with the vector its message's retrieval made; the reply's vector is made after
the reply, by a worker thread of the bank (``settle`` waits for it), so that it costs the turn
nothing. A turn that has no reply vector yet (a crash, a migrated home) gets it when its user is
next opened. A chat turn's links (``memory/links.py``) can be left to the same worker
(``add_turn(..., links="later")``): nothing reads them before the person's next message.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import random
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime
from typing import Callable, Collection, ContextManager, Mapping, Sequence

import numpy as np

from . import compression, links
from .activation import recall_gains
from .compression import Compressor
from .embedders import (
    TURN_VECTORS,
    Embedder,
    QueryHandover,
    embed_documents,
    embed_query,
    embed_replies,
    embed_turns,
)
from .forgetting import EbbinghausPolicy, ForgettingPolicy, category_of
from .importance import rate_turn
from .lexical import Tokenizer
from .links import write_turns as write_turn_links
from .message import Message
from .records import GLOBAL_DAY, Kind, MemoryRecord, State, turn_text
from .retrieval import Hit, RetrievalConfig, TalkLine, retrieve
from .stores.base import (
    MAX_USERNAME,
    REPLY_VECTOR,
    SECOND_REPLY_VECTOR,
    SECOND_VECTOR,
    OpenStore,
    Stores,
    user_key,
)
from .stores.record_reads import with_vectors
from .stores.references import REFERENCES, TODAY, USED

log = logging.getLogger(__name__)


def _turn_vector_text(turn: MemoryRecord) -> str:
    """What a turn's own vector is made of (``embed_turns``): the user's message, or the reply
    where the message is blank. The embedder's and the second reader's alike."""
    return turn.query if turn.query.strip() else turn.response


PACES_META = "forgetting_paces"  # a user's learned pace per sort of memory (JSON)
# the core tier's memories (JSON {"pinned": [ids], "confirmed": [ids]}, newest first): read at
# every turn, so kept as ids rather than found by a scan of the user's memories
CORE_META = "core_memories"
# the compressed copies of archived turns (JSON {original id: copy id}; memory/compression.py)
COMPRESSED_META = "compressed_turns"
CONFIRMED_KEPT = 64  # the latest memories the person confirmed that stay in the core tier

__all__ = ["MAX_USERNAME", "REFERENCES", "TODAY", "USED", "ForgetDecision", "MemoryBank", "UnknownMemory", "user_key"]


class UnknownMemory(KeyError):
    """No memory with that id for that user (its message: ``NO_MEMORY``)."""


NO_MEMORY = Message("memory.unknown", en="no memory {id} for this user", zh="没有编号为 {id} 的记忆。")
BLANK_TEXT = Message("memory.blank", en="a memory's text cannot be blank", zh="记忆的内容不能是空的。")


class _ReplyWorker:
    """Embeds the replies of stored turns on its own thread, after the turn: one user at a time,
    every pending reply of that user in batches. ``wait`` returns once the queue is done.

    At interpreter exit the worker is stopped after its current batch and joined (``_stop_all``):
    a daemon thread still inside PyTorch when the interpreter finalizes aborts the whole process
    ("terminate called without an active exception", SIGABRT) after every turn was stored. What
    it leaves is done when its user is next opened, as after a crash."""

    _live: "weakref.WeakSet[_ReplyWorker]" = weakref.WeakSet()

    def __init__(self, bank: "MemoryBank"):
        self._bank = bank
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        _ReplyWorker._live.add(self)

    def submit(self, user: str) -> None:
        if self.stopping.is_set():
            return  # the process is ending: left for the user's next open
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sf-replies", daemon=True)
                self._thread.start()
        self._queue.put(user)

    def _run(self) -> None:
        while True:
            user = self._queue.get()
            try:
                if user is None or self.stopping.is_set():
                    if user is None:
                        return
                    continue  # drained without work: wait() returns, the rest is done later
                self._bank._embed_pending_replies(user)
            except Exception as exc:  # the user was closed or deleted meanwhile: done at its next open
                log.warning("reply vectors of %s left for later: %s", user, exc)
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        self._queue.join()

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop after the current batch and wait for the thread to end."""
        self.stopping.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)

    @classmethod
    def _stop_all(cls) -> None:
        for worker in list(cls._live):
            worker.stop()


atexit.register(_ReplyWorker._stop_all)


@dataclass(frozen=True)
class ForgetDecision:
    record: MemoryRecord
    retention: float
    archived: bool


class MemoryBank:
    def __init__(
        self,
        stores: Stores,
        embedder: Embedder,
        *,
        policy: ForgettingPolicy | None = None,
        retrieval: RetrievalConfig | None = None,
        max_open_users: int = 64,
        progress: Callable | None = None,
        workers: Executor | None = None,
        compress: bool = False,
        second: Embedder | None = None,
    ):
        self.stores: Stores = stores
        # text to lexical tokens: the stores' (their documents and the bank's searches must agree)
        self.tokenizer: Tokenizer = stores.tokenizer
        self.embedder = embedder
        # what every vector is made with and how; stored with each user's vectors and index
        self.vectors_id = f"{embedder.id}; {TURN_VECTORS}"
        self._embed = QueryHandover(embedder)  # a message's query vector also makes its turn's
        self.policy = policy or EbbinghausPolicy()
        self._policies: dict[str, ForgettingPolicy] = {}  # each user's, with the paces learned
        self.retrieval_config = retrieval or RetrievalConfig()
        self.max_open_users = max_open_users
        self.compress = compress  # compression before archiving (memory/compression.py)
        # the second reader (``RetrievalConfig.second_reader_below``): its vectors made by the reply
        # worker, off the turn's clock; None: retrieval reads with the embedder alone
        self.second = second
        self.progress = progress  # e.g. tqdm, for re-embedding
        self._open: OrderedDict[str, OpenStore] = OrderedDict()
        self._lock = threading.RLock()
        self._replies = _ReplyWorker(self)
        # each user's turns whose links the reply worker writes (``add_turns(links="later")``);
        # ``_linking`` keeps those writes apart from an edit's or a deletion's of the same memories
        self._unlinked: dict[str, list[int]] = {}
        self._linking = threading.RLock()
        self.replies_embedded = 0  # reply vectors the worker has stored (progress of an import)
        # called with (user, ids) after memories were deleted: what the app keeps of them outside
        # the bank is dropped (``delete``)
        self.on_delete: list[Callable[[str, list[int]], None]] = []
        # the threads a retrieval's lexical searches run on beside its query's embedding: the
        # factory's (shared by the banks it builds), else the bank's own (idle threads end with it)
        self.workers: Executor = workers or ThreadPoolExecutor(max_workers=4, thread_name_prefix="sf-lexical")

    # -- users --------------------------------------------------------------------------------
    def user_store(self, user: str) -> OpenStore:
        """``user``'s store, opened (and made) if it is not open: their memories' rows, vectors
        and searches, for what the bank's API does not cover (copies, benchmarks, tests)."""
        with self._lock:
            if user in self._open:
                self._open.move_to_end(user)
                return self._open[user]
            user_key(user)  # refuses a name no store may hold
            store = self.stores.open(user, dim=self.embedder.dim, vectors_id=self.vectors_id)
            try:
                self._reembed_if_needed(store)
                links.backfill(store, self.tokenizer)  # a store made before memories were linked
            except BaseException:
                store.close(save=False)
                raise
            self._open[user] = store
            while len(self._open) > self.max_open_users:
                _, old = self._open.popitem(last=False)
                old.close(save=False)
        # left over from a crash or a migration
        if store.replies_pending(1) or (self.second is not None and store.second_pending(1)):
            self._replies.submit(user)
        return store

    def _reembed_if_needed(self, store: OpenStore) -> None:
        stored = store.meta().get("embedder")
        if stored == self.vectors_id:
            return
        total = store.count()
        if stored is not None and total:
            log.warning(
                "memories of %s were embedded as %s; re-embedding %d as %s", store.user, stored, total, self.vectors_id
            )
            bar = self.progress(total=total, desc="re-embedding", unit="memory") if self.progress else None
            for rows in with_vectors(store):
                batch = [rec for rec, _, _ in rows]
                turns = [(r.stored_id, r.query or r.text) for r in batch if r.kind == Kind.TURN]
                others = [(r.stored_id, r.text) for r in batch if r.kind != Kind.TURN]
                if turns:
                    store.set_vectors([t[0] for t in turns], embed_turns(self.embedder, [t[1] for t in turns]))
                    # the reply vectors are redone by the reply worker, once the user is open
                    store.set_vectors([t[0] for t in turns], None, column=REPLY_VECTOR)
                if others:
                    store.set_vectors([o[0] for o in others], embed_documents(self.embedder, [o[1] for o in others]))
                if bar:
                    bar.update(len(batch))
            if bar:
                bar.close()
        store.set_meta("embedder", self.vectors_id)

    def users(self) -> list[str]:
        return self.stores.users()

    def has_user(self, user: str) -> bool:
        return self.stores.has_user(user)

    def delete_user(self, user: str) -> None:
        """Every memory of ``user``, gone for good."""
        with self._lock:
            opened = self._open.pop(user, None)
            self._policies.pop(user, None)
            self._unlinked.pop(user, None)
            if opened:
                opened.close(save=False)
            self.stores.delete_user(user)

    def user_meta(self, user: str, key: str) -> str | None:
        """A small value the app keeps with a user's memories (shared by every process)."""
        return self.user_store(user).meta().get(key)

    def set_user_meta(self, user: str, key: str, value: str) -> None:
        self.user_store(user).set_meta(key, value)

    def exclusive(self, user: str, purpose: str) -> ContextManager:
        """A lock on ``user`` for ``purpose`` (the day rollover) held across processes: a lock file
        in the user's folder (SQLite), an advisory lock (PostgreSQL)."""
        return self.stores.exclusive(user, purpose)

    def settle(self) -> None:
        """Wait until every reply vector asked for so far is stored (evaluations, tests, closing),
        and until what the open stores build in the background (a large memory's lexical table
        in memory) is built."""
        self._replies.wait()
        with self._lock:
            opened = list(self._open.values())
        for store in opened:
            store.settle()

    def queue_replies(self, user: str) -> None:
        """Have the reply worker embed every reply of ``user`` that has no vector yet."""
        self._replies.submit(user)

    def _embed_pending_replies(self, user: str, batch: int = 256) -> None:
        with self._lock:
            if user not in self._open and not self.has_user(user):
                return  # deleted meanwhile
            u = self.user_store(user)
        self._link_pending(user, u)
        while not self._replies.stopping.is_set() and (pending := u.replies_pending(batch)):
            ids = [rid for rid, _ in pending]
            u.set_vectors(ids, embed_replies(self.embedder, [text for _, text in pending]), column="reply_vector")
            u.sync()
            self.replies_embedded += len(ids)
            if len(pending) < batch or self._replies.stopping.is_set():
                break
        self._embed_pending_second(u, batch)
        u.tidy()

    def _embed_pending_second(self, u: OpenStore, batch: int) -> None:
        """The second reader's vectors of the memories that lack one (new, edited, or stored
        before the second reader was on), both of each: a turn's message and reply as the
        embedder's, another memory's text."""
        if self.second is None:
            return
        while not self._replies.stopping.is_set() and (pending := u.second_pending(batch)):
            found = u.get_many(pending)
            turns = [r for r in found.values() if r.kind == Kind.TURN]
            others = [r for r in found.values() if r.kind != Kind.TURN]
            if turns:
                own = embed_turns(self.second, [_turn_vector_text(r) for r in turns])
                u.set_vectors([r.stored_id for r in turns], own, column=SECOND_VECTOR)
                answered = [r for r in turns if r.response.strip()]
                if answered:
                    replies = embed_replies(self.second, [r.response for r in answered])
                    u.set_vectors([r.stored_id for r in answered], replies, column=SECOND_REPLY_VECTOR)
            if others:
                u.set_vectors(
                    [r.stored_id for r in others],
                    embed_documents(self.second, [r.text for r in others]),
                    column=SECOND_VECTOR,
                )
            if len(pending) < batch or not found:
                break

    def _second_due(self, user: str) -> None:
        """After new or changed words: the reply worker makes their second reader's vectors."""
        if self.second is not None:
            self._replies.submit(user)

    def _link_pending(self, user: str, u: OpenStore) -> None:
        """The links of ``user``'s turns stored with ``links="later"``, written as the turns are
        now (an edit since, read again; a deleted one, left out)."""
        with self._linking:
            with self._lock:
                ids = self._unlinked.pop(user, [])
            if ids:
                found = u.get_many(ids)
                links.write_turns(u, [found[i] for i in ids if i in found], self.tokenizer)

    def flush(self) -> None:
        with self._lock:
            for opened in self._open.values():
                opened.flush()

    def close(self) -> None:
        self._replies.wait()  # the reply vectors; a lexical table being built in memory is dropped
        with self._lock:
            left = list(self._unlinked)
        for user in left:  # links a stopped worker left (the process is ending)
            try:
                self._link_pending(user, self.user_store(user))
            except Exception as exc:  # noqa: BLE001 (closing goes on)
                log.warning("links of %s's latest turns not written: %s", user, exc)
        with self._lock:
            try:
                for opened in self._open.values():
                    opened.close()
            finally:
                self._open.clear()
                self.stores.close()

    # -- writing ------------------------------------------------------------------------------
    def add_turn(
        self,
        user: str,
        query: str,
        response: str,
        when: datetime,
        *,
        importance: float | None = None,
        extra: dict | None = None,
        replies: str = "later",
        links: str = "now",
    ) -> MemoryRecord | None:
        """Store one exchange (a chat turn: its reply's vector is made afterwards, on the reply
        worker; ``replies="queued"``: once ``queue_replies`` is called, as in ``add_turns``; so are
        its links with ``links="later"``).
        ``importance`` 0..1, e.g. rated by the LLM; by default ``rate_turn``.
        A blank message is not stored (returns None)."""
        if not query or not query.strip():
            return None
        stored = self.add_turns(
            user, [(query, response, when)], importance=importance, extra=extra, replies=replies, links=links
        )
        return stored[0] if stored else None

    def add_turns(
        self,
        user: str,
        turns: Sequence[tuple[str, str, datetime]],
        *,
        importance: float | None = None,
        extra: dict | None = None,
        states: Sequence[MemoryRecord] | None = None,
        replies: str = "now",
        links: str = "now",
    ) -> list[MemoryRecord]:
        """Store several exchanges in one transaction (imports). ``states``, if given, carries each
        turn's forgetting fields (strength, last_recall, ...) in the same order. ``importance``:
        one rating for all, or None to rate each message. ``replies``: "now" embeds the replies in
        this call, "later" leaves them to the reply worker, "queued" too but only once
        ``queue_replies`` is called (an import: the worker then does not compete with the
        import's own embedding; a user's next open queues them too). A turn with a blank message
        and a reply (a conversation's second speaker opening a session) is kept, at its place in
        the day: its message vector is then the reply's words on the message side.
        ``links``: "now" writes the turns' links (``memory/links.py``) in this call, "later" leaves
        them to the reply worker, with the reply vectors ("later" replies: at once; "queued": once
        ``queue_replies`` is called): off a chat turn's clock, and nothing reads them before the
        person's next message."""
        if replies not in ("now", "later", "queued"):
            raise ValueError(f"replies must be 'now', 'later' or 'queued', not {replies!r}")
        if links not in ("now", "later") or links == "later" and replies == "now":
            raise ValueError(f"links must be 'now', or 'later' with replies later or queued, not {links!r}")
        u = self.user_store(user)
        records: list[MemoryRecord] = []
        # each day's turns in the order given: the store puts a turn after the day's turns in its
        # write transaction (the day's next free place, read under the user's lock), so no place
        # is asked for beforehand (a round trip that another worker's write could make stale)
        positions: dict[date, int] = {}
        for i, (query, response, when) in enumerate(turns):
            if not (query or "").strip() and not (response or "").strip():
                continue
            day = when.date()
            positions.setdefault(day, 0)
            rated = rate_turn(query, response) if importance is None else min(1.0, max(0.0, float(importance)))
            rec = MemoryRecord(
                user=user,
                kind=Kind.TURN,
                text=turn_text(query, response),
                created_at=when,
                day=day,
                query=query,
                response=response,
                position=positions[day],
                strength=self.policy.initial_strength(rated),
                importance=rated,
                extra=dict(extra or {}),
            )
            if states is not None:
                s = states[i]
                rec = rec.with_(
                    strength=s.strength, last_recall=s.last_recall, recall_count=s.recall_count, importance=s.importance
                )
            positions[day] += 1
            records.append(rec)
        if not records:
            return []
        vectors = embed_turns(self._embed.for_turns, [_turn_vector_text(rec) for rec in records])
        stored = u.insert(records, vectors)
        if links == "now":
            write_turn_links(u, stored, self.tokenizer)
        else:
            with self._lock:
                self._unlinked.setdefault(user, []).extend(rec.stored_id for rec in stored)
        answered = [rec for rec in stored if rec.response.strip()]
        if replies == "now" and answered:
            u.set_vectors(
                [rec.stored_id for rec in answered],
                embed_replies(self.embedder, [rec.response for rec in answered]),
                column="reply_vector",
            )
        u.sync()
        if replies == "later" and (answered or links == "later"):
            self._replies.submit(user)
        else:
            self._second_due(user)
        return stored

    def set_summary(
        self, user: str, kind: Kind, text: str, when: datetime, *, day: date | None = None, extra: dict | None = None
    ) -> MemoryRecord:
        """Create or replace the summary of ``kind`` for ``day`` (daily kinds) or the global one.
        ``extra`` replaces the summary's extra fields (how it was written: the day rollover's
        grounding check); without it a replaced summary keeps none of the old ones."""
        return self._set_summaries(user, [(kind, text, when, day)], extra=extra)[0]

    def _set_summaries(
        self, user: str, items: Sequence[tuple[Kind, str, datetime, date | None]], *, extra: dict | None = None
    ) -> list[MemoryRecord]:
        """``set_summary`` for many summaries at once (imports): one embedding batch, one index sync."""
        if not items:
            return []
        for kind, _, _, day in items:
            if kind == Kind.TURN:
                raise ValueError("use add_turn for dialogue turns")
            if kind.is_daily and day is None:
                raise ValueError(f"{kind.value} needs the day it summarises")
        u = self.user_store(user)
        vectors = embed_documents(self._embed, [text for _, text, _, _ in items])
        ids = []
        for (kind, text, when, day), vector in zip(items, vectors):
            day = day if kind.is_daily and day is not None else GLOBAL_DAY
            existing = u.records(kind=kind, day=day)
            if existing:
                rec = existing[0]
                extra_json = json.dumps(extra or {}, ensure_ascii=False)
                u.replace_text(rec.stored_id, text, vector, created_at=when.isoformat(), extra=extra_json)
                if rec.state == State.ARCHIVED:
                    u.set_state([rec.stored_id], State.ACTIVE)
            else:
                rec = u.insert(
                    [
                        MemoryRecord(
                            user=user,
                            kind=kind,
                            text=text,
                            created_at=when,
                            day=day,
                            strength=self.policy.initial_strength(0.0),
                            extra=dict(extra or {}),
                        )
                    ],
                    vector[None, :],
                )[0]
            ids.append(rec.stored_id)
        u.sync()
        found = u.get_many(ids)
        for rid in ids:
            links.write_summary(u, found[rid], self.tokenizer)
        self._second_due(user)
        return [found[i] for i in ids]

    def get_summary(self, user: str, kind: Kind, day: date | None = None) -> MemoryRecord | None:
        day = day if kind.is_daily else GLOBAL_DAY
        found = self.user_store(user).records(kind=kind, day=day)
        return found[0] if found else None

    def global_summaries(self, user: str) -> dict[Kind, MemoryRecord]:
        """The global summaries by kind (each as ``get_summary`` gives it), in one read: what
        every reply's meta-prompt opens with."""
        found: dict[Kind, MemoryRecord] = {}
        for rec in self.user_store(user).records(day=GLOBAL_DAY):
            if rec.kind.is_global:
                found.setdefault(rec.kind, rec)
        return found

    def summaries(self, user: str, kind: Kind) -> list[MemoryRecord]:
        return self.user_store(user).records(kind=kind)

    def edit_text(self, user: str, memory_id: int, text: str, *, extra: dict | None = None) -> MemoryRecord:
        """Replace a memory's text (an edited summary, a regenerated reply) and its vector. A turn's
        vector is its user's message (``embed_turns``), which a new reply leaves as it was: the
        stored one is kept, nothing is embedded.
        ``extra``, if given, is merged into the memory's extra fields in the same write."""
        u = self.user_store(user)
        with self._linking:  # a turn's links the worker has yet to write: written first
            self._link_pending(user, u)
            return self._edit_text(u, user, memory_id, text, extra)

    def _edit_text(self, u: OpenStore, user: str, memory_id: int, text: str, extra: dict | None) -> MemoryRecord:
        rec = self.get(user, memory_id)
        if not text.strip():
            raise ValueError(BLANK_TEXT())
        fields: dict[str, str | None] = {}
        if extra is not None:
            fields["extra"] = json.dumps({**rec.extra, **extra}, ensure_ascii=False)
        if rec.kind == Kind.TURN:
            fields["response"] = text
            fields["reply_vector"] = None  # the new reply's vector: made by the reply worker
            text = turn_text(rec.query, text)
            vector = u.vectors([memory_id])[0][0]
        else:
            vector = embed_documents(self._embed, [text])[0]
        u.replace_text(memory_id, text, vector, **fields)
        u.sync()
        edited = self.get(user, memory_id)
        if rec.kind == Kind.TURN:
            u.write_links([(memory_id, links.mentions(edited, self.tokenizer))])
        else:
            links.write_summary(u, edited, self.tokenizer)
        self._replies.submit(user)  # the reply's vector, the second reader's
        return self.get(user, memory_id)

    def supersede(
        self, user: str, memory_id: int, reason: str, *, by: int | None = None, when: datetime | None = None
    ) -> MemoryRecord:
        """A memory replaced by another (an edited message: ``reason`` "edited", ``by`` the new
        turn's id) leaves active memory: kept and shown, never retrieved again. The reason, the
        replacement and the time are kept in its extra fields under "superseded"."""
        u = self.user_store(user)
        rec = self.get(user, memory_id)
        note = {"reason": reason, "by": by, "at": when.isoformat() if when else None}
        extra = json.dumps({**rec.extra, "superseded": note}, ensure_ascii=False)
        u.replace_text(rec.stored_id, rec.text, u.vectors([rec.stored_id])[0][0], extra=extra)
        u.set_state([rec.stored_id], State.SUPERSEDED, when)
        u.sync()
        return self.get(user, memory_id)

    # -- reading ------------------------------------------------------------------------------
    def get(self, user: str, memory_id: int) -> MemoryRecord:
        rec = self.user_store(user).get_many([int(memory_id)]).get(int(memory_id))
        if rec is None:
            raise UnknownMemory(NO_MEMORY(id=str(memory_id)))
        return rec

    def get_many(self, user: str, memory_ids: Sequence[int]) -> dict[int, MemoryRecord]:
        """The memories of these ids that exist, by id."""
        return self.user_store(user).get_many([int(i) for i in memory_ids])

    def records(self, user: str, **filters) -> list[MemoryRecord]:
        return self.user_store(user).records(**filters)

    def extra_at(self, user: str, ids: Sequence[int], path: Sequence[str]) -> dict[int, str]:
        """The text each memory's extra fields hold at ``path`` (``UserStore.extra_at``)."""
        return self.user_store(user).extra_at(ids, path)

    def turns_on(self, user: str, day: date, *, extra: bool = True) -> list[MemoryRecord]:
        """The day's turns in order, without the superseded ones (an edited message's old turn).
        ``extra`` False: their extra fields are not read (``UserStore.records``)."""
        turns = self.user_store(user).records(kind=Kind.TURN, day=day, extra=extra)
        return [t for t in turns if t.state != State.SUPERSEDED]

    def days(self, user: str) -> list[date]:
        return self.user_store(user).days()

    def count(self, user: str, **filters) -> int:
        return self.user_store(user).count(**filters)

    def retrieve(
        self,
        user: str,
        query: str,
        now: datetime,
        *,
        k: int | None = None,
        config: RetrievalConfig | None = None,
        query_vector: np.ndarray | None = None,
        talk: Sequence[TalkLine] = (),
    ) -> list[Hit]:
        """The memories for ``query``; ``talk``: the conversation before it (``retrieve``)."""
        u = self.user_store(user)
        return retrieve(
            u,
            self._embed,
            self.policy_for(user),
            query,
            now,
            config or self.retrieval_config,
            k=k,
            query_vector=query_vector,
            talk=talk,
            workers=self.workers,
            tokenizer=self.tokenizer,
            second=self.second,
        )

    def talk(self, user: str, turns: Sequence[MemoryRecord]) -> list[TalkLine]:
        """Stored turns (today's, oldest first) as the conversation ``retrieve`` takes as a cue,
        each line with its stored vector (a reply whose vector is not made yet counts for
        nothing): reading them costs no embedding."""
        ids = [t.stored_id for t in turns]
        if not ids:
            return []
        u = self.user_store(user)
        messages, replies = u.vectors(ids)
        lines: list[TalkLine] = []
        for t, m, r in zip(turns, messages, replies):
            if t.query.strip():
                lines.append(TalkLine("user", t.query, m))
            if t.response.strip():
                lines.append(TalkLine("assistant", t.response, r))
        return lines

    def search_text(
        self, user: str, text: str, now: datetime, *, k: int = 20, include_archived: bool = False
    ) -> list[Hit]:
        """Search for the memory page: like retrieval, over every kind, optionally with the archived
        memories (the second tier) ranked with the rest instead of left out."""
        config = RetrievalConfig(kinds=tuple(Kind), k=k, archive_penalty=0.0 if include_archived else None)
        return self.retrieve(user, text, now, k=k, config=config)

    def embed_query(self, text: str) -> np.ndarray:
        return embed_query(self._embed, text)

    # -- forgetting ---------------------------------------------------------------------------
    def policy_for(self, user: str) -> ForgettingPolicy:
        """The forgetting policy for ``user``: the bank's, with the paces its sorts of memory
        learned (``EbbinghausPolicy.adapted``; kept in the user's meta, shared by every process)."""
        found = self._policies.get(user)
        if found is None:
            raw = self.user_store(user).meta().get(PACES_META)
            found = self._policies[user] = self.policy.adapted(json.loads(raw) if raw else {})
        return found

    def retention(self, rec: MemoryRecord, now: datetime) -> float:
        return self.policy_for(rec.user).retention(rec, now)

    def reinforce(
        self,
        user: str,
        memory_ids: Sequence[int],
        now: datetime,
        *,
        read: Mapping[int, MemoryRecord] | None = None,
        gains: Mapping[int, float] | None = None,
        competitors: Mapping[int, float] | None = None,
    ) -> list[MemoryRecord]:
        """A recall: S grows (by ``gains[id]``, relevance x confidence, else a full step) and t
        resets for each memory (those that exist); an archived memory that was recalled (a strong
        cue brought it back) is active again once its retention passes the policy's higher
        threshold. ``read``: the memories as the caller read them, by id (a turn's retrieval):
        they are not read again, and one recalled again since then is
        (``UserStore.update_forgetting``), so no recall is lost. A recall of a memory that was
        archived or about to be slows its sort's fading for this user (``_learn_paces``).
        ``competitors``: memories the cue called up beside these and did not recall, by id, with
        how close each came (0..1): with the policy's retrieval-induced forgetting on, each loses
        strength (``ForgettingPolicy.suppress``)."""
        u = self.user_store(user)
        policy = self.policy_for(user)
        ids = list(dict.fromkeys(int(i) for i in memory_ids))
        gains = gains or {}

        def recall(r: MemoryRecord) -> MemoryRecord:
            return policy.reinforce(r, now, gains.get(r.stored_id, 1.0))

        known = {} if read is None else {i: read[i] for i in ids if i in read}
        recs = {**known, **u.get_many([i for i in ids if i not in known])} if len(known) < len(ids) else known
        updated = {i: recall(r) for i, r in recs.items()}
        left = u.update_forgetting(updated.values(), read=recs if known else None)
        if left:  # recalled again since it was read (or deleted): read now and recalled once more
            again = u.get_many(left)
            for i in left:
                recs.pop(i, None)
                updated.pop(i, None)
            recs.update(again)
            updated.update({i: recall(r) for i, r in again.items()})
            u.update_forgetting([updated[i] for i in again])
        back = [i for i, r in recs.items() if r.state == State.ARCHIVED and updated[i].state == State.ACTIVE]
        if back:
            u.set_state(back, State.ACTIVE)
            u.sync()
            updated.update({i: updated[i].with_(archived_at=None) for i in back})
        self._learn_paces(user, [r for r in recs.values() if r.kind == Kind.TURN and policy.at_the_edge(r, now)])
        if competitors and getattr(policy, "competitor_loss", 0.0) > 0:
            self._suppress(user, policy, {i: w for i, w in competitors.items() if int(i) not in updated})
        return [updated[i] for i in ids if i in updated]

    def recall(
        self,
        user: str,
        used: Sequence[tuple[MemoryRecord, float]],
        reply: str,
        now: datetime,
        *,
        confirmed: Collection[int] = (),
        competitors: Mapping[int, float] | None = None,
    ) -> None:
        """A turn's recall: the memories its prompt held (as the retrieval read them, with their
        scores) gain by how well they matched and whether ``reply`` used them
        (``activation.recall_gains``); those the person confirmed (``activation.confirmed_by``)
        are validated instead (``validate``). ``competitors``: as for ``reinforce``."""
        read = {r.stored_id: r for r, _ in used if r.stored_id not in confirmed}
        if read:
            gains = recall_gains(self.tokenizer, used, reply)
            self.reinforce(user, list(read), now, read=read, gains=gains, competitors=competitors)
        if confirmed:
            self.validate(user, sorted(confirmed), now)

    def _suppress(self, user: str, policy: ForgettingPolicy, competitors: Mapping[int, float]) -> None:
        """Retrieval-induced forgetting: the competitors of a recall lose strength (only those
        still active: an archived one is already out of the cue's way)."""
        u = self.user_store(user)
        found = u.get_many([int(i) for i in competitors])
        weakened = [
            policy.suppress(r, competitors[i]) for i, r in found.items() if r.state == State.ACTIVE and not r.pinned
        ]
        changed = [r for r in weakened if r.strength != found[r.stored_id].strength]
        if changed:
            u.update_forgetting(changed, read=found)

    def _learn_paces(self, user: str, recalled: Sequence[MemoryRecord]) -> None:
        """Memories recalled after archiving or just before it: their sorts fade more slowly for
        this user from now on (once per sort and recall, bounded by the policy), logged."""
        if not recalled:
            return
        policy = self.policy_for(user)
        paces = policy.paces()
        for sort in sorted({category_of(r) for r in recalled}):
            paces[sort] = policy.slowed(sort)
        learned = self.policy.adapted(paces)
        if learned.paces() == policy.paces():
            return  # at the bound already
        log.info("forgetting paces of %s: %s -> %s", user, policy.paces(), learned.paces())
        self.user_store(user).set_meta(PACES_META, json.dumps(learned.paces()))
        self._policies[user] = learned

    def paces(self, user: str) -> dict[str, float]:
        """How fast each sort of ``user``'s memories fades now (1: the clock's pace), as learned."""
        return self.policy_for(user).paces()

    def validate(self, user: str, memory_ids: Sequence[int], now: datetime) -> list[MemoryRecord]:
        """The person confirmed these memories: a big gain, and a slower fading from then on
        (``EbbinghausPolicy.validate``); an archived one is active again."""
        u = self.user_store(user)
        policy = self.policy_for(user)
        recs = u.get_many([int(i) for i in dict.fromkeys(memory_ids)])
        updated = [policy.validate(r, now) for r in recs.values()]
        u.update_forgetting(updated)
        back = [r.stored_id for r in recs.values() if r.state == State.ARCHIVED]
        if back:
            u.set_state(back, State.ACTIVE)
            u.sync()
        self._set_core(user, confirmed=[r.stored_id for r in updated])
        return [r.with_(archived_at=None) if r.stored_id in back else r for r in updated]

    def core(self, user: str) -> list[MemoryRecord]:
        """The core tier's memories that are active: the pinned ones, then those the person
        confirmed (the latest ``CONFIRMED_KEPT``), newest first in each."""
        ids = self._core_ids(user)
        found = self.user_store(user).get_many([*ids["pinned"], *ids["confirmed"]]) if any(ids.values()) else {}
        pinned = [found[i] for i in ids["pinned"] if i in found and found[i].pinned]
        confirmed = [found[i] for i in ids["confirmed"] if i in found and not found[i].pinned]
        return [r for r in [*pinned, *confirmed] if r.state == State.ACTIVE]

    def _core_ids(self, user: str) -> dict[str, list[int]]:
        raw = self.user_store(user).meta().get(CORE_META)
        if raw is None:  # a store from before the list was kept: its pinned memories, once
            pinned = [r.stored_id for r in self.user_store(user).records(extra=False) if r.pinned]
            ids = {"pinned": pinned[::-1], "confirmed": []}
            self.user_store(user).set_meta(CORE_META, json.dumps(ids))
            return ids
        data = json.loads(raw)
        return {k: [int(i) for i in data.get(k, [])] for k in ("pinned", "confirmed")}

    def _set_core(
        self,
        user: str,
        *,
        pinned: Sequence[int] = (),
        unpinned: Sequence[int] = (),
        confirmed: Sequence[int] = (),
        gone: Sequence[int] = (),
    ) -> None:
        ids = self._core_ids(user)
        drop = {*unpinned, *gone}
        new = {
            "pinned": [*pinned, *(i for i in ids["pinned"] if i not in drop and i not in pinned)],
            "confirmed": [*confirmed, *(i for i in ids["confirmed"] if i not in gone and i not in confirmed)][
                :CONFIRMED_KEPT
            ],
        }
        if new != ids:
            self.user_store(user).set_meta(CORE_META, json.dumps(new))

    def rehearse(self, user: str, day: date, now: datetime) -> list[MemoryRecord]:
        """Consolidation as rehearsal: the day's event summary reinforces the turns it draws on.

        Each sentence of the summary is matched, by the words they share (the lexical tokens),
        with the day's turn it most resembles; a turn that gives a sentence at least two of its
        words is reinforced once, as a recall would (S grows, t resets). Needs no LLM: whoever
        wrote the summary (the day rollover's LLM, an imported file), the turns it kept are the
        ones rehearsed. Returns the reinforced turns."""
        summary = self.get_summary(user, Kind.DAILY_EVENTS, day)
        turns = [t for t in self.turns_on(user, day) if t.state == State.ACTIVE]
        if summary is None or not turns:
            return []
        drawn = sorted(t.stored_id for t in links.drawn_turns(summary.text, turns, self.tokenizer))
        if not drawn:
            return []
        # the day's turns the summary called up by its words without drawing on them: competitors
        # of the rehearsal (a share of their words in the summary), for retrieval-induced forgetting
        said = set(self.tokenizer.tokenize(summary.text))
        competitors = {}
        for t in turns:
            mine = set(self.tokenizer.tokenize(t.query or t.text))
            if t.stored_id not in drawn and mine and mine & said:
                competitors[t.stored_id] = len(mine & said) / len(mine)
        return self.reinforce(user, drawn, now, competitors=competitors)

    def forget_pass(
        self,
        user: str,
        now: datetime,
        *,
        rng: random.Random | None = None,
        dry_run: bool = False,
        policy: ForgettingPolicy | None = None,
        compressor: Compressor | None = None,
    ) -> list[ForgetDecision]:
        """Archive the active memories that the policy lets go. Global summaries never fade.
        ``policy``: another policy than the user's, in a dry run only (a shadow pass). A long turn
        is compressed before it is archived (``memory/compression.py``; with ``compress_chars``
        0, never): by ``compressor`` (a model's) when it gives a text, else extractively."""
        if policy is not None and not dry_run:
            raise ValueError("a policy other than the user's only runs beside it: dry_run=True")
        rng = rng or random.Random(0)
        u = self.user_store(user)
        policy = policy or self.policy_for(user)
        decisions = []
        # the law reads no extra fields (a turn's are kilobytes of JSON: most of a big store's
        # read); what compression needs of them it reads for the few it compresses
        for rec in u.records(state=State.ACTIVE, extra=False):
            if rec.kind.is_global:
                continue
            r = policy.retention(rec, now)
            decisions.append(ForgetDecision(rec, r, policy.forget(rec, now, rng, retention=r)))
        if not dry_run:
            self._compress(user, [d.record for d in decisions if d.archived], now, compressor)
            u.set_state([d.record.stored_id for d in decisions if d.archived], State.ARCHIVED, now)
            u.sync()
        return decisions

    def _compress(
        self, user: str, archived: Sequence[MemoryRecord], now: datetime, compressor: Compressor | None
    ) -> list[MemoryRecord]:
        """The compressed copies of the long turns among ``archived``, stored active, each carrying
        its original's activation on (``memory/compression.py``)."""
        if not self.compress:
            return []
        made: list[tuple[MemoryRecord, tuple[str, str]]] = []
        long = [rec.stored_id for rec in archived if compression.long_enough(rec, extra=False)]
        for rec in self.user_store(user).get_many(long).values():
            if not compression.long_enough(rec):
                continue
            short = (compressor(rec) if compressor else None) or compression.extractive(rec)
            if short is not None and short[0].strip():
                made.append((rec, short))
        if not made:
            return []
        copies: list[MemoryRecord] = []
        for rec, (query, response) in made:  # one at a time: each copy keeps its own extra field
            state = rec.with_(last_recall=max(now, rec.anchor))
            copies += self.add_turns(
                user,
                [(query, response, rec.created_at)],
                extra={compression.COMPRESSED_OF: rec.stored_id},
                states=[state],
                replies="later",
            )
        pairs = json.loads(self.user_store(user).meta().get(COMPRESSED_META) or "{}")
        pairs.update({str(rec.stored_id): copy.stored_id for (rec, _), copy in zip(made, copies)})
        self.user_store(user).set_meta(COMPRESSED_META, json.dumps(pairs))
        return copies

    def compressed(self, user: str) -> dict[int, int]:
        """Each compressed copy's original, by the copy's id."""
        pairs = json.loads(self.user_store(user).meta().get(COMPRESSED_META) or "{}")
        return {int(copy): int(original) for original, copy in pairs.items()}

    def pin(self, user: str, memory_id: int, pinned: bool = True) -> MemoryRecord:
        u = self.user_store(user)
        self.get(user, memory_id)
        u.set_pinned(int(memory_id), pinned)
        if pinned:
            u.set_state([int(memory_id)], State.ACTIVE)
            u.sync()
            self._set_core(user, pinned=[int(memory_id)])
        else:
            self._set_core(user, unpinned=[int(memory_id)])
        return self.get(user, memory_id)

    def archive(self, user: str, memory_id: int) -> MemoryRecord:
        """Archive one memory by hand, as forgetting would: not retrieved, kept, restorable.
        A pinned memory is unpinned (pinning would bring it straight back)."""
        u = self.user_store(user)
        rec = self.get(user, memory_id)
        if rec.pinned:
            u.set_pinned(rec.stored_id, False)
            self._set_core(user, unpinned=[rec.stored_id])
        u.set_state([rec.stored_id], State.ARCHIVED)
        u.sync()
        return self.get(user, memory_id)

    def restore(self, user: str, memory_id: int, now: datetime) -> MemoryRecord:
        """Bring an archived memory back, as if just recalled."""
        u = self.user_store(user)
        rec = self.get(user, memory_id)
        u.set_state([rec.stored_id], State.ACTIVE)
        # the person's restore: active at once, whatever the higher threshold says
        u.update_forgetting([self.policy_for(user).reinforce(rec.with_(state=State.ACTIVE), now)])
        u.sync()
        return self.get(user, memory_id)

    def delete(self, user: str, memory_ids: Sequence[int]) -> int:
        """Delete for good, with every copy of their words that the bank keeps: the rows, their
        lexical entries and vectors (the index saved without them), the entries naming them in
        other memories' records (``REFERENCES``: what a turn's prompt held), what the engine
        keeps of deleted rows (``Upkeep.erase``: SQLite's old lexical segments and its
        write-ahead log), then whatever the app keeps beside the bank (``on_delete``: prompt
        caches, pending exports).

        This is the one way a memory is deleted: a table or cache that copies a memory's words
        (a summary made of it, a link to it, a compressed copy) adds its removal here, in the
        store's ``delete`` (one transaction), or as an ``on_delete`` hook. What is derived
        from a turn in words of the model's own (its day's summaries) is the caller's to delete
        with it (``Companion.forget``)."""
        ids = [int(i) for i in memory_ids]
        if not ids:
            return 0
        u = self.user_store(user)
        pairs = json.loads(u.meta().get(COMPRESSED_META) or "{}")
        ids += [int(pairs[str(i)]) for i in ids if str(i) in pairs and int(pairs[str(i)]) not in ids]
        with self._linking:  # the worker writes no links of theirs after they are gone
            n = u.delete(ids)
        if pairs:
            gone = {str(i) for i in ids}
            kept = {o: c for o, c in pairs.items() if o not in gone and str(c) not in gone}
            if kept != pairs:
                u.set_meta(COMPRESSED_META, json.dumps(kept))
        u.sync()
        u.flush()  # the saved index, which held their vectors
        u.erase()
        self._set_core(user, gone=ids)
        for hook in list(self.on_delete):
            hook(user, ids)
        return n

    def purge_archived(self, user: str) -> int:
        """Delete every archived memory for good (a separate, explicit step)."""
        u = self.user_store(user)
        return self.delete(user, [r.stored_id for r in u.records(state=State.ARCHIVED)])
