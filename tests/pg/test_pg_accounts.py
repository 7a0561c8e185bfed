"""Accounts over PostgreSQL: what one worker writes (accounts, sessions, failed logins), every
other worker sees; names stay unique regardless of case; the schema keeps in step with SQLite's."""

from __future__ import annotations

import psycopg
import pytest
from argon2 import PasswordHasher

from siliconfriend.accounts.postgres import MIGRATIONS
from siliconfriend.accounts.rate_limit import Limits
from siliconfriend.accounts.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from siliconfriend.accounts.users import AccountError, Accounts, TooManyAttempts

FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


class Clock:
    t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def workers(pg_url):
    clock = Clock()
    a, b = (Accounts.at(pg_url, hasher=FAST, clock=clock) for _ in range(2))
    yield a, b, clock
    a.close()
    b.close()


def test_every_sqlite_migration_has_a_postgres_one():
    assert len(MIGRATIONS) == len(SQLITE_MIGRATIONS)


def test_session_from_one_worker_is_valid_on_the_other(workers, pg_url):
    a, b, _ = workers
    s = a.signup("Alice", "correct horse")
    assert b.user_for(s.token) == "Alice"
    s2 = b.login("alice", "correct horse")  # case-insensitive, back as typed
    assert s2.user == "Alice" and a.user_for(s2.token) == "Alice"
    with pytest.raises(AccountError, match="taken"):
        b.signup("ALICE", "another password")
    assert a.browser_secret() == b.browser_secret()  # a browser stays logged in on either worker
    a.set_prefs("Alice", lang="zh")
    assert b.prefs("Alice")["lang"] == "zh"
    b.logout(s.token)
    assert a.user_for(s.token) is None and a.user_for(s2.token) == "Alice"
    with psycopg.connect(pg_url) as con:  # only hashes are stored
        rows = con.execute("SELECT token_hash FROM accounts.sessions").fetchall()
        assert rows and all(s2.token not in r[0] for r in rows)
        assert con.execute("SELECT pw_hash FROM accounts.users").fetchone()[0].startswith("$argon2")


def test_failed_logins_count_across_workers(workers):
    a, b, clock = workers
    a.signup("bob", "hunter2hunter2")
    for i in range(5):
        with pytest.raises(AccountError):
            (a if i % 2 else b).login("bob", "wrong password")
    with pytest.raises(TooManyAttempts):
        a.login("bob", "hunter2hunter2")
    with pytest.raises(TooManyAttempts):
        b.login("BOB", "hunter2hunter2")
    clock.t += Limits().window_s + 1
    assert b.login("bob", "hunter2hunter2").user == "bob"


def test_rate_events_are_shared_by_the_workers(workers, pg_url):
    """The limiter's events are rows of accounts.rate_events: a wrong API key counted on one worker
    holds that client back on the other, and a deleted account's events go with it."""
    from siliconfriend.api.keys import LoginStyleLimiter, RateLimited

    a, b, _ = workers
    on_a, on_b = LoginStyleLimiter(a), LoginStyleLimiter(b)
    for _ in range(Limits().per_pair):
        on_a.check_client("9.9.9.9")
        on_a.failed("9.9.9.9")
    with pytest.raises(RateLimited):
        on_b.check_client("9.9.9.9")
    on_b.check_client("8.8.8.8")
    a.signup("erin", "erin-password")
    with pytest.raises(AccountError):
        b.login("erin", "not her password", client="7.7.7.7")
    with psycopg.connect(pg_url) as con:
        assert con.execute("SELECT count(*) FROM accounts.rate_events WHERE key LIKE 'user:erin%'").fetchone()[0]
        assert con.execute("SELECT skeleton FROM accounts.users WHERE name = 'erin'").fetchone()[0] == "erin"
    a.delete("erin")
    with psycopg.connect(pg_url) as con:
        assert not con.execute("SELECT count(*) FROM accounts.rate_events WHERE key LIKE 'user:erin|%'").fetchone()[0]


def test_an_account_deleted_on_one_worker_is_gone_on_the_other(workers):
    a, b, _ = workers
    s = a.signup("carol", "first password")
    assert b.user_for(s.token) == "carol"
    assert a.delete("carol") and not b.exists("carol") and b.users() == []


def test_api_keys_made_on_one_worker_work_on_the_other(workers):
    from siliconfriend.accounts.keys import ApiKeys

    a, b, _ = workers
    a.signup("dora", "dora-password")
    made = ApiKeys(a).create("dora", "my app")
    owner = ApiKeys(b).owner(made.key)
    assert owner is not None and owner.user == "dora"
    assert [k.id for k in ApiKeys(b).list("dora")] == [made.info.id]
    ApiKeys(b).revoke("dora", made.info.id)
    assert ApiKeys(a).owner(made.key) is None


def test_the_users_command_over_postgres(pg_url, tmp_path, monkeypatch, capsys):
    """``siliconfriend users`` on the accounts of ``database_url`` (an operator of serve-api alone)."""
    import io

    from siliconfriend.accounts.keys import ApiKeys
    from siliconfriend.cli.main import main

    monkeypatch.setenv("SILICONFRIEND_DATABASE_URL", pg_url)
    monkeypatch.setattr("siliconfriend.accounts.users.PasswordHasher", lambda: FAST)
    monkeypatch.setattr("sys.stdin", io.StringIO("zoe password\n"))
    home = str(tmp_path / "home")
    assert main(["--home", home, "users", "create", "Zoe", "--password-stdin", "--key"]) == 0
    key = capsys.readouterr().out.strip()
    worker = Accounts.at(pg_url, hasher=FAST)
    try:
        assert worker.login("zoe", "zoe password").user == "Zoe"
        assert ApiKeys(worker).owner(key).user == "Zoe"
        assert main(["--home", home, "users", "list"]) == 0
        assert capsys.readouterr().out.splitlines()[1:] == ["Zoe       1"]
        assert main(["--home", home, "users", "delete", "zoe", "--yes"]) == 0
        assert worker.users() == [] and ApiKeys(worker).owner(key) is None
    finally:
        worker.close()
    assert not (tmp_path / "home" / "accounts.db").exists()  # nothing went to the home's SQLite
