"""The web app under attack, over HTTP: login limits that spoofed X-Forwarded-For headers cannot
dodge (and that a listed proxy's header can steer), private files, exports that only their
session can fetch once, and models only the operator chooses, each loaded once. No LLM here:
the companion is never built (its factory is the real one, never called)."""

from __future__ import annotations

import re
import stat
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import FAST_HASHER, free_port
from gradio_client import Client

from memory.stores.sqlite import SqliteStores
from siliconfriend.web.client import BROWSER_COOKIE, client_address, proxy_networks


def serve(home: Path, embedder, **settings_options):
    import app as web_app
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.accounts.users import Accounts
    from siliconfriend.config import Settings
    from siliconfriend.web.service import WebService

    settings = Settings(home=home, backend="openai", model="gpt-test", **settings_options)
    bank = MemoryBank(SqliteStores(settings.home), embedder)
    service = WebService(
        settings, Accounts.at(home / "accounts.db", hasher=FAST_HASHER), bank, companion_factory=lambda: None
    )
    demo = web_app.build_app(service)
    port = free_port()
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    return f"http://127.0.0.1:{port}/", service, demo


@pytest.fixture(scope="module")
def servers(tmp_path_factory, e5_embedder):
    """Two servers: one that trusts no proxy, one behind a proxy on 127.0.0.1."""
    direct = serve(tmp_path_factory.mktemp("direct") / "home", e5_embedder)
    proxied = serve(tmp_path_factory.mktemp("proxied") / "home", e5_embedder, trusted_proxies=("127.0.0.1",))
    yield {"direct": direct, "proxied": proxied}
    for _, service, demo in (direct, proxied):
        demo.close()
        service.bank.close()
        service.accounts.close()


def login(url: str, name: str, password: str, forwarded_for: str | None = None) -> tuple[str, str]:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else None
    token, _, message = Client(url, verbose=False, headers=headers).predict(name, password, "en", api_name="/login")
    return token, message


def test_client_address_believes_only_listed_proxies():
    nets = proxy_networks(["10.0.0.0/8", "::1"])
    assert client_address("203.0.113.9", "1.2.3.4", nets) == "203.0.113.9"  # not a proxy: ignored
    assert client_address("10.0.0.2", "198.51.100.7", nets) == "198.51.100.7"
    # a client that sends its own header through the proxy: the proxy's entry (rightmost) counts
    assert client_address("10.0.0.2", "6.6.6.6, 198.51.100.7", nets) == "198.51.100.7"
    assert client_address("10.0.0.2", "198.51.100.7, 10.0.0.5", nets) == "198.51.100.7"  # two proxies
    assert client_address("10.0.0.2", "not-an-ip", nets) == "10.0.0.2"
    with pytest.raises(ValueError, match="trusted_proxies"):
        proxy_networks(["example.com"])


def test_spoofed_forwarded_for_does_not_dodge_the_limit(servers):
    url, service, _ = servers["direct"]
    service.account.signup("amy", "amy-password")
    service.account.signup("ben", "ben-password")
    for i in range(5):  # a new "address" in every try: the server sees 127.0.0.1 each time
        token, message = login(url, "amy", f"guess {i}", forwarded_for=f"198.51.100.{i}")
        assert not token and "wrong" in message
    token, message = login(url, "amy", "amy-password", forwarded_for="192.0.2.77")
    assert not token and "too many" in message
    # ...and the lock is on amy from this client, not on every account behind the address
    token, message = login(url, "ben", "ben-password")
    assert token and not message


def test_a_listed_proxys_header_names_the_client(servers):
    url, service, _ = servers["proxied"]
    service.account.signup("cleo", "cleo-password")
    for i in range(5):
        token, message = login(url, "cleo", f"guess {i}", forwarded_for="203.0.113.5")
        assert not token
    assert "too many" in login(url, "cleo", "cleo-password", forwarded_for="203.0.113.5")[1]
    # the attacker's failures do not lock cleo out from her own address
    token, message = login(url, "cleo", "cleo-password", forwarded_for="198.51.100.23")
    assert token and not message
    # setting the header to the victim's address through the proxy does not help: the proxy appends
    # the real one, and the rightmost untrusted entry is the client
    for i in range(5):
        login(url, "cleo", f"again {i}", forwarded_for="198.51.100.23, 203.0.113.5")
    token, message = login(url, "cleo", "cleo-password", forwarded_for="198.51.100.23")
    assert token and not message


def fetch(link: str, browser: str | None = None) -> tuple[int, bytes, dict]:
    """GET ``link`` as a browser holding the cookie ``browser`` (None: no cookie): (status, body, headers)."""
    headers = {"Cookie": f"{BROWSER_COOKIE}={browser}"} if browser else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(link, headers=headers)) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, b"", {}


def test_export_reaches_only_its_session_once(servers):
    url, service, _ = servers["direct"]
    dora_browser, eve_browser = "dora-browser-" + "d" * 20, "eve-browser-" + "e" * 20
    c = Client(url, verbose=False, headers={"Cookie": f"{BROWSER_COOKIE}={dora_browser}"})
    token = service.account.signup("dora", "dora-password").token
    other = service.account.signup("eve", "eve-password").token
    html = c.predict(token, api_name="/export")
    link = url + re.search(r'href="([^"]+)"', html).group(1)
    ticket = link.rsplit("/", 1)[1]
    stored = service.exports.export_dir / f"{ticket}.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(service.exports.export_dir.stat().st_mode) == 0o700
    # the link in another logged-in browser, or in one with no cookie at all: refused, and still good
    assert fetch(link, eve_browser)[0] == 404 and fetch(link)[0] == 404
    assert stored.exists()
    status, body, headers = fetch(link, dora_browser)
    assert status == 200 and headers["content-disposition"].startswith("attachment") and b'"dora"' in body
    assert not stored.exists()
    assert fetch(link, dora_browser)[0] == 404  # used: gone
    # a first visit gets its browser cookie (HttpOnly)
    with urllib.request.urlopen(url) as r:
        assert f"{BROWSER_COOKIE}=" in r.headers["Set-Cookie"] and "HttpOnly" in r.headers["Set-Cookie"]
    # a second session asks for its own export, never anyone else's; a logged-out session's link is dead
    eve_client = Client(url, verbose=False, headers={"Cookie": f"{BROWSER_COOKIE}={eve_browser}"})
    eve_link = url + re.search(r'href="([^"]+)"', eve_client.predict(other, api_name="/export")).group(1)
    service.logout(other)
    assert fetch(eve_link, eve_browser)[0] == 404
    assert not list(service.exports.export_dir.glob("*.json"))
    # an export not downloaded is removed within minutes (here: the limit set to a moment)
    service.exports.export_seconds = 0.2
    c.predict(token, api_name="/export")
    deadline = time.time() + 5
    while list(service.exports.export_dir.glob("*.json")) and time.time() < deadline:
        time.sleep(0.1)
    assert not list(service.exports.export_dir.glob("*.json"))
    service.exports.export_seconds = 300
    # nothing of the export went through Gradio's cache
    assert not [p for p in Path(servers["direct"][2].GRADIO_CACHE).rglob("*.json") if b"dora" in p.read_bytes()]


def test_users_choose_only_the_models_the_operator_lists(servers, tmp_path):
    from dataclasses import replace

    from siliconfriend.backends.registry import create_backend
    from siliconfriend.factory import model_choices, model_labels
    from siliconfriend.web.service import BackendPool

    _, service, _ = servers["direct"]
    token = service.account.signup("finn", "finn-password").token
    assert service.models.offered == {"openai": ["gpt-test"]}
    with pytest.raises(ValueError, match="not offered"):
        service.account.save_prefs(token, backend="hf", model="qwen")
    settings = replace(service.settings, web_models=("hf:smollm2", "openai:gpt-big=The big one"))
    assert model_choices(settings) == {"openai": ["gpt-test", "gpt-big"], "hf": ["smollm2"]}
    labels = model_labels(settings)
    assert labels["openai:gpt-big"] == "The big one" and "download" not in " ".join(labels.values())
    assert labels["hf:smollm2"].startswith("SmolLM2")

    built = []

    def slow_factory(name, **options):  # the real backend, built slowly, as a big model loads
        built.append(name)
        time.sleep(0.5)
        return create_backend(name, base_url="http://127.0.0.1:9/v1", api_key="unused", **options)

    pool = BackendPool(slow_factory)
    got = []
    threads = [threading.Thread(target=lambda: got.append(pool.get("openai", "gpt-big"))) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert built == ["openai"] and len(got) == 3 and got[0] is got[1] is got[2]

    def failing(name, **options):
        from siliconfriend.backends.base import BackendModelNotFound

        raise BackendModelNotFound("run `hf download Qwen/Qwen2.5-7B-Instruct` first")

    from siliconfriend.web.service import ModelUnavailable

    with pytest.raises(ModelUnavailable) as exc:
        BackendPool(failing).get("hf", "qwen")
    assert "hf download" not in str(exc.value) and "operator" in str(exc.value)


def test_the_data_home_is_private(tmp_path, e5_embedder):
    """The start of app.py and the CLI: umask 077, and what an older version left readable is
    tightened; the databases and the index made afterwards are private."""
    import os
    from datetime import datetime

    from memory.bank import MemoryBank
    from siliconfriend.accounts.users import Accounts
    from siliconfriend.core.private_files import make_private

    home = tmp_path / "home"
    (home / "users" / "old").mkdir(parents=True)
    (home / "users" / "old" / "memory.db").write_text("x")
    (home / "users" / "old" / "memory.db").chmod(0o644)
    (home / "users").chmod(0o755)
    before = os.umask(0o022)
    try:
        make_private(home)
        Accounts.at(home / "accounts.db", hasher=FAST_HASHER).close()
        bank = MemoryBank(SqliteStores(home), e5_embedder)
        bank.add_turn("zoe", "hello", "hi", datetime(2024, 5, 4))
        bank.close()
    finally:
        os.umask(before)
    found = list(home.rglob("*"))
    assert any(p.name == "accounts.db" for p in found) and any(p.name == "memory.db" for p in found)
    assert any(p.suffix == ".faiss" for p in found)
    for path in [home, *found]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
