"""The HTTP side of the API: a FastAPI app, mounted under ``/v1`` on the web app's server (Gradio's
FastAPI app) or served alone by ``siliconfriend serve-api``.

OpenAI's chat-completions protocol (``POST /chat/completions``, streaming as server-sent events,
``GET /models``) and the memory API (``/memories``), with OpenAI's error shape for every refusal
(``errors.py``; a request that forces a tool call is refused with a 400: see ``tool_calls.py``). The routes are in
``routers/``, one module per resource. The description is at ``/v1/openapi.json``, a page at
``/v1/docs``.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import Mount

from . import errors
from .intake import MAX_BODY_BYTES
from .routers import chat, docs, memories, turns
from .service import ApiService

PREFIX = "/v1"


def build_api(api: ApiService) -> FastAPI:
    """The API's FastAPI app (its paths without the ``/v1`` prefix; ``mount`` adds it)."""
    app = FastAPI(
        title="SiliconFriend API",
        version="1",
        description="An OpenAI-compatible chat endpoint whose companion remembers (MemoryBank: "
        "retrieval, daily summaries, personality, forgetting), and the memory API. "
        "Authenticate with a per-user key: `Authorization: Bearer sf-...`.",
        openapi_url="/openapi.json",
        docs_url=None,  # routers/docs.py: Swagger UI's files served from here, not a CDN
        redoc_url=None,
    )
    app.state.api = api  # what routers.deps.service hands every route
    errors.install(app)
    docs.mount_static(app)
    for router in (docs.router, chat.router, turns.router, memories.router):
        app.include_router(router)
    return app


def mount(api: ApiService) -> Mount:
    """The API as a route for another Starlette / FastAPI app (the web app's), at ``/v1``."""
    return Mount(PREFIX, app=build_api(api))


def standalone_app(api: ApiService) -> FastAPI:
    """The API alone (``siliconfriend serve-api``): ``/v1/...``, and ``/`` saying where it is."""
    root = FastAPI(title="SiliconFriend API", openapi_url=None, docs_url=None, redoc_url=None, routes=[mount(api)])

    @root.get("/")
    def index():
        return {"siliconfriend": "OpenAI-compatible API", "base_url": f"{PREFIX}", "openapi": f"{PREFIX}/openapi.json"}

    return root


__all__ = ["build_api", "mount", "standalone_app", "PREFIX", "MAX_BODY_BYTES"]
