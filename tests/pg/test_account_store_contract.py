"""The accounts' repository (``siliconfriend/accounts/store.py``) is one contract: every behaviour
here runs against the SQLite store and the PostgreSQL store, so that a change to one that the
other does not follow fails here."""

from __future__ import annotations

import pytest

from siliconfriend.accounts.store import NameTaken, SessionRow, TooManyKeys, UserRow


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        from siliconfriend.accounts.sqlite import SQLiteAccountStore

        made = SQLiteAccountStore(tmp_path / "accounts.db")
    else:
        from siliconfriend.accounts.postgres import PgAccountStore

        made = PgAccountStore(request.getfixturevalue("pg_url"))
    yield made
    made.close()


# a write names a user as stored (``UserRow.name``, what ``Accounts.canonical`` gives); a lookup
# takes the name in any case


def user(name: str, skeleton: str | None = None) -> UserRow:
    return UserRow(name, "hash-of-" + name, 1.0, {"lang": "en"}, skeleton or name.casefold())


def test_users_are_unique_regardless_of_case_and_look(store):
    store.add_user(user("Alice"))
    with pytest.raises(NameTaken):
        store.add_user(user("ALICE", "other"))  # the same name in another case
    with pytest.raises(NameTaken):
        store.add_user(user("A1ice", "alice"))  # another name with the same skeleton
    found = store.user("alice")
    assert found is not None and (found.name, found.prefs, found.skeleton) == ("Alice", {"lang": "en"}, "alice")
    assert store.users() == ["Alice"] and store.user("bob") is None


def test_preferences_merge_and_passwords_change(store):
    store.add_user(user("Amy"))
    assert store.merge_prefs("amy", {"persona": "小硅"}) == {"lang": "en", "persona": "小硅"}
    assert store.merge_prefs("nobody", {"lang": "zh"}) is None
    store.set_password_hash("AMY", "new-hash")
    assert store.user("Amy").pw_hash == "new-hash" and store.user("Amy").prefs["persona"] == "小硅"


def test_sessions(store):
    store.add_user(user("Bo"))
    store.add_session(SessionRow("old", "Bo", 1.0, 5.0), expired_before=0.0)
    store.add_session(SessionRow("new", "Bo", 10.0, 20.0), expired_before=10.0)  # drops "old"
    assert store.session("old") is None and store.session("new").expires_at == 20.0
    store.extend_session("new", 30.0)
    assert store.session("new").expires_at == 30.0
    store.delete_session("new")
    assert store.session("new") is None


def test_api_keys(store):
    store.add_user(user("Cy"))
    store.add_user(user("Di"))
    first = store.add_api_key("h1", "sf-1", "Cy", "laptop", 5.0, max_live=2)
    store.add_api_key("h2", "sf-2", "Cy", "", 6.0, max_live=2)
    with pytest.raises(TooManyKeys):
        store.add_api_key("h3", "sf-3", "Cy", "", 7.0, max_live=2)
    assert [(k.id, k.label, k.active) for k in store.api_keys("CY")][0] == (first, "laptop", True)
    found = store.api_key("h1")
    assert (found.id, found.name, found.revoked_at, found.last_used_at) == (first, "Cy", None, None)
    store.touch_api_key(first, 8.0)
    assert store.api_key("h1").last_used_at == 8.0
    assert not store.revoke_api_key(first, "Di", 9.0)  # not hers: refused, the key stays live
    assert store.revoke_api_key(first, "cy", 9.0) and store.revoke_api_key(first, "Cy", 12.0)
    assert store.api_key("h1").revoked_at == 9.0  # revoked once, at the first time
    store.add_api_key("h3", "sf-3", "Cy", "", 10.0, max_live=2)  # a revoked key frees its place


def test_rate_events(store):
    store.add_events(["user:a_b|client:1", "user:a_b", "user:axb|client:1"], "fail", 5.0)
    store.add_events(["user:a_b|client:1"], "ok", 6.0)
    assert store.events("user:a_b", "fail", 0.0) == [5.0] and store.events("user:a_b", "fail", 5.5) == []
    store.forget_events_prefix("user:a_b|")  # "_" is a letter here, not LIKE's wildcard
    assert store.events("user:a_b|client:1", "fail", 0.0) == [] and store.events("user:a_b|client:1", "ok", 0.0) == []
    assert store.events("user:axb|client:1", "fail", 0.0) == [5.0]
    store.clear_events(["user:a_b"], "fail")
    assert store.events("user:a_b", "fail", 0.0) == []
    store.prune_events(10.0)
    assert store.events("user:axb|client:1", "fail", 0.0) == []


def test_deleting_a_user_takes_their_sessions_and_keys(store):
    store.add_user(user("Ed"))
    store.add_session(SessionRow("tok", "Ed", 1.0, 99.0), expired_before=0.0)
    store.add_api_key("hk", "sf-k", "Ed", "", 1.0, max_live=5)
    assert store.delete_user("ed") and not store.delete_user("ed")
    assert store.user("Ed") is None and store.session("tok") is None and store.api_key("hk") is None


def test_copying_in_leaves_what_is_there(store):
    store.add_user(user("Flo"))
    store.copy_in([user("flo", "x"), user("Gus")], [SessionRow("s1", "Gus", 1.0, 99.0)])
    store.copy_in([user("Gus")], [SessionRow("s1", "Gus", 1.0, 99.0)])  # safe to run again
    assert store.users() == ["Flo", "Gus"] and store.user("flo").skeleton == "flo"
    assert [s.token_hash for s in store.session_rows()] == ["s1"] and len(store.user_rows()) == 2


def test_the_browser_key_is_made_once(store):
    first = store.browser_secret(lambda: "first-key")
    assert first == "first-key" and store.browser_secret(lambda: "second-key") == "first-key"
