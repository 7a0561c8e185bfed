"""``siliconfriend migrate-store``: a home into PostgreSQL and back, identical exports, nothing
embedded again, logins kept, safe to run twice; clear errors for a bad target."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from argon2 import PasswordHasher

from memory.bank import MemoryBank
from memory.memorybank_format import export_bank
from memory.records import Kind
from memory.stores.postgres import PostgresStores
from memory.stores.sqlite import SqliteStores
from siliconfriend.accounts.users import Accounts
from siliconfriend.cli.main import main
from siliconfriend.cli.migrate_store import migrate_store
from siliconfriend.config import Settings
from siliconfriend.factory import Embedders

T0 = datetime(2024, 5, 1, 9, 0)


class CountingEmbedder:
    def __init__(self, inner):
        self.inner, self.id, self.dim, self.texts = inner, inner.id, inner.dim, 0

    def embed(self, texts, *, kind):
        self.texts += len(texts)
        return self.inner.embed(texts, kind=kind)


def test_home_to_postgres_and_back(tmp_path, pg_url, e5_embedder, monkeypatch, capsys):
    home = tmp_path / "home"
    acc = Accounts.at(home / "accounts.db", hasher=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    session = acc.signup("Amy", "amy-password")
    acc.set_prefs("Amy", lang="zh")
    acc.close()
    bank = MemoryBank(SqliteStores(home), e5_embedder)
    for i, text in enumerate(["I adopted a cat named Miso", "我周末去了鼓浪屿", "work was stressful"]):
        bank.add_turn("Amy", text, f"reply {i}", T0 + timedelta(days=i))
    bank.add_turn("bob", "my dog Rex", "good dog", T0)
    bank.delete("Amy", [bank.records("Amy", kind=Kind.TURN)[1].id])  # ids with a gap
    bank.add_turn("Amy", "a later message", "ok", T0 + timedelta(days=5))
    bank.set_summary("Amy", Kind.DAILY_EVENTS, "Amy adopted a cat.", T0, day=T0.date())
    bank.forget_pass("Amy", T0 + timedelta(days=4))
    before = export_bank(bank)
    bank.close()

    counting = CountingEmbedder(e5_embedder)
    monkeypatch.setattr("memory.embedders.create_embedder", lambda spec=None: counting)
    monkeypatch.setattr("siliconfriend.factory.create_embedder", lambda spec=None: counting)
    monkeypatch.setattr("siliconfriend.factory._embedders", Embedders())  # none made before this test
    settings = Settings(home=home)
    report = migrate_store(settings, str(home), pg_url, log=lambda s: None)
    assert report["users"] == {"Amy": "copied", "bob": "copied"} and report["accounts"] == 1
    assert counting.texts == 0  # nothing embedded again
    pg = MemoryBank(PostgresStores(pg_url), e5_embedder)
    try:
        assert export_bank(pg) == before
        hits = pg.retrieve("Amy", "a later message", T0 + timedelta(days=6), k=1)
        assert hits[0].record.query == "a later message" and hits[0].lexical > 0 and hits[0].dense > 0.9
    finally:
        pg.close()
    pg_acc = Accounts.at(pg_url)
    try:
        assert pg_acc.user_for(session.token) == "Amy"  # nobody has to log in again
        assert pg_acc.login("amy", "amy-password").user == "Amy" and pg_acc.prefs("Amy")["lang"] == "zh"
    finally:
        pg_acc.close()

    again = migrate_store(settings, str(home), pg_url, log=lambda s: None)  # safe to run again
    assert set(again["users"].values()) == {"unchanged"}

    monkeypatch.setenv("SILICONFRIEND_DATABASE_URL", pg_url)
    back = tmp_path / "back"
    assert main(["--home", str(home), "migrate-store", "--to", str(back)]) == 0
    assert "2 users (2 copied" in capsys.readouterr().out
    restored = MemoryBank(SqliteStores(back), e5_embedder)
    try:
        assert export_bank(restored) == before
        assert json.dumps(export_bank(restored), sort_keys=True) == json.dumps(before, sort_keys=True)
    finally:
        restored.close()
    assert counting.texts == 0


def test_bad_targets_are_clear(tmp_path, capsys):
    assert main(["--home", str(tmp_path / "nothing"), "migrate-store", "--to", "postgresql://x:pw@127.0.0.1:9/db"]) == 1
    err = capsys.readouterr().err
    assert "no SiliconFriend home there" in err
    (tmp_path / "h" / "users").mkdir(parents=True)
    assert main(["--home", str(tmp_path / "h"), "migrate-store", "--to", "postgresql://x:secret@127.0.0.1:9/db"]) == 1
    err = capsys.readouterr().err
    assert "not available" in err and "secret" not in err and "Traceback" not in err
