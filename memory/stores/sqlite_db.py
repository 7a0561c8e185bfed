"""SQLite plumbing shared by the memory store and the accounts database: a connection in WAL
mode that several threads and processes can use, and write transactions that either commit
whole or leave the old state."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def connect(path: Path | str, *pragmas: str, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL journal, waiting up to
    ``timeout`` seconds for another writer; ``pragmas`` are extra ``PRAGMA`` settings."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=timeout, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    for pragma in pragmas:
        db.execute(f"PRAGMA {pragma}")
    return db


@contextmanager
def immediate_transaction(db: sqlite3.Connection, lock: threading.RLock) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT under ``lock``; rolled back on any error."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def run_script(db: sqlite3.Connection, script: str) -> None:
    """The statements of ``script`` one by one, inside the caller's transaction (executescript
    would commit first)."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)
