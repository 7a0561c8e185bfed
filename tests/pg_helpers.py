"""Starting a real PostgreSQL (``pgserver``) and naming its databases, for the PostgreSQL tests."""

from __future__ import annotations


def start_server(folder: str):
    """PostgreSQL 16 with pgvector in ``folder`` (as an unprivileged user when run as root)."""
    import pgserver

    return pgserver.get_server(folder, cleanup_mode="stop")


def database_url(server, name: str) -> str:
    from memory.stores.pg_db import _with_dbname

    return _with_dbname(server.get_uri(), name)
