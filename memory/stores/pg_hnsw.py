"""The partial HNSW indexes of a PostgreSQL database's big users: one graph per user and vector
column (``WHERE owner = '...'``), so that one user's search never walks another user's graph and
never loses hits to a filter. Built concurrently in the background once a user has ``hnsw_min``
memories; searches are exact until the graph is valid."""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from psycopg import sql

from .pg_db import Database, one

log = logging.getLogger(__name__)

HNSW_MIN = 20_000  # active vectors from which a user gets a partial HNSW index
HNSW_EF_SEARCH = 100  # candidates the graph search keeps (>= the 40 retrieval asks for)


def hnsw_index_name(user: str) -> str:
    return "mem_hnsw_" + hashlib.sha256(user.encode("utf-8")).hexdigest()[:24]


class HnswIndexes:
    """Which users have their graphs, and their builds (part of ``PostgresStores``)."""

    def __init__(self, db: Database, hnsw_min: int = HNSW_MIN, build_hnsw_in_background: bool = True):
        self.db = db
        self.hnsw_min = hnsw_min
        self.build_hnsw_in_background = build_hnsw_in_background
        self._lock = threading.Lock()
        self._hnsw_checked: dict[str, float] = {}
        self._hnsw_users: set[str] = set()
        self._hnsw_building: set[str] = set()

    def forget_hnsw(self, user: str) -> None:
        """``user``'s graphs dropped (the user is deleted)."""
        with self._lock:
            self._hnsw_checked.pop(user, None)
            self._hnsw_users.discard(user)
        for name in (hnsw_index_name(user), hnsw_index_name(user) + "_r", hnsw_index_name(user) + "_s"):
            self.db.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))

    def has_hnsw(self, user: str) -> bool:
        """Whether ``user`` has a valid (completely built) partial HNSW index."""
        names = [hnsw_index_name(user), hnsw_index_name(user) + "_r"]
        row = self.db.fetchone(
            "SELECT count(*) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
            " WHERE c.relname = ANY(%s) AND i.indisvalid",
            (names,),
        )
        found = row is not None and int(row[0]) == len(names)
        with self._lock:
            (self._hnsw_users.add if found else self._hnsw_users.discard)(user)
        return found

    def uses_hnsw(self, user: str) -> bool:
        """Whether searches of ``user`` go through their HNSW index (as last checked; see
        ``maybe_build_hnsw``, which every write calls)."""
        return user in self._hnsw_users

    def maybe_build_hnsw(self, user: str, dim: int, *, wait: bool = False) -> bool:
        """Give ``user`` a partial HNSW index once they have ``hnsw_min`` active vectors (checked
        at most once a minute per user). Built concurrently: writes go on meanwhile, and searches
        are exact until it is ready. Returns whether a build was started."""
        now = time.monotonic()
        with self._lock:
            if user in self._hnsw_building or now - self._hnsw_checked.get(user, -1e9) < 60:
                return False
            self._hnsw_checked[user] = now
        if self.has_hnsw(user) or self._count(user) < self.hnsw_min:
            return False
        with self._lock:
            if user in self._hnsw_building:
                return False
            self._hnsw_building.add(user)
        if wait or not self.build_hnsw_in_background:
            self._build_hnsw(user, dim)
        else:
            threading.Thread(target=self._build_hnsw, args=(user, dim), daemon=True, name="sf-hnsw").start()
        return True

    def _count(self, user: str) -> int:
        return int(one(self.db.fetchone("SELECT count(*) FROM memories WHERE owner = %s", (user,)))[0])

    def _build_hnsw(self, user: str, dim: int) -> None:
        name = hnsw_index_name(user)
        try:
            with self.db.advisory_lock(f"siliconfriend:hnsw:{user}"):  # one worker builds it
                if self.has_hnsw(user):
                    return
                log.info("building the HNSW indexes of %s", user)
                with self.db.connection() as con:
                    con.execute("SET maintenance_work_mem = '256MB'")
                    for index_name, table, column in (
                        (name + "_r", "memories", "reply_embedding"),
                        (name, "memories", "embedding"),
                    ):
                        con.execute(
                            sql.SQL(
                                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} USING hnsw"
                                " (({col}::vector({dim})) vector_ip_ops) WHERE owner = {owner}"
                            ).format(
                                name=sql.Identifier(index_name),
                                table=sql.Identifier(table),
                                col=sql.Identifier(column),
                                dim=sql.Literal(int(dim)),
                                owner=sql.Literal(user),
                            )
                        )
                    con.execute("RESET maintenance_work_mem")
                    con.execute("ANALYZE memories")
                self.has_hnsw(user)
        except Exception as exc:  # searches stay exact; tried again at a later check
            log.warning("HNSW index of %s not built: %s", user, exc)
            with self._lock:
                self._hnsw_checked.pop(user, None)
        finally:
            with self._lock:
                self._hnsw_building.discard(user)
