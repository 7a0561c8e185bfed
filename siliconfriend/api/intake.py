"""What happens to a request before its route: the key first, then the body, bounded.

A request to the API with a body is authenticated from its headers before a byte of its body
is read: a client without a valid key gets its 401 (or 429) however
large a body it announces or streams. The body is then read here, up to ``MAX_BODY_BYTES``
whatever its framing (a ``Content-Length`` over it is refused at once, a chunked body as soon as
it passes it: 413), and handed to the route whole. The key's owner goes to the route with the
request (``request.state.owner``), so that a request is counted once against its key's limit.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..accounts.keys import KeyOwner
from .service import ApiError

MAX_BODY_BYTES = 8 * 1024 * 1024
# the paths under the API's prefix that need no key: the description and the docs page
PUBLIC = ("/openapi.json", "/docs")


def too_large() -> ApiError:
    return ApiError(413, f"the request is too large (at most {MAX_BODY_BYTES // 2**20} MiB)", code="request_too_large")


def route_path(scope: Scope) -> str:
    """The request's path under the app's mount (``/v1`` taken off)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class Intake:
    """ASGI middleware of the API's app, whose service (``app.state.api``) authenticates:
    ``ApiService.authenticate`` gives the key's owner or raises an ``ApiError``."""

    def __init__(self, app: ASGIApp):
        self.app = app

    @staticmethod
    def authenticate(scope: Scope, authorization: str | None, client: str | None) -> KeyOwner:
        return scope["app"].state.api.authenticate(authorization, client)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if any(path == p or path.startswith(p + "/") for p in PUBLIC):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if "transfer-encoding" not in headers and headers.get("content-length", "0").strip() in ("", "0"):
            await self.app(scope, receive, send)  # no body: the route authenticates (a 404 stays one)
            return
        client = scope.get("client")
        try:
            # on the event loop: a digest and one indexed read, cheaper than a hop to a thread
            owner = self.authenticate(scope, headers.get("authorization"), client[0] if client else None)
            body = await read_body(headers, receive)
        except ApiError as exc:
            # the body left unread: the connection is closed after the answer, not read to its end
            await refuse(exc, scope, receive, send, close=True)
            return
        scope.setdefault("state", {})["owner"] = owner
        await self.app(scope, replay(body, receive), send)


async def read_body(headers: dict[str, str], receive: Receive) -> bytes | None:
    """The request's body, read whole up to ``MAX_BODY_BYTES`` (413 past it); None where the
    request has none."""
    size = headers.get("content-length")
    if size is not None:
        if not size.strip().isdigit():
            raise ApiError(400, "Content-Length is not a number", param=None)
        if int(size) > MAX_BODY_BYTES:
            raise too_large()
        if int(size) == 0:
            return None
    elif "transfer-encoding" not in headers:
        return None
    parts: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise too_large()
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def replay(body: bytes | None, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """The ``receive`` of a request whose body was read: the body once, then the connection's own
    messages (a disconnect, which a streaming reply listens for)."""
    if body is None:
        return receive
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def refuse(exc: ApiError, scope: Scope, receive: Receive, send: Send, *, close: bool) -> None:
    from fastapi.responses import JSONResponse

    headers: dict[str, Any] = dict(exc.headers)
    if close:
        headers["Connection"] = "close"
    await JSONResponse(exc.body(), status_code=exc.status, headers=headers)(scope, receive, send)


__all__ = ["Intake", "MAX_BODY_BYTES", "PUBLIC"]
