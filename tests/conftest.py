"""Shared fixtures: the real packaged SmolLM2 (loaded once per test session) and a MemoryBank in a
temporary home with the default e5 embedder."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def e5_embedder():
    """The default embedder, e5-small (offline, shared: embedders are read-only once loaded)."""
    from memory.embedders import create_embedder

    return create_embedder("e5")


@pytest.fixture
def bank(tmp_path, e5_embedder):
    """An empty MemoryBank under ``tmp_path / "home"`` (default forgetting and retrieval settings)."""
    from memory.bank import MemoryBank

    bank = MemoryBank(tmp_path / "home", e5_embedder)
    yield bank
    bank.close()


@pytest.fixture(scope="session")
def smollm2_backend():
    """The packaged SmolLM2-135M-Instruct (``HFLocalChat`` preset "smollm2") on the CPU, loaded once
    per session. Greedy decoding, so that runs repeat; pass a small ``max_tokens`` to ``stream``
    (about 17 tokens a second on two cores) -- the default is 32."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from siliconfriend.backends.hf.chat import HFLocalChat

    return HFLocalChat("smollm2", temperature=0, max_new_tokens=32, device="cpu")


# fixtures that load the real SmolLM2 (directly or through another fixture)
SMOLLM2_FIXTURES = {"smollm2_backend", "smol"}


def pytest_collection_modifyitems(config, items):
    """Every test that loads SmolLM2 through a fixture is ``slow``, so that ``-m "not slow"``
    (``make test-fast``) runs only the tests that load no LLM; tests that load it themselves are
    marked where they are written."""
    for item in items:
        if SMOLLM2_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
