"""Accounts: sign up, log in, sessions, rate limiting, preferences, deletion."""

from __future__ import annotations

import re
import sqlite3

import pytest
from argon2 import PasswordHasher
from fakes import Clock

from siliconfriend.accounts.rate_limit import Attempt, Limits
from siliconfriend.accounts.rate_limit import TooManyAttempts as RateLimited
from siliconfriend.accounts.users import AccountError, Accounts, SignupClosed, TooManyAttempts
from siliconfriend.i18n import say

FAST = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture
def clock():
    return Clock(1_700_000_000.0)


@pytest.fixture
def accounts(tmp_path, clock):
    acc = Accounts.at(tmp_path / "accounts.db", hasher=FAST, clock=clock)
    yield acc
    acc.close()


def test_signup_login_logout(accounts):
    s = accounts.signup("Alice", "correct horse")
    assert s.user == "Alice" and len(s.token) > 30
    assert accounts.user_for(s.token) == "Alice"
    s2 = accounts.login("alice", "correct horse")  # names are case-insensitive...
    assert s2.user == "Alice" and s2.token != s.token  # ...and come back as typed at sign-up
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


@pytest.mark.parametrize(
    "name", ["", " ", "a", "has space", "x" * 33, "semi;colon", "../etc", "..", "._.", "\u0430lice"]
)
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


def test_lookalike_names_are_one_account(accounts):
    accounts.signup("foo", "long enough pw")
    with pytest.raises(AccountError, match="taken"):
        accounts.signup("\uff46\uff4f\uff4f", "long enough pw")  # full-width "foo" is "foo"
    assert accounts.login("\uff46\uff4f\uff4f", "long enough pw").user == "foo"
    accounts.signup("alice", "long enough pw")
    with pytest.raises(AccountError, match="taken"):  # all-Cyrillic look-alike
        accounts.signup("\u0430\u04cf\u0456\u0441\u0435", "long enough pw")
    with pytest.raises(AccountError, match="taken"):
        accounts.signup("a1ice", "long enough pw")  # a digit for a letter
    accounts.signup("\u0431\u043e\u0440\u0438\u0441", "long enough pw")  # a real Cyrillic name is fine


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


def test_one_account_locked_from_one_client_leaves_others_alone(accounts, clock):
    """Five wrong passwords for frank from one address: that pair waits, nobody else does."""
    accounts.signup("frank", "long enough pw")
    accounts.signup("grace", "long enough pw")
    for _ in range(5):
        with pytest.raises(AccountError, match="wrong"):
            accounts.login("frank", "nope nope", client="1.2.3.4")
    with pytest.raises(TooManyAttempts):  # frank from there: even the right password, for now
        accounts.login("frank", "long enough pw", client="1.2.3.4")
    # another account behind the same address (a NAT, an office) logs in
    assert accounts.login("grace", "long enough pw", client="1.2.3.4").user == "grace"
    # frank from his phone logs in: the lock was on the pair
    assert accounts.login("frank", "long enough pw", client="5.6.7.8").user == "frank"
    clock.now += Limits().base_backoff_s + 0.1  # a back-off of seconds, not a 15-minute wall
    assert accounts.login("frank", "long enough pw", client="1.2.3.4").user == "frank"


def test_the_owner_who_mistypes_waits_seconds_that_grow_never_long(accounts, clock):
    """Eight wrong passwords from her own machine: the right one waits a back-off that grows with
    each further failure, at most a minute, never the whole window."""
    lim = Limits()
    accounts.signup("hana", "long enough pw")
    waits = []
    for i in range(8):
        try:
            accounts.login("hana", f"typo {i}", client="1.2.3.4")
        except TooManyAttempts as exc:
            waits.append(exc.retry_after)
            clock.now += exc.retry_after + 0.01
            with pytest.raises(AccountError, match="wrong"):
                accounts.login("hana", f"typo {i}", client="1.2.3.4")
        except AccountError:
            pass
    assert waits == sorted(waits) and waits[-1] > waits[0] and max(waits) <= lim.max_backoff_s
    with pytest.raises(TooManyAttempts) as exc:
        accounts.login("hana", "long enough pw", client="1.2.3.4")
    assert 0 < exc.value.retry_after <= lim.max_backoff_s  # never the whole window's wall
    # a wait of seconds in seconds, in the page's language
    assert re.fullmatch(r"尝试失败次数过多：请(\d+ 秒|1 分钟)后再试。", say(str(exc.value), "zh"))
    assert re.search(r"try again in (\d+ seconds?|1 minute)$", say(str(exc.value), "en"))
    clock.now += exc.value.retry_after + 0.01
    assert accounts.login("hana", "long enough pw", client="1.2.3.4").user == "hana"


def test_spraying_from_one_client_is_stopped(accounts, clock):
    accounts.signup("heidi", "long enough pw")
    limit = Limits().per_client
    for i in range(limit):
        with pytest.raises(AccountError):
            accounts.login(f"user{i}", "Password1!", client="6.6.6.6")
    with pytest.raises(TooManyAttempts):
        accounts.login("heidi", "Password1!", client="6.6.6.6")
    assert accounts.login("heidi", "long enough pw", client="7.7.7.7").user == "heidi"


def test_many_clients_against_one_account_back_off_but_never_lock_the_owner_out(accounts, clock):
    """An attacker rotating addresses meets a growing, capped back-off on the account; the owner's
    own (known) client is not held at all, and a new client waits at most the cap."""
    lim = Limits()
    accounts.signup("ivan", "long enough pw")
    accounts.login("ivan", "long enough pw", client="10.0.0.1")  # ivan's usual address: known
    refused = 0
    for i in range(60):  # 60 addresses, one guess each
        try:
            accounts.login("ivan", f"guess {i}", client=f"203.0.113.{i}")
        except TooManyAttempts as exc:
            refused += 1
            assert exc.retry_after <= lim.max_backoff_s
        except AccountError:
            pass
        clock.now += 1
    assert refused > 30  # most guesses never reached the password
    assert accounts.login("ivan", "long enough pw", client="10.0.0.1").user == "ivan"
    with pytest.raises(TooManyAttempts) as exc:  # a new place: waits, but not long
        accounts.login("ivan", "long enough pw", client="198.51.100.1")
    clock.now += exc.value.retry_after + 0.1
    assert accounts.login("ivan", "long enough pw", client="198.51.100.1").user == "ivan"


def test_limiter_is_reusable_for_other_secrets(tmp_path, clock):
    """The API's keys are limited like logins: the same limiter, another name prefix."""
    acc = Accounts.at(tmp_path / "a.db", hasher=FAST, clock=clock)
    key = Attempt("apikey:sk-abc1", "9.9.9.9")
    for _ in range(Limits().per_pair):
        acc.limiter.check(key)
        acc.limiter.failed(key)
    with pytest.raises(RateLimited):
        acc.limiter.check(key)
    acc.limiter.check(Attempt("apikey:sk-abc1", "8.8.8.8"))
    acc.close()


def test_signup_can_be_closed(tmp_path):
    acc = Accounts.at(tmp_path / "a.db", hasher=FAST, signup_open=False)
    with pytest.raises(SignupClosed):
        acc.signup("gina", "long enough pw")


def test_sessions_expire_and_slide(accounts, clock):
    s = accounts.signup("hank", "long enough pw")
    clock.now += 20 * 86400  # used after 20 days: extended
    assert accounts.user_for(s.token) == "hank"
    clock.now += 20 * 86400
    assert accounts.user_for(s.token) == "hank"
    clock.now += 31 * 86400  # idle past 30 days: gone
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


@pytest.mark.parametrize("made_by", ["main", "web"])
def test_an_older_accounts_database_migrates(tmp_path, clock, made_by):
    """A database of the API keys' migration 2 (main) or of the rate limiter's old migration 2 (the
    web branch before the merge) reaches version 3: failures gone, skeletons filled, keys kept."""
    from memory.stores.sqlite_db import run_script
    from siliconfriend.accounts.sqlite import MIGRATIONS as _MIGRATIONS

    path = tmp_path / "accounts.db"
    db = sqlite3.connect(path)
    steps = _MIGRATIONS[:2] if made_by == "main" else [_MIGRATIONS[0], _MIGRATIONS[2]]
    for script in steps:
        run_script(db, script)
    db.execute("PRAGMA user_version = 2")
    db.execute(
        "INSERT INTO users (name, pw_hash, created_at) VALUES (?, ?, ?)", ("Olga", FAST.hash("olga-password"), clock())
    )
    if made_by == "main":
        db.execute("INSERT INTO api_keys (key_hash, prefix, name, created_at) VALUES ('h', 'sf-x', 'Olga', 0)")
    db.commit()
    db.close()
    acc = Accounts.at(path, hasher=FAST, clock=clock)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"api_keys", "rate_events"} <= tables and "failures" not in tables
    assert db.execute("SELECT skeleton FROM users").fetchone()[0] == "olga"
    assert db.execute("SELECT count(*) FROM api_keys").fetchone()[0] == (made_by == "main")
    db.close()
    assert acc.login("olga", "olga-password", client="1.2.3.4").user == "Olga"
    with pytest.raises(AccountError, match="taken"):
        acc.signup("0lga", "another password")
    acc.close()


# the schema as the accounts wrote it before the repository interface: steps 1-3, with the rate
# limiter's table made at every opening outside them
_V3_AS_WRITTEN = """
CREATE TABLE users (name TEXT PRIMARY KEY COLLATE NOCASE, pw_hash TEXT NOT NULL, created_at REAL NOT NULL,
    prefs TEXT NOT NULL DEFAULT '{}', skeleton TEXT);
CREATE TABLE sessions (token_hash TEXT PRIMARY KEY,
    name TEXT NOT NULL COLLATE NOCASE REFERENCES users(name) ON DELETE CASCADE,
    created_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX sessions_by_name ON sessions(name);
CREATE TABLE api_keys (id INTEGER PRIMARY KEY, key_hash TEXT NOT NULL UNIQUE, prefix TEXT NOT NULL,
    name TEXT NOT NULL COLLATE NOCASE REFERENCES users(name) ON DELETE CASCADE, label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL, last_used_at REAL, revoked_at REAL);
CREATE INDEX api_keys_by_name ON api_keys(name);
CREATE INDEX users_by_skeleton ON users(skeleton);
CREATE TABLE IF NOT EXISTS rate_events (key TEXT NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS rate_events_by_key ON rate_events(key, kind, at);
PRAGMA user_version = 3;
"""


def test_a_database_of_the_current_schema_keeps_working(tmp_path, clock):
    """Its sessions, passwords, preferences, API keys and counted failures are all still good."""
    from siliconfriend.accounts.keys import ApiKeys
    from siliconfriend.accounts.store import secret_digest

    path = tmp_path / "accounts.db"
    db = sqlite3.connect(path)
    db.executescript(_V3_AS_WRITTEN)
    token, key = "t" * 43, "sf-" + "k" * 43
    db.execute(
        "INSERT INTO users (name, pw_hash, created_at, prefs, skeleton) VALUES (?, ?, ?, ?, ?)",
        ("Olga", FAST.hash("olga-password"), clock(), '{"lang": "zh"}', "olga"),
    )
    db.execute("INSERT INTO sessions VALUES (?, 'Olga', ?, ?)", (secret_digest(token), clock(), clock() + 86400 * 29))
    db.execute(
        "INSERT INTO api_keys (key_hash, prefix, name, created_at) VALUES (?, 'sf-kkkkkkk', 'Olga', 0)",
        (secret_digest(key),),
    )
    db.executemany("INSERT INTO rate_events VALUES ('user:olga', 'fail', ?)", [(clock() - 1,)] * 10)
    db.commit()
    db.close()
    acc = Accounts.at(path, hasher=FAST, clock=clock)
    try:
        assert acc.user_for(token) == "Olga" and acc.prefs("olga")["lang"] == "zh"
        assert ApiKeys(acc).owner(key).user == "Olga"
        with pytest.raises(TooManyAttempts):  # the ten failures still count
            acc.login("olga", "olga-password", client="5.5.5.5")
        clock.now += Limits().window_s + 1
        assert acc.login("olga", "olga-password").user == "Olga"
        with pytest.raises(AccountError, match="taken"):
            acc.signup("0LGA", "another password")
    finally:
        acc.close()


def test_the_browser_key_is_kept_beside_the_database(tmp_path, accounts):
    first = accounts.browser_secret()
    again = Accounts.at(tmp_path / "accounts.db", hasher=FAST)
    try:
        assert again.browser_secret() == first and len(first) >= 32
    finally:
        again.close()
    assert (tmp_path / ".web_secret").stat().st_mode & 0o777 == 0o600


def test_a_wait_of_seconds_is_said_in_seconds():
    from siliconfriend.i18n import wait_words

    assert [wait_words(s, "en") for s in (0.2, 1, 5, 59.5, 60, 61, 600)] == [
        "1 second",
        "1 second",
        "5 seconds",
        "60 seconds",
        "1 minute",
        "2 minutes",
        "10 minutes",
    ]
    assert [wait_words(s, "zh") for s in (5, 90)] == ["5 秒", "2 分钟"]
