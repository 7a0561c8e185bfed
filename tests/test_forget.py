"""Deleting a memory deletes its words everywhere they went: the memory, the records of other
turns' prompts that held it (the memories used, today's lines), the summaries written from it,
the lexical index, the saved vector index, SQLite's free pages and write-ahead log, and the
PostgreSQL tables. Each test deletes a memory holding unique words through the companion
(what the memory page, the chat page and the API call) and then looks for them in every byte
of the data home and, on PostgreSQL, in every row of every table."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fakes import Clock

from memory.bank import MemoryBank, UnknownMemory
from memory.records import Kind
from memory.stores.sqlite import SqliteStores
from siliconfriend.bench.turns import InstantBackend
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion

DAY1 = datetime(2024, 5, 1, 19, 30)
DAY2 = datetime(2024, 5, 2, 20, 0)
SECRET = "Zorblaxify"  # a word nothing else says
SECRET_ZH = "鑫淼焱"


def found_in_home(home: Path) -> list[str]:
    """The files under ``home`` that hold either secret word, in any case."""
    words = [SECRET.lower().encode(), SECRET_ZH.encode()]
    hits = []
    for path in home.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            hits += [f"{path.relative_to(home)}: {w.decode()}" for w in words if w in data]
    return hits


def found_in_database(url: str) -> list[str]:
    """The tables of the PostgreSQL database at ``url`` whose rows hold either secret word."""
    import psycopg
    from psycopg import sql

    hits = []
    with psycopg.connect(url) as con:
        tables = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            rows = con.execute(
                sql.SQL("SELECT t::text FROM {}.{} t").format(sql.Identifier(schema), sql.Identifier(table))
            ).fetchall()
            text = "\n".join(r[0] for r in rows).lower()
            hits += [f"{schema}.{table}: {w}" for w in (SECRET.lower(), SECRET_ZH) if w in text]
    return hits


@pytest.fixture(params=("sqlite", "postgres"))
def engine(request, tmp_path, e5_embedder):
    """(bank, home, database url or None) of each engine."""
    home = tmp_path / "home"
    if request.param == "postgres":
        from memory.stores.postgres import PostgresStores

        url = request.getfixturevalue("pg_url")
        bank = MemoryBank(PostgresStores(url), e5_embedder)
    else:
        url = None
        bank = MemoryBank(SqliteStores(home), e5_embedder)
    yield bank, home, url
    bank.close()


def talk(companion: Companion, backend: InstantBackend, user: str, text: str, reply: str):
    backend.reply = reply
    stream = companion.respond(user, text)
    list(stream)
    assert stream.result is not None and stream.result.error is None
    return stream.result


def test_a_deleted_turn_leaves_no_word_behind(engine, tmp_path):
    bank, home, url = engine
    clock = Clock(DAY1)
    backend = InstantBackend()
    companion = Companion(bank, backend, settings=Settings(home=home), clock=clock)
    first = talk(
        companion, backend, "alice", f"My cat is called {SECRET} and my grandmother calls her {SECRET_ZH}.", "Cute!"
    )
    talk(companion, backend, "alice", "I have an exam on Friday.", "Good luck with it.")
    talk(companion, backend, "alice", "What should I cook tonight?", "Maybe pasta.")
    # the day as the rollover would have written it, from the turn with the secret
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):
        bank.set_summary("alice", kind, f"Alice's cat is {SECRET} ({SECRET_ZH}).", DAY2, day=DAY1.date())
    bank.set_summary("alice", Kind.GLOBAL_EVENTS, f"Alice has a cat called {SECRET}.", DAY2)
    clock.now = DAY2
    later = talk(companion, backend, "alice", "Tell me about my cat and what my grandmother calls her.", "Of course.")
    bank.settle()
    # the records of the prompts held it: today's lines on day 1, the memories used on day 2
    turns = bank.turns_on("alice", DAY1.date())
    assert any(e["id"] == first.turn.id for e in turns[1].extra["today"])
    assert any(SECRET in e["text"] for e in bank.get("alice", later.turn.id).extra["used"])

    assert companion.forget("alice", [first.turn.id]) == 1
    with pytest.raises(UnknownMemory):
        bank.get("alice", first.turn.id)
    assert bank.get_summary("alice", Kind.DAILY_EVENTS, DAY1.date()) is None
    assert bank.get_summary("alice", Kind.GLOBAL_EVENTS) is None
    left = bank.turns_on("alice", DAY1.date())
    assert [t.query for t in left] == ["I have an exam on Friday.", "What should I cook tonight?"]
    assert all(e["id"] != first.turn.id for e in bank.get("alice", later.turn.id).extra["used"])
    assert all(e["id"] != first.turn.id for t in left for e in t.extra["today"])
    assert any(e["text"] == "I have an exam on Friday." for e in left[1].extra["today"])  # the rest is kept
    assert not any(SECRET.lower() in h.record.text.lower() for h in bank.search_text("alice", SECRET, DAY2, k=10))

    assert found_in_home(home) == []
    if url is not None:
        assert found_in_database(url) == []


def test_the_words_are_gone_from_a_big_sqlite_store_too(bank, tmp_path):
    """Past many memories the lexical table has many segments, and a deleted row's terms sit in
    old ones; the write-ahead log holds the pages as they were."""
    home = tmp_path / "home"
    start = datetime(2024, 1, 1, 9, 0)
    bank.add_turns(
        "bob",
        [
            (f"Note {i}: the weather was fine and I walked {i} steps.", "Nice.", start + timedelta(minutes=i))
            for i in range(300)
        ],
    )
    secret = bank.add_turn("bob", f"My locker code word is {SECRET}.", "I will remember.", start + timedelta(hours=9))
    bank.add_turns(
        "bob",
        [(f"Later note {i}: more walking.", "Good.", start + timedelta(hours=10, minutes=i)) for i in range(50)],
    )
    bank.settle()
    assert found_in_home(home)  # the word is there before
    bank.delete("bob", [secret.id])
    assert found_in_home(home) == []
