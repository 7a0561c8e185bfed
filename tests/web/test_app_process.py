"""``python app.py`` as a user starts it: host and port from the flags or from Gradio's variables,
data under $SILICONFRIEND_HOME, nothing served without a session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from app_process import wait_until_serving
from conftest import ROOT, free_port
from gradio_client import Client
from gradio_client.exceptions import AppError


def _serve(tmp_path, args: list[str], extra_env: dict[str, str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "SILICONFRIEND_HOME": str(tmp_path / "home"),
        # a remote backend that is never reached: the app starts without loading a local model
        "SILICONFRIEND_BACKEND": "openai",
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        **extra_env,
    }
    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "GRADIO_SHARE"):
        if name not in extra_env:
            env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_app_py_serves_on_the_given_port(tmp_path):
    """Host and port from the flags, and from Gradio's variables: two apps, started side by side."""
    apps = {}
    for how in ("flags", "gradio-env"):
        port, folder = free_port(), tmp_path / how
        folder.mkdir()
        if how == "flags":
            proc = _serve(folder, ["--host", "127.0.0.1", "--port", str(port)], {})
        else:
            # this one on the packaged demo model: its start-up log names the setting for a real one
            env = {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "SILICONFRIEND_BACKEND": "hf"}
            proc = _serve(folder, [], env)
        apps[how] = (proc, f"http://127.0.0.1:{port}/", folder)
    try:
        for how, (proc, url, folder) in apps.items():
            wait_until_serving(url, proc)
            client = Client(url, verbose=False)
            with pytest.raises(AppError, match="log in"):
                client.predict("", api_name="/whoami")
            token, _, message = client.predict("dora", "dora-password", "en", api_name="/signup")
            assert token and not message
            assert client.predict(token, api_name="/whoami") == "dora"
            assert (folder / "home" / "accounts.db").exists()
            # a model that cannot be reached is a clear message in the chat, not a crash
            if how == "flags":
                chat, box, _ = client.predict(token, "hello?", api_name="/chat")
                assert box == "hello?" and "⚠️" in str(chat[-1]["content"])
    finally:
        for proc, _, _ in apps.values():
            proc.terminate()
        for proc, _, _ in apps.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    logs = {how: proc.stdout.read() for how, (proc, _, _) in apps.items()}
    assert not any("gradio.live" in log for log in logs.values())
    assert "demo model" in logs["gradio-env"] and "OPENAI_API_KEY" in logs["gradio-env"]
    assert "Ollama" in logs["gradio-env"] and "vLLM" in logs["gradio-env"]
    assert "demo model" not in logs["flags"]


@pytest.mark.parametrize("server", ["app.py", "serve-api"])
def test_a_stopped_server_leaves_no_write_ahead_log(tmp_path, e5_embedder, server):
    """SIGTERM (a service manager's stop) ends either server cleanly: the memory stores are closed
    and their write-ahead logs moved into the databases, not left beside them."""
    import signal
    from datetime import datetime

    import httpx

    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.accounts.keys import ApiKeys
    from siliconfriend.accounts.users import Accounts

    home = tmp_path / "home"
    accounts = Accounts.at(home / "accounts.db")
    accounts.signup("dora", "dora-password")
    key = ApiKeys(accounts).create("dora", "test").key
    accounts.close()
    bank = MemoryBank(SqliteStores(home), e5_embedder)
    ids = [
        bank.add_turn("dora", f"Note {i} about my garden.", "Nice.", datetime(2024, 5, 1, 9, i)).id for i in range(3)
    ]
    bank.close()
    port = free_port()
    if server == "app.py":
        proc = _serve(tmp_path, ["--host", "127.0.0.1", "--port", str(port)], {})
        base = f"http://127.0.0.1:{port}"
    else:
        env = {**os.environ, "SILICONFRIEND_HOME": str(home), "SILICONFRIEND_BACKEND": "openai"}
        env.update(OPENAI_API_KEY="test-key", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
        command = [sys.executable, "-m", "siliconfriend.cli", "serve-api", "--host", "127.0.0.1", "--port", str(port)]
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(f"{base}/v1/openapi.json", proc)
        for i in range(20):
            got = httpx.post(
                f"{base}/v1/memories/{ids[i % 3]}/{'pin' if i % 2 == 0 else 'unpin'}",
                headers={"Authorization": f"Bearer {key}"},
                timeout=60,
            )
            assert got.status_code == 200, got.text
        logs = list(home.rglob("memory.db-wal"))
        assert logs and logs[0].stat().st_size > 0  # the writes are in the log while it runs
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
    left = [(p, p.stat().st_size) for p in home.rglob("*.db-wal") if p.stat().st_size > 0]
    assert left == [], proc.stdout.read()[-2000:]
