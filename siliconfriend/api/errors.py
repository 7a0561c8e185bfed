"""OpenAI's error shape for every refusal the API makes, and the guards every request passes
before a route (``intake.py``): ``{"error": {"message", "type", "param", "code"}}`` with 400 / 401 / 404 / 413 /
429 / 500 / 503."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .service import ApiError

log = logging.getLogger("siliconfriend.api")


def response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def on_api_error(request: Request, exc: ApiError) -> JSONResponse:
    return response(exc)


async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":  # its place is a byte offset, not a parameter
        return response(
            ApiError(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'cannot parse it')})")
        )
    loc = list(first.get("loc", ()))
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]  # where it came from; the parameter is named by the rest
    where = ".".join(str(p) for p in loc)
    message = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid request"))
    return response(ApiError(400, f"invalid request: {message}", param=where or None))


async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return response(ApiError(exc.status_code, str(exc.detail), code=code))


async def on_crash(request: Request, exc: Exception) -> JSONResponse:
    log.exception("API request %s %s failed", request.method, request.url.path)
    return response(
        ApiError(
            500,
            "the server failed on this request (it is logged); nothing was changed by it unless the reply said so",
            type="server_error",
            code="internal_error",
        )
    )


def install(app: FastAPI) -> None:
    """Every refusal of ``app`` in OpenAI's shape, and a request's key and body checked first
    (``intake.py``)."""
    from .intake import Intake

    app.add_exception_handler(ApiError, on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, on_http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, on_crash)
    app.add_middleware(Intake)
