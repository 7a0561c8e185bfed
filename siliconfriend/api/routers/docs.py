"""``/docs``: Swagger UI from the fastapi-offline package's files, served under the API's own
prefix, so that the page works without the internet."""

from __future__ import annotations

import importlib.util
import os

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.staticfiles import StaticFiles

DOCS_STATIC = "/docs/static"  # Swagger UI's script, style sheet and icon, under the API's prefix

router = APIRouter()


def swagger_ui_dir() -> str:
    """The folder of Swagger UI's files in the fastapi-offline package (found without importing
    it: only its files are used, with FastAPI's own docs page)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package is missing (pip install fastapi-offline): /v1/docs needs it")
    return os.path.join(next(iter(spec.submodule_search_locations)), "static")


def mount_static(app: FastAPI) -> None:
    """Swagger UI's files at ``DOCS_STATIC`` of ``app``."""
    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")


@router.get("/docs", include_in_schema=False)
def docs(request: Request):
    root = request.scope.get("root_path", "").rstrip("/")  # "/v1" where the API is mounted
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="SiliconFriend API",
        swagger_js_url=f"{root}{DOCS_STATIC}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOCS_STATIC}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOCS_STATIC}/favicon.png",
    )
