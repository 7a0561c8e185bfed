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


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread():
    """One intra-op thread for PyTorch (the e5 embedder) while these tests run, as in tests/web: the
    server and the client share one process on a 2-core machine often busy with other jobs, and
    there an e5 pass on two threads (whose team FAISS resizes to one in the same thread) was seen
    to take 10 s instead of 0.07 s at load 5. Restored afterwards."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
