"""Which backends exist and how to build one, with lazy imports so the CLI starts fast.

``create_backend(name)`` builds the backend named (``Settings.default_backend`` says which one a
user gets by default); the tiny embedded SmolLM2 model says so in one line.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

from .base import BackendError, ChatBackend

log = logging.getLogger("siliconfriend.backends")

BACKENDS: dict[str, str] = {
    "openai": "siliconfriend.backends.openai_chat:OpenAIChat",
    "hf": "siliconfriend.backends.hf.chat:HFLocalChat",
    "langchain": "siliconfriend.backends.langchain_chat:LangChainChat",
}

# import name -> what to pip install when it is missing
_INSTALL_HINTS = {
    "openai": "openai",
    "torch": "torch",
    "transformers": "transformers",
    "peft": "peft",
    "gguf": "gguf",
    "accelerate": "accelerate",
    "langchain_core": "langchain-core",
}

DEFAULT_PRESET = "smollm2"
EMBEDDED_NOTICE = (
    "Using the embedded SmolLM2-135M model: tiny and English-only. For real conversations "
    "set OPENAI_API_KEY (any OpenAI-compatible server) or choose --backend hf --model qwen."
)


def require(module: str, pip_name: str | None = None) -> Any:
    """Import ``module`` or raise a BackendError that says what to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = (exc.name or module).split(".")[0]
        if top != module.split(".")[0]:
            raise
        raise BackendError(
            f"{module} is not installed: run `pip install {pip_name or _INSTALL_HINTS.get(top, top)}`"
        ) from exc


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def backend_class(name: str) -> type:
    """The backend class registered as ``name``, imported on first use."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}") from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in _INSTALL_HINTS:
            raise BackendError(f"the {name!r} backend needs {top}: run `pip install {_INSTALL_HINTS[top]}`") from exc
        raise
    return getattr(module, attr)


def create_backend(
    name: str, *, model: Any = None, adapter: str | os.PathLike | None = None, **options: Any
) -> ChatBackend:
    """Build a chat backend.

    ``name``: a key of ``BACKENDS`` (the default one is ``Settings.default_backend``: openai when
    OPENAI_API_KEY is set, otherwise the embedded SmolLM2). ``model``: a model name (openai), a Hugging Face id, local path
    or preset name (hf), or a LangChain chat model / "package.module:factory" path (langchain).
    ``adapter``: a LoRA adapter folder, only for hf. Other options go to the backend's constructor.
    """
    name = name.strip().lower()
    cls = backend_class(name)
    if adapter is not None and name != "hf":
        raise BackendError(f"a LoRA adapter can only be used with the local 'hf' backend, not {name!r}")
    if name == "hf":
        if model is None:
            model = DEFAULT_PRESET
        if model == DEFAULT_PRESET and not options.get("quiet"):
            log.warning(EMBEDDED_NOTICE)
        options.pop("quiet", None)
        return cls(model, adapter=adapter, **options)
    if name == "langchain":
        if model is None:
            raise BackendError(
                "the 'langchain' backend needs a chat model: pass model=<BaseChatModel> "
                "or model='package.module:factory'"
            )
        return cls(model, **options)
    if model is not None:
        options["model"] = model
    return cls(**options)
