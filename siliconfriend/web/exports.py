"""Export tickets: a user's data written to a private file that one download link fetches once,
only to the browser that asked, while the session lasts and for a few minutes at most."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

from memory.bank import MemoryBank, user_key
from memory.memorybank_format import export_person

from ..accounts.users import Accounts
from ..config import Settings
from ..core.private_files import tighten
from .account_service import AccountService

EXPORT_DIR = Path(tempfile.gettempdir()) / "siliconfriend-exports"  # used only without a home


def user_export(bank: MemoryBank, accounts: Accounts, user: str, now: datetime) -> dict:
    """Everything of ``user`` (``memorybank_format.export_person``), with their preferences."""
    return export_person(bank, user, now, accounts.prefs(user))


@dataclass
class _Export:
    user: str
    token: str
    browser: str | None  # the cookie of the browser that asked (web/client.py); None: no browser
    path: Path
    expires: float
    timer: threading.Timer | None = field(default=None, repr=False)


class ExportTickets:
    def __init__(self, settings: Settings, account: AccountService, bank: MemoryBank, clock: Callable[[], datetime]):
        self.account = account
        self.accounts = account.accounts
        self.bank = bank
        self.clock = clock
        self._exports: dict[str, _Export] = {}  # ticket -> the export it names
        self._exports_lock = threading.Lock()
        self.export_dir = settings.home / "exports" if settings.home else EXPORT_DIR
        self.export_seconds = settings.export_minutes * 60

    def export_data(self, token: str) -> dict:
        """Everything of this user (see ``user_export``)."""
        return user_export(self.bank, self.accounts, self.account.user(token), self.clock())

    def export_file(self, token: str, browser: str | None = None) -> str:
        """Write this user's export (0600, in a 0700 folder of the data home) and return the
        ticket that downloads it once (``take_export``): only to the browser that asked (its
        ``browser`` cookie), while this session lasts, and at most ``export_minutes`` after; then
        the file is deleted."""
        user = self.account.user(token)
        data = self.export_data(token)
        self.sweep_exports()
        root = self._export_root()
        ticket = secrets.token_urlsafe(24)
        path = root / f"{ticket}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=2)
        export = _Export(user, token, browser, path, time.monotonic() + self.export_seconds)
        export.timer = threading.Timer(self.export_seconds + 1, self.sweep_exports)
        export.timer.daemon = True
        export.timer.start()
        with self._exports_lock:
            self._exports[ticket] = export
        return ticket

    def take_export(self, ticket: str, browser: str | None = None) -> tuple[str, bytes] | None:
        """(file name, content) of the export ``ticket`` names, once, to the browser that asked
        for it; None when the ticket is unknown, used, expired, its session has ended, or
        ``browser`` is not the one that asked (then the ticket stays good for its owner)."""
        with self._exports_lock:
            export = self._exports.get(ticket) if isinstance(ticket, str) else None
            if export is None or export.browser is None or browser != export.browser:
                return None
            self._exports.pop(ticket)
        try:
            if time.monotonic() > export.expires or self.accounts.user_for(export.token) != export.user:
                return None
            return f"siliconfriend-{user_key(export.user)}.json", export.path.read_bytes()
        except OSError:
            return None
        finally:
            self._drop_export(export)

    def sweep_exports(self) -> None:
        """Delete the exports that expired or whose session ended."""
        with self._exports_lock:
            stale = [
                t
                for t, e in self._exports.items()
                if time.monotonic() > e.expires or self.accounts.user_for(e.token) != e.user
            ]
            dropped = [self._exports.pop(t) for t in stale]
        for export in dropped:
            self._drop_export(export)

    @staticmethod
    def _drop_export(export: _Export) -> None:
        if export.timer is not None:
            export.timer.cancel()
        export.path.unlink(missing_ok=True)

    def _export_root(self) -> Path:
        self.export_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tighten(self.export_dir)
        return self.export_dir

    def clear_exports(self) -> None:
        """At start: exports left by a previous run (a crash) are deleted."""
        if self.export_dir.is_dir():
            for path in self.export_dir.glob("*.json"):
                path.unlink(missing_ok=True)

    def forget(self, user: str, extra_dirs: Sequence[Path] = ()) -> None:
        """A deleted account: its pending exports, and any copy of its export file left in the
        export folder or ``extra_dirs`` (e.g. a copy an older version left), are deleted."""
        with self._exports_lock:
            mine = [t for t, e in self._exports.items() if e.user == user]
            dropped = [self._exports.pop(t) for t in mine]
        for export in dropped:
            self._drop_export(export)
        name = f"siliconfriend-{user_key(user)}.json"
        for root in [self.export_dir, *extra_dirs]:
            if Path(root).is_dir():
                for copy in Path(root).rglob(name):
                    copy.unlink(missing_ok=True)
