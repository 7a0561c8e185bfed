"""``python app.py`` as a user starts it: host and port from the flags or from Gradio's variables,
data under $SILICONFRIEND_HOME, nothing served without a session."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from conftest import ROOT, free_port


def _serve(tmp_path, args: list[str], extra_env: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, "SILICONFRIEND_HOME": str(tmp_path / "home"),
           # a remote backend that is never reached: the app starts without loading a local model
           "SILICONFRIEND_BACKEND": "openai", "OPENAI_API_KEY": "test-key",
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", **extra_env}
    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "GRADIO_SHARE"):
        if name not in extra_env:
            env.pop(name, None)
    return subprocess.Popen([sys.executable, str(ROOT / "app.py"), *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"app.py exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"app.py did not answer on {url}")


@pytest.mark.parametrize("how", ["flags", "gradio-env"])
def test_app_py_serves_on_the_given_port(tmp_path, how):
    port = free_port()
    if how == "flags":
        proc = _serve(tmp_path, ["--host", "127.0.0.1", "--port", str(port)], {})
    else:
        proc = _serve(tmp_path, [], {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)})
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait(url, proc)
        client = Client(url, verbose=False)
        with pytest.raises(AppError, match="log in"):
            client.predict("", api_name="/whoami")
        token, _, message = client.predict("dora", "dora-password", "en", api_name="/signup")
        assert token and not message
        assert client.predict(token, api_name="/whoami") == "dora"
        assert (tmp_path / "home" / "accounts.db").exists()
        # a model that cannot be reached is a clear message in the chat, not a crash
        if how == "flags":
            chat, box, _ = client.predict(token, "hello?", api_name="/chat")
            assert box == "hello?" and "⚠️" in str(chat[-1]["content"])
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert "gradio.live" not in proc.stdout.read()
