"""Choosing and building backends by name, with lazy imports and clear errors."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from siliconfriend.backends.base import BackendError, ChatBackend
from siliconfriend.backends.registry import (
    BACKENDS,
    backend_class,
    backend_names,
    create_backend,
    require,
)
from siliconfriend.config import Settings
from siliconfriend.factory import build_backend


class Recorder:
    """Stands in for HFLocalChat so that the choice logic is tested without loading a model."""

    name = "hf"
    context_tokens = 8192

    def __init__(self, model, **options):
        self.model, self.options = model, options

    def stream(self, messages, *, max_tokens=None):
        yield ""

    def count_tokens(self, text):
        return 0


@pytest.fixture
def fake_hf(monkeypatch):
    import siliconfriend.backends.hf.chat as hf_local

    monkeypatch.setattr(hf_local, "HFLocalChat", Recorder)
    return Recorder


def test_registry_names_and_paths():
    assert BACKENDS == {
        "openai": "siliconfriend.backends.openai_chat:OpenAIChat",
        "hf": "siliconfriend.backends.hf.chat:HFLocalChat",
        "langchain": "siliconfriend.backends.langchain_chat:LangChainChat",
    }
    assert backend_names() == ["hf", "langchain", "openai"]
    for name in BACKENDS:
        assert backend_class(name).name == name


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(BackendError, match="unknown backend 'gemini'; known backends: hf, langchain, openai"):
        create_backend("gemini")


def _settings_from(monkeypatch, tmp_path, **variables) -> Settings:
    """Settings as a user's shell gives them: only ``variables`` set among the OpenAI ones."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "SILICONFRIEND_BACKEND", "SILICONFRIEND_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return Settings.load(home=tmp_path / "home")


def test_default_is_openai_when_a_key_is_set(monkeypatch, tmp_path):
    settings = _settings_from(monkeypatch, tmp_path, OPENAI_API_KEY="sk-test", OPENAI_MODEL="gpt-4o")
    assert settings.default_backend == "openai"
    backend = build_backend(settings, temperature=0.1)
    assert isinstance(backend, ChatBackend)
    assert (backend.name, backend.model, backend.temperature) == ("openai", "gpt-4o", 0.1)
    assert backend.base_url == "https://api.openai.com/v1"


def test_default_without_key_is_the_embedded_model_with_a_notice(monkeypatch, tmp_path, caplog, fake_hf):
    settings = _settings_from(monkeypatch, tmp_path, OPENAI_API_KEY="")  # an empty key is no key
    assert settings.default_backend == "hf"
    with caplog.at_level(logging.WARNING, logger="siliconfriend.backends"):
        backend = build_backend(settings, max_new_tokens=5)
    assert isinstance(backend, Recorder)
    assert backend.model == "smollm2" and backend.options == {"adapter": None, "max_new_tokens": 5}
    notices = [r for r in caplog.records if "English-only" in r.getMessage()]
    assert len(notices) == 1 and "\n" not in notices[0].getMessage()


def test_hf_with_a_model_and_adapter(fake_hf, caplog):
    with caplog.at_level(logging.WARNING, logger="siliconfriend.backends"):
        backend = create_backend("HF", model="qwen", adapter="/tmp/adapter")
    assert backend.model == "qwen" and backend.options["adapter"] == "/tmp/adapter"
    assert "English-only" not in caplog.text


def test_adapter_only_for_hf():
    with pytest.raises(BackendError, match="only be used with the local 'hf' backend"):
        create_backend("openai", adapter="/tmp/adapter")


def test_langchain_needs_a_model_and_builds_one():
    pytest.importorskip("langchain_core")
    with pytest.raises(BackendError, match="needs a chat model"):
        create_backend("langchain")
    backend = create_backend(
        "langchain", model="langchain_core.language_models.fake_chat_models:FakeListChatModel", responses=["hi"]
    )
    assert backend.name == "langchain" and "".join(backend.stream([])) == "hi"


def test_missing_dependency_gives_an_install_hint(monkeypatch):
    with pytest.raises(BackendError, match="pip install some-package"):
        require("siliconfriend_no_such_module", "some-package")
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the SDK were not installed
    with pytest.raises(BackendError, match="pip install openai"):
        create_backend("openai", api_key="k")


def test_a_broken_backend_path_is_not_hidden(monkeypatch):
    monkeypatch.setitem(BACKENDS, "broken", "siliconfriend.backends.does_not_exist:Nope")
    with pytest.raises(ModuleNotFoundError):  # our own bug, not a missing dependency: not hidden
        backend_class("broken")


def test_importing_the_registry_loads_no_heavy_dependency():
    code = (
        "import sys, siliconfriend.backends.registry, siliconfriend.backends.openai_chat;"
        "heavy = [m for m in ('torch', 'transformers', 'openai', 'langchain_core') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
