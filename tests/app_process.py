"""Waiting for an ``app.py`` started by a test in its own process."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_until_serving(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Returns once ``url`` answers 200; fails with the process's output if it exits first, or
    after ``timeout`` seconds."""
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
