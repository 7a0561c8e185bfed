"""What the web app does, without Gradio, as four services a page uses by name:

* ``account`` (``account_service.AccountService``): sessions, preferences, API keys;
* ``chat`` (``chat_sessions.ChatSessions``): replies being generated, the companion per user;
* ``memory_page`` (``memory_service.MemoryPageService``): memories, summaries, curves;
* ``exports`` (``exports.ExportTickets``): the one-time download of a user's data.

Every method takes the client's session token and turns it into a user name on the server
(``AccountService.user``), and only ever touches that user's data. ``WebService`` builds them
over one accounts store, one memory bank and one companion, and does what spans them: logging
out and deleting an account. The Gradio layer (``app.py``, ``web/chat.py``, ``web/memory_page.py``,
``web/account_page.py``) only adapts their results to components; tests drive them directly.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from memory.bank import MemoryBank

from ..accounts.keys import ApiKeys
from ..accounts.users import Accounts
from ..config import Settings
from ..core.companion import Companion
from .account_service import AccountService, ModelChoices, NotLoggedIn
from .chat_sessions import BackendPool, ChatSessions, ModelUnavailable
from .client import proxy_networks
from .exports import ExportTickets
from .memory_service import MemoryPageService


class WebService:
    def __init__(
        self,
        settings: Settings,
        accounts: Accounts,
        bank: MemoryBank,
        *,
        companion: Companion | None = None,
        companion_factory: Callable[[], Companion] | None = None,
        clock: Callable[[], datetime] | None = None,
        build_backend: Callable[..., Any] | None = None,
        choices: dict[str, list[str]] | None = None,
        labels: dict[str, str] | None = None,
        api_keys: ApiKeys | None = None,
    ):
        """``build_backend`` (how a model a user picks is built; kept in a ``BackendPool``),
        ``choices`` (the models a user may pick) and ``labels`` ("backend:model" -> the name users
        see) come from ``factory.build_web_service``; without them only the companion's own model
        is offered. ``api_keys`` when the app serves the API (``app.api_routes`` sets them)."""
        self.settings = settings
        self.accounts = accounts
        self.bank = bank
        self.clock = clock or (companion.clock if companion is not None else datetime.now)
        self.models = ModelChoices.of(settings, choices, labels)
        self.trusted_proxies = proxy_networks(settings.trusted_proxies)
        self.account = AccountService(settings, accounts, self.models, api_keys)
        self.chat = ChatSessions(
            self.account,
            bank,
            companion=companion,
            companion_factory=companion_factory,
            backends=BackendPool(build_backend) if build_backend is not None else None,
        )
        self.memory_page = MemoryPageService(settings, self.account, bank, self.chat, self.clock)
        self.exports = ExportTickets(settings, self.account, bank, self.clock)
        # an export written before a deletion holds the deleted words: it is not handed out
        bank.on_delete.append(lambda user, ids: self.exports.forget(user))

    @property
    def companion(self) -> Companion:
        return self.chat.companion

    def now(self) -> datetime:
        return self.clock()

    def logout(self, token: str | None) -> None:
        """The session ends; a reply it was generating stops (and is kept as far as it got)."""
        if self.accounts.user_for(token) and token is not None:
            self.chat.stop(token)
        self.accounts.logout(token)

    def delete_account(
        self, token: str, password: str, *, extra_dirs: Sequence[Path] = (), client: str | None = None
    ) -> None:
        """The account, its sessions, every memory and file: gone. Needs the password again."""
        user = self.account.user(token)
        self.accounts.verify_password(user, password, client=client)
        self.chat.forget(user)
        self.bank.delete_user(user)
        self.exports.forget(user, extra_dirs)
        self.accounts.delete(user)


__all__ = [
    "WebService",
    "NotLoggedIn",
    "BackendPool",
    "ModelUnavailable",
]
