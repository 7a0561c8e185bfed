"""Accounts: sign up, log in, sessions, rate limiting, preferences, deletion."""
from __future__ import annotations

import sqlite3

import pytest
from argon2 import PasswordHasher

from siliconfriend.web.accounts import AccountError, Accounts, SignupClosed, TooManyAttempts

from fakes import Clock

FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture
def clock():
    return Clock(1_700_000_000.0)


@pytest.fixture
def accounts(tmp_path, clock):
    acc = Accounts(tmp_path / "accounts.db", hasher=FAST, clock=clock)
    yield acc
    acc.close()


def test_signup_login_logout(accounts):
    s = accounts.signup("Alice", "correct horse")
    assert s.user == "Alice" and len(s.token) > 30
    assert accounts.user_for(s.token) == "Alice"
    s2 = accounts.login("alice", "correct horse")          # names are case-insensitive...
    assert s2.user == "Alice" and s2.token != s.token      # ...and come back as typed at sign-up
    accounts.logout(s.token)
    assert accounts.user_for(s.token) is None
    assert accounts.user_for(s2.token) == "Alice"


def test_passwords_are_hashed_and_tokens_not_stored(accounts, tmp_path):
    s = accounts.signup("bob", "hunter2hunter2")
    raw = (tmp_path / "accounts.db").read_bytes() + (tmp_path / "accounts.db-wal").read_bytes()
    assert b"hunter2hunter2" not in raw
    assert s.token.encode() not in raw
    con = sqlite3.connect(tmp_path / "accounts.db")
    (pw_hash,) = con.execute("SELECT pw_hash FROM users").fetchone()
    assert pw_hash.startswith("$argon2")


@pytest.mark.parametrize("name", ["", " ", "a", "has space", "x" * 33, "semi;colon", "../etc"])
def test_bad_names_refused(accounts, name):
    with pytest.raises(AccountError):
        accounts.signup(name, "long enough pw")


def test_unicode_name_and_duplicates(accounts):
    accounts.signup("小明", "long enough pw")
    with pytest.raises(AccountError, match="taken"):
        accounts.signup("小明", "another password")
    accounts.signup("Carol", "long enough pw")
    with pytest.raises(AccountError, match="taken"):
        accounts.signup("CAROL", "long enough pw")


def test_short_password_refused(accounts):
    with pytest.raises(AccountError, match="at least"):
        accounts.signup("dave", "short")


def test_wrong_password_and_unknown_user_look_the_same(accounts):
    accounts.signup("erin", "long enough pw")
    with pytest.raises(AccountError) as a:
        accounts.login("erin", "wrong password")
    with pytest.raises(AccountError) as b:
        accounts.login("nobody", "wrong password")
    assert str(a.value) == str(b.value)


def test_failed_logins_are_rate_limited(accounts, clock):
    accounts.signup("frank", "long enough pw")
    for _ in range(5):
        with pytest.raises(AccountError):
            accounts.login("frank", "nope nope", client="1.2.3.4")
    with pytest.raises(TooManyAttempts):          # even the right password, for now
        accounts.login("frank", "long enough pw")
    with pytest.raises(TooManyAttempts):          # and from that client for any name
        accounts.login("someone", "whatever", client="1.2.3.4")
    clock.now += 301
    assert accounts.login("frank", "long enough pw").user == "frank"


def test_signup_can_be_closed(tmp_path):
    acc = Accounts(tmp_path / "a.db", hasher=FAST, signup_open=False)
    with pytest.raises(SignupClosed):
        acc.signup("gina", "long enough pw")


def test_sessions_expire_and_slide(accounts, clock):
    s = accounts.signup("hank", "long enough pw")
    clock.now += 20 * 86400                      # used after 20 days: extended
    assert accounts.user_for(s.token) == "hank"
    clock.now += 20 * 86400
    assert accounts.user_for(s.token) == "hank"
    clock.now += 31 * 86400                      # idle past 30 days: gone
    assert accounts.user_for(s.token) is None


@pytest.mark.parametrize("token", [None, "", "x", 42, {"user": "hank"}, "A" * 43])
def test_junk_tokens(accounts, token):
    accounts.signup("hank", "long enough pw")
    assert accounts.user_for(token) is None


def test_prefs(accounts):
    accounts.signup("ivy", "long enough pw")
    assert accounts.prefs("ivy") == {}
    accounts.set_prefs("ivy", lang="zh", companion_name="小硅")
    accounts.set_prefs("ivy", persona="kind")
    assert accounts.prefs("ivy") == {"lang": "zh", "companion_name": "小硅", "persona": "kind"}
    with pytest.raises(AccountError):
        accounts.set_prefs("ivy", is_admin=True)


def test_delete_removes_everything(accounts, tmp_path):
    s = accounts.signup("jack", "long enough pw")
    accounts.set_prefs("jack", persona="a very distinctive persona")
    with pytest.raises(AccountError):
        accounts.verify_password("jack", "not it at all")
    accounts.verify_password("jack", "long enough pw")
    assert accounts.delete("jack")
    assert accounts.user_for(s.token) is None
    assert not accounts.exists("jack")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("accounts.db*"))
    assert b"a very distinctive persona" not in raw and b"jack" not in raw
    with pytest.raises(AccountError):
        accounts.login("jack", "long enough pw")


def test_change_password_ends_sessions(accounts):
    s = accounts.signup("kim", "long enough pw")
    accounts.change_password("kim", "long enough pw", "another long pw")
    assert accounts.user_for(s.token) is None
    assert accounts.login("kim", "another long pw").user == "kim"
