"""The API built from settings: beside the web app (one process, one companion) or alone."""
from __future__ import annotations

import logging
import sys
import threading
from datetime import datetime
from typing import Any, Callable

from ..config import Settings
from ..web.accounts import Accounts
from .keys import ApiKeys
from .routes import standalone_app
from .service import ApiService

log = logging.getLogger("siliconfriend.api")


def make_api_service(settings: Settings, *, clock: Callable[[], datetime] | None = None,
                     companion: Any = None, accounts: Accounts | None = None) -> ApiService:
    """Accounts, the memory bank and (built on the first chat) the companion, from settings."""
    from ..factory import build_bank, build_companion
    bank = companion.bank if companion is not None else build_bank(settings, progress=None)
    accounts = accounts or Accounts(settings.home / "accounts.db", signup_open=settings.signup_open)
    built: list = [companion] if companion is not None else []
    lock = threading.Lock()

    def the_companion():
        with lock:   # one companion (and one model load) however many requests come at once
            if not built:
                built.append(build_companion(settings, clock=clock, bank=bank))
            return built[0]

    return ApiService(settings, accounts, bank, companion=the_companion, keys=ApiKeys(accounts), clock=clock)


def serve(settings: Settings, *, host: str | None = None, port: int | None = None) -> int:
    """``siliconfriend serve-api``: the API alone, on 127.0.0.1 unless told otherwise."""
    import uvicorn
    api = make_api_service(settings)
    host = host or settings.host
    port = port or settings.api_port
    print(f"SiliconFriend API: data in {settings.home}; base URL http://{host}:{port}/v1 "
          f"(OpenAPI at /v1/openapi.json)", file=sys.stderr)
    uvicorn.run(standalone_app(api), host=host, port=port, log_level="info")
    return 0
