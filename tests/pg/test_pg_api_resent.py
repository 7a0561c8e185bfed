"""Two API workers over one PostgreSQL database keep one turn per message: a chat app's regenerate
and edit reach another worker than the turn they touch, and a task prompt stores nothing there
either (the rules themselves: tests/api/test_chat_apps.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))  # the API tests' helpers

from api_helpers import Clock, client, serve_api  # noqa: E402
from frontend_requests import owui_tasks  # noqa: E402

from memory.bank import MemoryBank  # noqa: E402
from memory.records import Kind, State  # noqa: E402
from memory.stores.postgres import PostgresStores  # noqa: E402


def test_two_workers_regenerate_and_edit(tmp_path, pg_url, e5_embedder):
    from datetime import datetime

    clock = Clock(datetime(2024, 5, 1, 19, 0))
    workers = [
        serve_api(tmp_path / "home", e5_embedder, clock=clock, bank=MemoryBank(PostgresStores(pg_url), e5_embedder))
        for _ in range(2)
    ]
    try:
        (a, _), (b, _) = workers
        key = a.signup("pia")
        sa, sb = client(a, key), client(b, key)
        chat = [{"role": "user", "content": "I play the cello."}]
        chat.append(
            {
                "role": "assistant",
                "content": sa.chat.completions.create(model="m", messages=chat).choices[0].message.content,
            }
        )
        chat.append({"role": "user", "content": "I practise every morning."})
        first = sa.chat.completions.create(model="m", messages=chat).model_extra["siliconfriend"]["turn_id"]
        # worker b: Open WebUI's title task, then a regenerate of the turn worker a stored
        sb.chat.completions.create(model="m", messages=owui_tasks(chat)["title"])
        b.backend.variant = " (again)"
        again = sb.chat.completions.create(model="m", messages=chat)
        assert (
            again.model_extra["siliconfriend"]["regenerated"] and again.model_extra["siliconfriend"]["turn_id"] == first
        )
        # worker a: the same message edited
        edited = sa.chat.completions.create(
            model="m", messages=[*chat[:2], {"role": "user", "content": "I practise every evening."}]
        )
        assert edited.model_extra["siliconfriend"]["supersedes"] == first
        turns = b.api.bank.records("pia", kind=Kind.TURN)
        assert [(t.query, t.state) for t in turns] == [
            ("I play the cello.", State.ACTIVE),
            ("I practise every morning.", State.SUPERSEDED),
            ("I practise every evening.", State.ACTIVE),
        ]
        assert turns[1].response.endswith("(again)") and turns[1].extra["superseded"]["reason"] == "edited"
    finally:
        for _, stop in workers:
            stop()
