"""Reading JSON Lines files whose errors name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line; a line that is not JSON is a ValueError
    that says ``path:line``."""
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            yield n, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
