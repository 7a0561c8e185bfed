"""Accounts over PostgreSQL: what one worker writes (accounts, sessions, failed logins), every
other worker sees; names stay unique regardless of case; the schema keeps in step with SQLite's."""
from __future__ import annotations

import psycopg
import pytest
from argon2 import PasswordHasher

from siliconfriend.web.accounts import _MIGRATIONS as SQLITE_MIGRATIONS, AccountError, TooManyAttempts
from siliconfriend.web.accounts_pg import MIGRATIONS, PgAccounts

FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


class Clock:
    t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def workers(pg_url):
    clock = Clock()
    a, b = (PgAccounts(pg_url, hasher=FAST, clock=clock) for _ in range(2))
    yield a, b, clock
    a.close()
    b.close()


def test_every_sqlite_migration_has_a_postgres_one():
    assert len(MIGRATIONS) == len(SQLITE_MIGRATIONS)


def test_session_from_one_worker_is_valid_on_the_other(workers, pg_url):
    a, b, _ = workers
    s = a.signup("Alice", "correct horse")
    assert b.user_for(s.token) == "Alice"
    s2 = b.login("alice", "correct horse")            # case-insensitive, back as typed
    assert s2.user == "Alice" and a.user_for(s2.token) == "Alice"
    with pytest.raises(AccountError, match="taken"):
        b.signup("ALICE", "another password")
    a.set_prefs("Alice", lang="zh")
    assert b.prefs("Alice")["lang"] == "zh"
    b.logout(s.token)
    assert a.user_for(s.token) is None and a.user_for(s2.token) == "Alice"
    with psycopg.connect(pg_url) as con:               # only hashes are stored
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
    clock.t += 301
    assert b.login("bob", "hunter2hunter2").user == "bob"


def test_delete_and_change_password(workers):
    a, b, _ = workers
    s = a.signup("carol", "first password")
    b.change_password("carol", "first password", "second password")
    assert a.user_for(s.token) is None
    assert a.delete("carol") and not b.exists("carol") and b.users() == []


def test_api_keys_made_on_one_worker_work_on_the_other(workers):
    from siliconfriend.api.keys import ApiKeys
    a, b, _ = workers
    a.signup("dora", "dora-password")
    made = ApiKeys(a).create("dora", "my app")
    owner = ApiKeys(b).owner(made.key)
    assert owner is not None and owner.user == "dora"
    assert [k.id for k in ApiKeys(b).list("dora")] == [made.info.id]
    ApiKeys(b).revoke("dora", made.info.id)
    assert ApiKeys(a).owner(made.key) is None
