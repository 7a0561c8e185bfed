"""Fixtures for the API tests: the real API server (uvicorn on a free port of 127.0.0.1, one per
test module) over the real companion -- SQLite, FAISS, the e5 embedder, the day rollover -- with an
instant local chat backend (``api_helpers.LocalBackend``: the model's words do not matter here)."""
from __future__ import annotations

import pytest

from api_helpers import serve_api


@pytest.fixture(scope="module")
def served(tmp_path_factory, e5_embedder):
    """The API served alone (as by ``siliconfriend serve-api``) over a fresh home."""
    served, stop = serve_api(tmp_path_factory.mktemp("api") / "home", e5_embedder)
    yield served
    stop()
