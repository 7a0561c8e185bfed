"""SillyTavern's and Open WebUI's sessions (tests/api/app_sessions.py) over two API workers and one
PostgreSQL database, their requests going to one worker and the other in turn: each worker
follows the chat the other stored (its edits, swipes, deletions and continues), since everything
it reads is in the store."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))  # the API tests' helpers

from api_helpers import Clock, serve_api  # noqa: E402
from app_sessions import open_webui_corrections, open_webui_session, sillytavern_session  # noqa: E402

from memory.bank import MemoryBank  # noqa: E402
from memory.stores.postgres import PostgresStores  # noqa: E402


def two_workers(tmp_path, pg_url, e5_embedder):
    clock = Clock(datetime(2024, 5, 1, 19, 0))
    return [
        serve_api(tmp_path / "home", e5_embedder, clock=clock, bank=MemoryBank(PostgresStores(pg_url), e5_embedder))
        for _ in range(2)
    ]


def test_two_workers_follow_sillytavern_and_open_webui(tmp_path, pg_url, e5_embedder):
    workers = two_workers(tmp_path, pg_url, e5_embedder)
    try:
        served = [w for w, _ in workers]
        sillytavern_session(served, "pia")
        open_webui_session(served, "oda")
        open_webui_corrections(served, "ocp")
    finally:
        for _, stop in workers:
            stop()
