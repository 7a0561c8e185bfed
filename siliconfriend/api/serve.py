"""``siliconfriend serve-api``: the API alone (the web app serves it too, under /v1)."""

from __future__ import annotations

import sys

from ..config import Settings
from ..factory import build_api_service
from .routes import standalone_app


def serve(settings: Settings, *, host: str | None = None, port: int | None = None) -> int:
    """Serve the API on 127.0.0.1 unless told otherwise; the companion is built on the first chat."""
    import uvicorn

    api = build_api_service(settings)
    host = host or settings.host
    port = port or settings.api_port
    print(
        f"SiliconFriend API: data in {settings.home}; base URL http://{host}:{port}/v1 (OpenAPI at /v1/openapi.json)",
        file=sys.stderr,
    )
    uvicorn.run(standalone_app(api), host=host, port=port, log_level="info")
    return 0
