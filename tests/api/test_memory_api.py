"""The memory API over HTTP: list (paginated), search, get, pin / unpin, archive, restore,
delete, export; each key sees only its user's memories; bad ids are a clean 404 in OpenAI's
error shape; huge inputs a clear 400 or 413; the OpenAPI description at /v1/openapi.json."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import httpx
import pytest

from memory.records import Kind, State


def _auth(key):
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def two_users(served):
    """ivy with 30 turns over three days and a daily summary; jon with one turn."""
    ivy, jon = served.signup("ivy"), served.signup("jon")
    bank = served.api.bank
    turns = [
        (
            f"Note {i}: I planted {['tomatoes', 'basil', 'roses'][i % 3]} today.",
            "Lovely!",
            datetime(2024, 4, 1 + i // 10, 9, 0) + timedelta(minutes=i),
        )
        for i in range(30)
    ]
    bank.add_turns("ivy", turns)
    bank.set_summary(
        "ivy", Kind.DAILY_EVENTS, "ivy gardened all day.", datetime(2024, 4, 1, 23, 59), day=date(2024, 4, 1)
    )
    bank.add_turn("jon", "My bike is a red Peugeot from 1978.", "A classic!", datetime(2024, 4, 2, 8, 0))
    return ivy, jon


def test_list_is_paginated_newest_first(served, two_users):
    ivy, _ = two_users
    seen, offset = [], 0
    while offset is not None:
        page = httpx.get(f"{served.url}/memories", params={"limit": 7, "offset": offset}, headers=_auth(ivy)).json()
        assert page["object"] == "list" and page["total"] == 31 and len(page["data"]) <= 7
        seen += page["data"]
        offset = page["next_offset"]
        assert page["has_more"] == (offset is not None)
    assert len(seen) == 31 == len({m["id"] for m in seen})
    days = [m["day"] for m in seen]
    assert days == sorted(days, reverse=True)
    assert {"id", "kind", "day", "text", "state", "pinned", "strength", "retention"} <= set(seen[0])
    turns = httpx.get(f"{served.url}/memories", params={"kind": "turn", "day": "2024-04-02"}, headers=_auth(ivy)).json()
    assert turns["total"] == 10 and all(m["day"] == "2024-04-02" for m in turns["data"])
    for params in (
        {"limit": 0},
        {"limit": 10_000},
        {"offset": -1},
        {"kind": "dream"},
        {"state": "gone"},
        {"day": "yesterday"},
        {"limit": "many"},
    ):
        bad = httpx.get(f"{served.url}/memories", params=params, headers=_auth(ivy))
        assert bad.status_code == 400 and bad.json()["error"]["message"], params


def test_search_get_pin_archive_restore_delete(served, two_users):
    ivy, _ = two_users
    found = httpx.get(f"{served.url}/memories/search", params={"q": "basil"}, headers=_auth(ivy)).json()
    assert found["data"] and "basil" in found["data"][0]["text"] and found["data"][0]["why"]
    mid = found["data"][0]["id"]
    url = f"{served.url}/memories/{mid}"
    assert httpx.get(url, headers=_auth(ivy)).json()["id"] == mid
    assert httpx.post(f"{url}/pin", headers=_auth(ivy)).json()["pinned"] is True
    assert served.api.bank.get("ivy", mid).pinned
    assert httpx.post(f"{url}/unpin", headers=_auth(ivy)).json()["pinned"] is False
    archived = httpx.post(f"{url}/archive", headers=_auth(ivy)).json()
    assert archived["state"] == "archived" and served.api.bank.get("ivy", mid).state == State.ARCHIVED
    hidden = httpx.get(f"{served.url}/memories/search", params={"q": "basil", "limit": 50}, headers=_auth(ivy)).json()
    assert mid not in [m["id"] for m in hidden["data"]]
    restored = httpx.post(f"{url}/restore", headers=_auth(ivy)).json()
    assert restored["state"] == "active" and restored["recall_count"] >= 1
    again = httpx.post(f"{url}/restore", headers=_auth(ivy))
    assert again.status_code == 409 and "not archived" in again.json()["error"]["message"]
    gone = httpx.delete(url, headers=_auth(ivy))
    assert gone.json() == {"id": mid, "object": "memory", "deleted": True}
    assert httpx.get(url, headers=_auth(ivy)).status_code == 404
    assert served.api.bank.count("ivy") == 30


def test_one_users_key_never_reaches_anothers_memories(served, two_users):
    ivy, jon = two_users
    jons = httpx.get(f"{served.url}/memories", headers=_auth(jon)).json()["data"]
    assert [m["text"] for m in jons] == ["My bike is a red Peugeot from 1978.\nA classic!"] or all(
        "Peugeot" in m["text"] for m in jons
    )
    bike = jons[0]["id"]
    listed = httpx.get(f"{served.url}/memories", params={"limit": 200}, headers=_auth(ivy)).json()["data"]
    ivys = {m["id"] for m in listed}
    searched = httpx.get(f"{served.url}/memories/search", params={"q": "red Peugeot bike"}, headers=_auth(ivy))
    assert all("Peugeot" not in m["text"] for m in listed + searched.json()["data"])
    # jon tries ivy's ids (each user's ids are their own numbering: ivy's 31 is not one of jon's)
    probed = 0
    for key, mid in ((jon, max(ivys)),):
        probed += 1
        for method, path in (("GET", ""), ("POST", "/pin"), ("POST", "/archive"), ("POST", "/restore"), ("DELETE", "")):
            r = httpx.request(method, f"{served.url}/memories/{mid}{path}", headers=_auth(key))
            assert r.status_code == 404, (method, path)
    assert probed and served.api.bank.get("ivy", max(ivys)).state == State.ACTIVE
    assert served.api.bank.get("jon", bike).state == State.ACTIVE and not served.api.bank.get("jon", bike).pinned
    export = httpx.get(f"{served.url}/memories/export", headers=_auth(jon)).json()
    assert list(export) == ["jon"]
    assert "Peugeot" in str(export) and "basil" not in str(export) and "ivy" not in str(export)


@pytest.mark.parametrize(
    "bad", ["0", "-3", "abc", "1.5", "99999999999999999999999", "%00", "1;DROP TABLE memories", "9" * 400]
)
def test_bad_ids_are_a_clean_404(served, two_users, bad):
    ivy, _ = two_users
    r = httpx.get(f"{served.url}/memories/{bad}", headers=_auth(ivy))
    assert r.status_code == 404, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["message"]
    assert "Traceback" not in r.text and "sqlite" not in r.text.lower()


def test_huge_inputs_are_refused_clearly(served, two_users):
    ivy, _ = two_users
    r = httpx.get(f"{served.url}/memories/search", params={"q": "tomato " * 2000}, headers=_auth(ivy))
    assert r.status_code == 400 and "at most" in r.json()["error"]["message"]
    r = httpx.get(f"{served.url}/memories/search", params={"q": "  "}, headers=_auth(ivy))
    assert r.status_code == 400
    r = httpx.post(
        f"{served.url}/chat/completions",
        headers={**_auth(ivy), "Content-Type": "application/json"},
        content=b'{"model": "x", "messages": [{"role": "user", "content": "' + b"a" * (9 * 2**20) + b'"}]}',
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    many = [{"role": "user", "content": "w" * 19_000}, {"role": "assistant", "content": "ok"}] * 60
    r = httpx.post(
        f"{served.url}/chat/completions",
        headers=_auth(ivy),
        timeout=60,
        json={"model": "x", "messages": many + [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200, r.text  # a long client history is fitted to the prompt, not refused
    # only the last message was stored (the finished April days were summarised by the day rollover)
    assert [t.query for t in served.api.bank.turns_on("ivy", served.clock.now.date())] == ["hi"]
    assert served.api.bank.count("ivy", kind=Kind.TURN) == 30


def test_openapi_description(served):
    spec = httpx.get(f"{served.url}/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/chat/completions",
        "/models",
        "/memories",
        "/memories/search",
        "/memories/export",
        "/memories/{memory_id}",
        "/memories/{memory_id}/pin",
        "/memories/{memory_id}/restore",
    } <= paths
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert httpx.get(f"{served.url}/nowhere").status_code == 404


def test_what_i_know_about_you(served, two_users):
    ivy, jon = two_users
    mine = httpx.get(f"{served.url}/memories/known", headers=_auth(jon))
    assert mine.status_code == 200, mine.text
    body = mine.json()
    assert body["profile"] is None and body["sorts"]["people"] == "People and pets"
    (bike,) = body["facts"]
    assert bike["text"] == "My bike is a red Peugeot from 1978." and "Peugeot" in bike["names"]
    assert served.api.bank.get("jon", bike["memory_id"]).query == bike["text"]  # linked to its turn
    theirs = httpx.get(f"{served.url}/memories/known", params={"lang": "zh"}, headers=_auth(ivy)).json()
    assert theirs["sorts"]["people"] == "人和宠物" and theirs["facts"]
    assert all("Peugeot" not in f["text"] for f in theirs["facts"])  # only ever the key's user
    bad = httpx.get(f"{served.url}/memories/known", params={"lang": "fr"}, headers=_auth(ivy))
    assert bad.status_code == 400 and "en or zh" in bad.json()["error"]["message"]
