"""PostgreSQL plumbing shared by the memory store and the app's accounts: a psycopg 3 connection
pool with pgvector's types, ordered versioned migrations per component, and the errors an
operator reads (a wrong URL, an unreachable or stopped server, a missing pgvector, a database
made by a newer SiliconFriend) instead of a stack trace.

Every statement runs on a pooled connection in autocommit mode; a write is one
``with db.transaction() as cur:`` block that commits whole or not at all.
"""

from __future__ import annotations

import logging
import re
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import psycopg
import psycopg.sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..message import Message
from .base import SchemaTooNew, StoreUnavailable, is_postgres_url

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
PGVECTOR_HELP = (
    "the PostgreSQL server has no pgvector extension. Install it on the database server "
    "(Debian/Ubuntu with the PGDG repository: apt install postgresql-16-pgvector; macOS: brew install pgvector; "
    "Docker: the pgvector/pgvector:pg16 image; RDS, Cloud SQL, Supabase and Neon ship it), then run "
    "CREATE EXTENSION vector; once in this database as a user allowed to (or let SiliconFriend do it "
    "as the database owner)"
)


__all__ = ["Database", "SchemaTooNew", "StoreUnavailable", "is_postgres_url", "redact", "scratch_database"]


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


def one(row: tuple | None) -> tuple:
    """The row of a query that always returns one (an aggregate, an upsert's RETURNING)."""
    if row is None:
        raise RuntimeError("the database returned no row where a query always returns one")
    return row


DATABASE_DOWN = Message(
    "store.database_down",
    en="the database at {where} is not available ({reason}); nothing was lost: what was saved before is "
    "still there, try again when it is back",
    zh="数据库（{where}）暂时不可用（{reason}）；什么都没有丢：之前保存的都还在，等它恢复后再试。",
)


def _unavailable(url: str, exc: BaseException) -> StoreUnavailable:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreUnavailable(DATABASE_DOWN(where=redact(url), reason=reason))


class Database:
    """A pool of connections to one PostgreSQL database (thread-safe). ``configure`` is run on each
    new connection (pgvector's type adapters are registered when ``vectors`` is true).

    ``wait_for_flush``: whether a commit waits until the server has flushed it to disk (the
    server's default). Without it (``synchronous_commit = off`` on the pool's connections) a
    commit returns once written: a crash of the server or its machine may lose the last moments'
    commits (at most three WAL writer delays, 0.6 s by default), never leave half of one or a
    damaged database; a crash of the app loses nothing. ``settings``: server settings (name:
    value) every connection of the pool starts with, for statements that need them."""

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        vectors: bool = True,
        timeout_s: float = 10.0,
        schema: str | None = None,
        wait_for_flush: bool = True,
        settings: dict[str, str] | None = None,
    ):
        if not is_postgres_url(url):
            raise ValueError(
                f"not a PostgreSQL URL: {redact(url)!r} (expected postgresql://user:password@host:port/database)"
            )
        try:
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"malformed database URL {redact(url)!r}: {str(exc).strip()}") from None
        self.url = url
        self.vectors = vectors
        self.schema = schema
        self.wait_for_flush = wait_for_flush
        self.settings = dict(settings or {})
        self._check_reachable()
        if vectors:
            self._ensure_pgvector()
        if schema:
            self._ensure_schema(schema)
        self.pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=self._configure,
            open=True,
            name="siliconfriend",
        )
        self._closed = False
        self._lock = threading.Lock()

    # -- opening ------------------------------------------------------------------------------
    def _check_reachable(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as con:
                con.execute("SELECT 1")
        except psycopg.Error as exc:
            raise _unavailable(self.url, exc) from None

    def _ensure_pgvector(self) -> None:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as con:
            if con.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
                return
            if not con.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
                raise StoreUnavailable(f"{redact(self.url)}: {PGVECTOR_HELP}")
            try:
                con.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.errors.UniqueViolation:
                return  # another worker opening the same database at the same moment enabled it
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"{redact(self.url)}: pgvector is installed on the server but not enabled "
                    f"in this database, and this user may not enable it ({str(exc).strip()}): "
                    "run CREATE EXTENSION vector; as the database owner or a superuser"
                ) from None

    def _ensure_schema(self, schema: str) -> None:
        """Once, before the pool opens its connections side by side (each creating it would race)."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as con:
            try:
                con.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(schema)))
            except psycopg.errors.UniqueViolation:
                pass  # another worker opening the same database at the same moment created it

    def _configure(self, con: psycopg.Connection) -> None:
        if not self.wait_for_flush:
            con.execute("SET synchronous_commit = off")
        for name, value in self.settings.items():
            con.execute("SELECT set_config(%s, %s, false)", (name, value))
        if self.schema:  # this component's tables in a schema of their own
            con.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(psycopg.sql.Identifier(self.schema)))
        if self.vectors:
            from pgvector.psycopg import register_vector

            register_vector(con)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.pool.close()

    # -- running ------------------------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        try:
            with self.pool.connection() as con:
                yield con
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            # connections are not tested at every checkout (a round trip each, a tenth of a turn);
            # after a failure the pool drops every broken one, so that a restarted server is used
            # again at once
            try:
                self.pool.check()
            except Exception:  # noqa: BLE001 - the error below is what the caller needs
                pass
            raise _unavailable(self.url, exc) from None

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor]:
        """One transaction: commits when the block ends, rolls back on any error."""
        with self.connection() as con:
            with con.transaction():
                with con.cursor() as cur:
                    yield cur

    def fetchall(self, sql, params: Sequence | dict = (), *, binary: bool = False) -> list[tuple]:
        """``binary``: results in PostgreSQL's binary format (vectors arrive as float32s, not as
        text to parse: ~10x less time per vector)."""
        with self.connection() as con:
            return con.execute(sql, params, binary=binary).fetchall()

    def fetchone(self, sql, params: Sequence | dict = ()) -> tuple | None:
        with self.connection() as con:
            return con.execute(sql, params).fetchone()

    def execute(self, sql, params: Sequence | dict = ()) -> int:
        with self.connection() as con:
            return con.execute(sql, params).rowcount

    # -- schema -------------------------------------------------------------------------------
    def migrate(self, component: str, migrations: Sequence[Callable[[psycopg.Cursor], None]]) -> int:
        """Apply ``component``'s migrations that this database lacks, in order, each in one
        transaction, under an advisory lock (two workers starting at once migrate once). A
        database of a newer version than ``migrations`` knows is refused. Returns the version."""
        with self.transaction() as cur:
            # the lock comes first: two workers creating the version table of a new database at
            # once would otherwise collide in the catalogue (IF NOT EXISTS does not serialise them)
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('sf_schema'))")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS public.sf_schema (component TEXT PRIMARY KEY,"
                " version INTEGER NOT NULL, migrated_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            row = cur.execute("SELECT version FROM public.sf_schema WHERE component = %s", (component,)).fetchone()
            version = row[0] if row else 0
            if version > len(migrations):
                raise SchemaTooNew(
                    f"the {component} schema in {redact(self.url)} is version {version}, newer than this "
                    f"SiliconFriend knows ({len(migrations)}): upgrade SiliconFriend (every worker) before using it"
                )
            for i, step in enumerate(migrations[version:], start=version + 1):
                step(cur)
                cur.execute(
                    "INSERT INTO public.sf_schema (component, version) VALUES (%s, %s) ON CONFLICT (component)"
                    " DO UPDATE SET version = EXCLUDED.version, migrated_at = now()",
                    (component, i),
                )
                log.info("%s schema migrated to version %d", component, i)
            return max(version, len(migrations))

    @contextmanager
    def advisory_lock(self, name: str) -> Iterator[None]:
        """A lock held across processes and machines while the block runs (a session-level
        advisory lock on a connection kept for the purpose)."""
        with self.connection() as con:
            con.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (name,))
            try:
                yield
            finally:
                try:
                    con.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,))
                except psycopg.Error:
                    pass  # a lost connection releases its locks by itself


def run_statements(cur: psycopg.Cursor, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            cur.execute(statement)


@contextmanager
def scratch_database(url: str, *, prefix: str = "sf_scratch") -> Iterator[str]:
    """A new empty database on the server of ``url`` (its URL), dropped when the block ends."""
    import secrets

    name = f"{prefix}_{secrets.token_hex(6)}"
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise _unavailable(url, exc) from None
    with admin:
        try:
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise StoreUnavailable(
                f"{redact(url)}: this user may not create a scratch database (needs CREATEDB)"
            ) from None
        try:
            yield psycopg.conninfo.make_conninfo(url, dbname=name) if "://" not in url else _with_dbname(url, name)
        finally:
            admin.execute(
                psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name))
            )


def _with_dbname(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead (query parameters such as host= kept)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
