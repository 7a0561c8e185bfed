"""The HTTP side of the API: a FastAPI app, mounted under ``/v1`` on the web app's server (Gradio's
FastAPI app) or served alone by ``siliconfriend serve-api``.

OpenAI's chat-completions protocol (``POST /chat/completions``, streaming as server-sent events,
``GET /models``) and the memory API (``/memories``), with OpenAI's error shape for every refusal:
``{"error": {"message", "type", "param", "code"}}`` and 400 / 401 / 404 / 429 / 503 (tool calling
is refused with a 400: see ``tool_calls.py``). The
description is at ``/v1/openapi.json``, a page at ``/v1/docs``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from typing import Any, AsyncIterator, Generator

import anyio
import anyio.lowlevel
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ..accounts.keys import KeyOwner
from . import footnote
from .service import MODEL_ID, ApiError, ApiService, Completion, Switches
from .tool_calls import refuse_tool_calling

log = logging.getLogger("siliconfriend.api")

MAX_BODY_BYTES = 8 * 1024 * 1024
PREFIX = "/v1"
DOCS_STATIC = "/docs/static"  # Swagger UI's script, style sheet and icon, under the API's prefix


def swagger_ui_dir() -> str:
    """The folder of Swagger UI's files in the fastapi-offline package (found without importing
    it: only its files are used, with FastAPI's own docs page)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package is missing (pip install fastapi-offline): /v1/docs needs it")
    return os.path.join(next(iter(spec.submodule_search_locations)), "static")


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str = Field(description="system, user or assistant")
    content: str | list[dict[str, Any]] | None = Field(None, description="text, or a list of content parts")


class ChatCompletionRequest(BaseModel):
    """OpenAI's request; fields the companion does not use (temperature, top_p...) are accepted."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(MODEL_ID, description="any name; the companion answers with the configured backend")
    messages: list[ChatMessageIn] = Field(description="the chat so far; the last one is the user's turn")
    stream: bool = False
    n: int | None = Field(None, description="only 1")
    stream_options: dict[str, Any] | None = None
    siliconfriend: dict[str, Any] | None = Field(
        None,
        description='SiliconFriend\'s switches: {"task": "title"} (a chat app\'s own request: answered, '
        'never remembered; as the X-SiliconFriend-Task header), {"memory": "off"} (answered with the '
        "companion's memory, nothing written or reinforced) or \"on\" (a turn of the person's even "
        "where it looks like a task); as the X-SiliconFriend-Memory header; "
        '{"show_memories": true}: the "what I remembered" footnote (X-SiliconFriend-Show-Memories)',
    )


def openai_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
) -> JSONResponse:
    return JSONResponse(
        ApiError(status, message, type=type, code=code, param=param).body(), status_code=status, headers=headers
    )


def client_of(request: Request) -> str | None:
    return request.client.host if request.client else None


def build_api(api: ApiService) -> FastAPI:
    """The API's FastAPI app (its paths without the ``/v1`` prefix; ``mount`` adds it)."""
    app = FastAPI(
        title="SiliconFriend API",
        version="1",
        description="An OpenAI-compatible chat endpoint whose companion remembers (MemoryBank: "
        "retrieval, daily summaries, personality, forgetting), and the memory API. "
        "Authenticate with a per-user key: `Authorization: Bearer sf-...`.",
        openapi_url="/openapi.json",
        docs_url=None,  # /docs below, with Swagger UI's files served from here, not a CDN
        redoc_url=None,
    )
    bearer = HTTPBearer(auto_error=False, description="a per-user API key, sf-...")

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid request"))
        return openai_error(400, f"invalid request: {message}", param=where or None)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return openai_error(exc.status_code, str(exc.detail), code=code)

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception):
        log.exception("API request %s %s failed", request.method, request.url.path)
        return openai_error(
            500,
            "the server failed on this request (it is logged); nothing was changed by it unless the reply said so",
            type="server_error",
            code="internal_error",
        )

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size and size.isdigit() and int(size) > MAX_BODY_BYTES:
            return openai_error(
                413, f"the request is too large (at most {MAX_BODY_BYTES // 2**20} MiB)", code="request_too_large"
            )
        return await call_next(request)

    async def owner(request: Request, _=Depends(bearer)) -> KeyOwner:
        # on the event loop: a digest and one indexed SQLite read, cheaper than a hop to a thread
        return api.authenticate(request.headers.get("authorization"), client_of(request))

    # -- the docs page: Swagger UI from the fastapi-offline package (works without the internet) --
    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request):
        root = request.scope.get("root_path", "").rstrip("/")  # "/v1" where the API is mounted
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title="SiliconFriend API",
            swagger_js_url=f"{root}{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_STATIC}/favicon.png",
        )

    # -- chat ---------------------------------------------------------------------------------
    @app.get("/models", summary="The models: one, the companion")
    def models(who: KeyOwner = Depends(owner)):
        return {"object": "list", "data": api.models()}

    @app.get("/models/{model_id}", summary="One model")
    def model(model_id: str, who: KeyOwner = Depends(owner)):
        found = [m for m in api.models() if m["id"] == model_id]
        if not found:
            raise ApiError(404, f"no model {model_id[:60]!r}: the model is {MODEL_ID!r}", code="model_not_found")
        return found[0]

    @app.post("/chat/completions", summary="One turn with the companion (streaming or not)")
    def chat_completions(body: ChatCompletionRequest, request: Request, who: KeyOwner = Depends(owner)):
        if body.n not in (None, 1):
            raise ApiError(400, "n must be 1: the companion gives one reply per turn", param="n")
        messages = footnote.strip_footnotes([m.model_dump() for m in body.messages])
        refuse_tool_calling(body.model_extra or {}, messages)  # a 400 that names the setting to change
        headers = {k.lower(): v for k, v in request.headers.items()}
        show = footnote.wanted(headers, body.siliconfriend)
        switches = Switches.of(headers, body.siliconfriend)
        completion = api.start_chat(who.user, messages, model=body.model, switches=switches)
        if not body.stream:
            done = api.finish(completion)
            if show:
                done["choices"][0]["message"]["content"] += footnote.of_completion(completion)
            return JSONResponse(done)
        usage = bool((body.stream_options or {}).get("include_usage"))
        return ClosingStreamingResponse(
            sse_body(api, completion, usage, show_memories=show),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/turns/{turn_id}", summary='One stored turn and what its reply remembered ("what I remembered")')
    def turn(turn_id: str, who: KeyOwner = Depends(owner)):
        return api.turn(who.user, turn_id)

    # -- memories -----------------------------------------------------------------------------
    @app.get("/memories", summary="The user's memories, newest day first, a page at a time")
    def memories(
        who: KeyOwner = Depends(owner),
        kind: str | None = None,
        state: str | None = None,
        day: str | None = Query(None, description="YYYY-MM-DD"),
        limit: int = Query(50, description="1 to 200"),
        offset: int = 0,
    ):
        return api.list_memories(who.user, kind=kind, state=state, day=day, limit=limit, offset=offset)

    @app.get("/memories/search", summary="Search the user's memories (the companion's retrieval, with reasons)")
    def search(
        q: str = Query(..., description="what to look for"),
        limit: int = 10,
        include_archived: bool = False,
        who: KeyOwner = Depends(owner),
    ):
        return api.search(who.user, q, limit=limit, include_archived=include_archived)

    @app.get("/memories/export", summary="Everything of the user: MemoryBank JSON plus SiliconFriend's fields")
    def export(who: KeyOwner = Depends(owner)):
        return api.export(who.user)

    @app.get("/memories/{memory_id}", summary="One memory")
    def get_memory(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.get(who.user, memory_id)

    @app.post("/memories/{memory_id}/pin", summary="Pin: it never fades")
    def pin(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.pin(who.user, memory_id, True)

    @app.post("/memories/{memory_id}/unpin", summary="Unpin: it fades again")
    def unpin(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.pin(who.user, memory_id, False)

    @app.post("/memories/{memory_id}/archive", summary="Archive (as forgetting would): kept, not retrieved")
    def archive(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.archive(who.user, memory_id)

    @app.post("/memories/{memory_id}/restore", summary="Bring an archived memory back, as if just recalled")
    def restore(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.restore(who.user, memory_id)

    @app.delete("/memories/{memory_id}", summary="Delete for good")
    def delete(memory_id: str, who: KeyOwner = Depends(owner)):
        return api.delete(who.user, memory_id)

    return app


def _event(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def sse_chunks(
    api: ApiService, completion: Completion, usage: bool, *, show_memories: bool = False
) -> Generator[str, None, None]:
    """The turn as OpenAI's ``chat.completion.chunk`` events: the first carries the role and the
    memories used, the last the finish reason and the stored turn; a backend failure mid-reply
    is an ``error`` event (the OpenAI SDK raises it). ``show_memories``: the "what I remembered"
    footnote comes as a last piece of content (``footnote.py``)."""

    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        return {
            "id": completion.id,
            "object": "chat.completion.chunk",
            "created": completion.created,
            "model": completion.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    stream = completion.stream
    chunks = iter(stream)
    parts: list[str] = []
    try:
        first = completion.first or ""
        parts.append(first)
        yield _event(chunk({"role": "assistant", "content": first}, siliconfriend={"memories": completion.remembered}))
        for piece in chunks:
            parts.append(piece)
            yield _event(chunk({"content": piece}))
        result = stream.result
        if result is None or result.error:
            message = result.error if result else "the reply did not finish"
            yield _event(
                {"error": {"message": message, "type": "server_error", "param": None, "code": "backend_unavailable"}}
            )
            return
        note = footnote.of_completion(completion) if show_memories else ""
        if note:
            yield _event(chunk({"content": note}))
        end = _event(chunk({}, "stop", siliconfriend=api.extension(completion)))
        if usage:
            end += _event(
                {
                    "id": completion.id,
                    "object": "chat.completion.chunk",
                    "created": completion.created,
                    "model": completion.model,
                    "choices": [],
                    "usage": api.usage(completion, result.reply),
                }
            )
        yield end + _event("[DONE]")  # one write for the end (each chunk is a hop to a thread)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # a client that went away: the companion keeps what came so far


async def sse_body(
    api: ApiService, completion: Completion, usage: bool, *, show_memories: bool = False
) -> AsyncIterator[str]:
    """``sse_chunks`` for the server, each chunk taken on a worker thread. A client that goes away
    (a stop button, a closed tab) cancels this at its next chunk: the reply is stopped there and
    the turn stored at once with what came so far, marked as stopped, instead of whenever the
    abandoned generator would have been collected."""
    chunks = sse_chunks(api, completion, usage, show_memories=show_memories)
    try:
        while True:
            piece = await anyio.to_thread.run_sync(next, chunks, None)
            # a cancel while the thread ran (a disconnect) waited for it: it is raised here
            await anyio.lowlevel.checkpoint()
            if piece is None:
                return
            yield piece
    finally:
        if completion.stream.result is None:
            completion.stream.stop()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(chunks.close)


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that closes its body when it ends, however it ends: a client that
    went away leaves the body suspended, and its ``finally`` (``sse_body``) must run now."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()


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


__all__ = ["build_api", "mount", "standalone_app", "sse_chunks", "sse_body", "PREFIX"]
