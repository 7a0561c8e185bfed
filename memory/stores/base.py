"""The store interface: what the bank and retrieval ask of a database of memories.

A ``Stores`` is one database of every user's memories (a home folder of SQLite files, a
PostgreSQL database); ``Stores.open`` gives one user's ``OpenStore``: the port, ``UserStore``
(their records, forgetting's state, the links, the two searches over them, dense and lexical,
each returning typed ``SearchHit`` values, and the pool a retrieval reads), and the engine's
``Upkeep`` (its index and files kept in shape), which only the one that opened it asks for. A
store holds its SQL and its index; the bank holds the logic (retrieval, forgetting, rehearsal,
replies' vectors) once, over either. ``tests/memory/test_store_contract.py`` runs the same
behaviours against every store.

Beside it, what every store does the same way, each in its module: a memory as a row
(``rows.py``), the lexical document of a memory (``documents.py``), the references a deletion
rewrites (``references.py``), the links as a read gives them (``edges.py``), the reads written
once over the engines' SQL (``record_reads.py``). Here too: the folder-safe key of a user name.
"""

from __future__ import annotations

import enum
import hashlib
import re
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence

import numpy as np

from ..lexical import Tokenizer
from ..records import Kind, MemoryRecord, State

MAX_USERNAME = 64

# the two vectors a memory can have: its own (a turn's user message, a summary's text) and a
# turn's reply
VECTOR, REPLY_VECTOR = "vector", "reply_vector"
VECTOR_COLUMNS = (VECTOR, REPLY_VECTOR)
# the same two of the second reader (``RetrievalConfig.second_reader_below``): kept beside the
# memory, never indexed (retrieval reads them for the pool's members only)
SECOND_VECTOR, SECOND_REPLY_VECTOR = "second_vector", "second_reply_vector"
SECOND_COLUMNS = (SECOND_VECTOR, SECOND_REPLY_VECTOR)


class StoreUnavailable(RuntimeError):
    """The database cannot be used now (unreachable, stopped, refused). The message says why and
    names the server without its password; nothing half-written was committed."""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer SiliconFriend than this one."""


def is_postgres_url(url: str | None) -> bool:
    """Whether ``url`` names a PostgreSQL database (told without importing its client)."""
    return url is not None and url.split(":", 1)[0] in ("postgresql", "postgres")


class Side(str, enum.Enum):
    """Which side of a memory a search hit matched."""

    OWN = "own"  # its own vector: a turn's message, a summary's text
    REPLY = "reply"  # a turn's reply vector
    WORDS = "words"  # the lexical side (BM25 over its words)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A search's match: the memory's id, the side that matched, and the score (inner product on
    the dense side, BM25 on the lexical side: higher is better)."""

    id: int
    side: Side
    score: float


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A turn next to a retrieval candidate (``UserStore.pool``): its place, and whether it has a
    reply (a reply that is not blank). Its words are never shown: it lends its scores to the
    candidates beside it, so no record is made of it."""

    id: int
    day: date
    position: int
    replied: bool


@dataclass(frozen=True)
class PoolRows:
    """What a retrieval reads of its candidates (``UserStore.pool``): their records, the turns
    next to each candidate turn, and each one's cosines with the retrieval's cues, at row
    ``row[id]`` of ``cosines``: (own, reply), each (rows, cues); own is 0 where a memory has no
    vector, reply NaN where it has no reply vector."""

    found: dict[int, MemoryRecord]  # the memories of the ids asked for that exist
    beside: list[Neighbour]  # (day, position, id) order, either tier
    row: dict[int, int]
    cosines: tuple[np.ndarray, np.ndarray]

    def joined(self, other: "PoolRows") -> "PoolRows":
        """What one ``pool`` call over both calls' ids gives: the records and neighbours of both,
        each once, in the order a store reads them (records by (day, kind, position, id),
        neighbours by (day, position, id))."""
        found = {**self.found, **other.found}
        order = sorted(found.values(), key=lambda r: (r.day, r.kind.value, r.position, r.stored_id))
        beside = {n.id: n for n in [*self.beside, *other.beside]}
        n = len(self.cosines[0])  # rows, not ids: parts that share memories hold some rows twice
        (own, reply), (more_own, more_reply) = self.cosines, other.cosines
        return PoolRows(
            {r.stored_id: r for r in order},
            sorted(beside.values(), key=lambda b: (b.day, b.position, b.id)),
            {**{rid: n + i for rid, i in other.row.items()}, **self.row},
            (np.concatenate([own, more_own]), np.concatenate([reply, more_reply])),
        )


@dataclass(frozen=True, slots=True)
class Link:
    """An edge between two memories, written when they are stored (``memory/links.py``):
    ``kind`` (``memory.links.SUMMARY``, ``CONVERSATION``, ``SIMILAR``) and ``weight`` in (0, 1].
    Read in both directions."""

    src: int
    dst: int
    kind: str
    weight: float


# a summary's count of the turns it drew on that were deleted (``Edge``): what it hangs on is gone
GONE = "gone"


@dataclass(frozen=True, slots=True)
class Edge:
    """A link as a read finds it (``UserStore.links``), from one of the memories asked about
    (``src``) to another (``dst``), with the other's state: a memory that left active memory
    passes nothing along it. An entity's link (kind ``"entity"``) is made at the read from the
    memories' mentions: its ``label`` is the entity as it was written, its ``weight`` the
    entity's ``memory.entities.rarity`` over the user's memories. A daily summary that drew on
    turns since deleted has an edge to itself of kind ``GONE`` whose weight is how many."""

    src: int
    dst: int
    kind: str
    weight: float
    state: State
    label: str = ""


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity a memory names (``memory.entities.Entity``): its key, as it was written, its kind."""

    key: str
    text: str
    kind: str


def user_key(user: str) -> str:
    """A folder-safe key for a user: a readable slug plus a hash of the exact name. Also what
    tells a valid user name (1..64 characters, not blank) from one that is not."""
    if not user or not user.strip() or len(user) > MAX_USERNAME:
        raise ValueError(f"a user name must be 1..{MAX_USERNAME} characters, not blank")
    slug = re.sub(r"[^a-z0-9]+", "-", user.lower()).strip("-")[:24]
    digest = hashlib.sha256(user.encode("utf-8")).hexdigest()[:16]
    return f"{slug}-{digest}" if slug else digest


# fmt: off
class UserStore(Protocol):
    """The port: all memories of one user, as the bank, retrieval, forgetting and the links use them.
    How fast each call is, is the engine's business; nothing here says how it stores or searches."""

    user: str
    dim: int

    # -- records in (each call one transaction)
    def insert(self, records: Sequence[MemoryRecord], vectors: np.ndarray | None, *, keep_ids: bool = False) -> list[MemoryRecord]:
        """The records stored with their ids (a turn at the day's next free place; ``keep_ids``: a copy's)."""
    def replace_text(self, rid: int, text: str, vector: np.ndarray | None, **fields: Any) -> None:
        """An edited memory's new words (and vector and ``fields``): its lexical entry follows."""
    def set_vectors(self, ids: Sequence[int], vectors: np.ndarray | None, *, column: str = VECTOR) -> None:
        """One of ``VECTOR_COLUMNS`` or ``SECOND_COLUMNS`` written (None: cleared, for the reply worker to make again)."""
    def set_pinned(self, rid: int, pinned: bool) -> bool:
        """A person's pin: the memory is kept whatever forgetting says."""
    def delete(self, ids: Sequence[int]) -> int:
        """Rows, lexical entries, vectors and links gone, and the entries naming them (``references.py``)."""

    # -- records out
    def get_many(self, ids: Iterable[int]) -> dict[int, MemoryRecord]:
        """The memories of ``ids`` that exist, by id."""
    def records(self, *, kind: Kind | None = None, state: State | None = None, day: date | None = None, days: Sequence[date] | None = None,
                limit: int | None = None, offset: int = 0, newest_first: bool = False, extra: bool = True,
                importance_at_least: float | None = None) -> list[MemoryRecord]:
        """In (day, kind, position, id) order (``newest_first``: reversed); ``extra`` False: extra fields left unread;
        ``importance_at_least``: only those rated that high (the few worth bringing up, not every row built)."""
    def count(self, *, kind: Kind | None = None, state: State | None = None) -> int:
        """How many memories of ``kind`` and ``state`` (any where None)."""
    def days(self) -> list[date]:
        """The days that have turns, oldest first (the memory page's calendar, the summaries' to-do)."""
    def vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(own, reply) vectors of ``ids`` in their order, zeros where none (the conversation's cue)."""
    def extra_at(self, ids: Sequence[int], path: Sequence[str]) -> dict[int, str]:
        """The text at ``path`` in the extra fields of ``ids``: one field of many rows, not the rows."""
    def replies_pending(self, limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, reply) of turns whose reply has no vector yet, oldest first: the reply worker's queue."""
    def second_vectors(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(own, reply) second-reader vectors of ``ids`` in their order, rows of NaN where none."""
    def second_pending(self, limit: int = 10_000) -> list[int]:
        """Memories lacking a second-reader vector (their own, or a turn's reply's), oldest first."""

    # -- forgetting's state
    def update_forgetting(self, records: Iterable[MemoryRecord], *, read: Mapping[int, MemoryRecord] | None = None) -> list[int]:
        """Strength and recall written; where a row no longer matches ``read``, left and its id returned."""
    def set_state(self, ids: Sequence[int], state: State, when: datetime | None = None) -> int:
        """Archived (at ``when``) or back in active memory; both tiers stay searchable."""

    # -- links between memories (``memory/links.py``)
    def write_links(self, mentions: Sequence[tuple[int, Sequence[Mention]]], ids: Sequence[int] = (), kind: str = "", links: Sequence[Link] = ()) -> None:
        """Each memory's entities (``mentions``) replaced, and the ``kind`` edges of ``ids`` replaced by ``links``."""
    def links(self, ids: Sequence[int], *, max_share: float, limit: int) -> list[Edge]:
        """Edges of ``ids`` both ways, written and by shared entities, ``limit`` a memory (``heaviest``)."""

    # -- the searches (both tiers) and the pool a retrieval reads
    def dense(self, query: np.ndarray, k: int, *, distinct: int | None = None, helpers: Executor | None = None) -> list[SearchHit]:
        """The ``k`` vectors (own, replies') nearest ``query``, best first; a side may stop past ``distinct`` memories."""
    def lexical(self, terms: Sequence[str], limit: int) -> list[SearchHit]:
        """The best ``limit`` memories sharing a term with ``terms``, by BM25 (``memory/bm25.py``)."""
    def documents_with(self, terms: Sequence[str]) -> tuple[int, list[int]]:
        """How many memories the lexical side holds, and how many hold each of ``terms`` (BM25's IDF)."""
    def pool(self, ids: Iterable[int], cues: Callable[[], np.ndarray]) -> PoolRows:
        """The memories of ``ids``, the turns beside them, their cosines with ``cues()`` (which may wait)."""

    # -- the user's small values, and the end
    def meta(self) -> dict[str, str]:
        """The values the bank keeps beside the memories (the embedder's id, learned paces...)."""
    def set_meta(self, key: str, value: str) -> None:
        """One of them written."""
    def close(self, *, save: bool = True) -> None:
        """Done with it (``save`` False: what the process keeps is rebuilt later rather than written now)."""
# fmt: on


class Upkeep(Protocol):
    """What an engine does to keep its index and files in shape: off the port, asked for by the one
    that opened the store (the bank, at the times each says; the CLI's copy)."""

    def sync(self) -> None:
        """After writes: the dense index catches up with them (FAISS; a big user's HNSW graph made)."""

    def flush(self) -> None:
        """What the process keeps of the index saved (nothing where the database holds it)."""

    def settle(self) -> None:
        """What the store builds in the background waited for."""

    def tidy(self) -> None:
        """Upkeep off a turn's clock, after the reply worker's writes (SQLite's log checkpointed)."""

    def erase(self) -> None:
        """What the engine keeps of deleted rows (old lexical segments, a log) erased where it can be."""


class OpenStore(UserStore, Upkeep, Protocol):
    """What ``Stores.open`` gives: the port, and its engine's upkeep for the one that opened it."""


class Stores(Protocol):
    """One database of every user's memories. ``tokenizer``: what its lexical documents are made
    with (the bank searches with the same)."""

    tokenizer: Tokenizer

    def open(self, user: str, *, dim: int, vectors_id: str) -> OpenStore:
        """``user``'s store (made if missing); ``dim`` and ``vectors_id``: the embedder's."""
        ...

    def users(self) -> list[str]: ...
    def has_user(self, user: str) -> bool: ...
    def delete_user(self, user: str) -> None:
        """Every memory of ``user``, gone for good (the caller has closed its store)."""
        ...

    def exclusive(self, user: str, purpose: str) -> ContextManager:
        """A lock on ``user`` for ``purpose`` (the day rollover) held across processes."""
        ...

    def close(self) -> None: ...
