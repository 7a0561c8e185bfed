"""Any LangChain chat model as a backend, for users who already have one configured."""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Sequence

from .base import BackendAuthError, BackendError, BackendModelNotFound, BackendRateLimited, BackendUnavailable, Message
from .openai_chat import estimate_tokens
from .registry import require


def to_langchain_messages(messages: Sequence[Message]) -> list[Any]:
    """Our messages as langchain-core System/Human/AI messages."""
    lc = require("langchain_core.messages", "langchain-core")
    kinds = {"system": lc.SystemMessage, "user": lc.HumanMessage, "assistant": lc.AIMessage}
    try:
        return [kinds[m.role](content=m.content) for m in messages]
    except KeyError as exc:
        raise BackendError(f"unknown message role {exc.args[0]!r}; expected system, user or assistant") from None


def load_chat_model(target: Any, **kwargs: Any) -> Any:
    """A chat model instance, or one built from "package.module:factory" (called with ``kwargs``)."""
    if not isinstance(target, str):
        if kwargs:
            raise BackendError(f"options {sorted(kwargs)} only apply when the chat model is given as an import path")
        return target
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BackendError(f"a LangChain model path looks like 'package.module:factory', not {target!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        raise BackendError(
            f"cannot import {module_name!r} for the LangChain model {target!r}: {exc}; "
            f"install the package that provides it"
        ) from exc
    except AttributeError:
        raise BackendError(f"{module_name!r} has no {attr!r} (LangChain model {target!r})") from None
    return factory(**kwargs) if callable(factory) else factory


class LangChainChat:
    """Wrap a LangChain ``BaseChatModel`` (or an import path to a factory that builds one).

    ``max_tokens`` is passed to ``.stream()`` as a keyword (most providers accept it); set
    ``pass_max_tokens=False`` for models that refuse unknown keywords.
    """

    name = "langchain"

    def __init__(
        self, chat_model: Any, *, context_tokens: int = 8192, pass_max_tokens: bool = True, **factory_kwargs: Any
    ) -> None:
        require("langchain_core", "langchain-core")
        self.chat_model = load_chat_model(chat_model, **factory_kwargs)
        if not callable(getattr(self.chat_model, "stream", None)):
            raise BackendError(f"{type(self.chat_model).__name__} is not a LangChain chat model (it has no .stream)")
        self.model = str(
            getattr(self.chat_model, "model_name", None)
            or getattr(self.chat_model, "model", None)
            or type(self.chat_model).__name__
        )
        self.context_tokens = context_tokens
        self.pass_max_tokens = pass_max_tokens

    def __repr__(self) -> str:
        return f"LangChainChat(model={self.model!r})"

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        if self._has_own_tokenizer():
            try:
                return int(self.chat_model.get_num_tokens(text))
            except Exception:  # noqa: BLE001 - a tokenizer that needs a download: estimate instead
                pass
        return estimate_tokens(text)

    def _has_own_tokenizer(self) -> bool:
        from langchain_core.language_models import BaseLanguageModel

        cls = type(self.chat_model)
        return (
            getattr(self.chat_model, "custom_get_token_ids", None) is not None
            or getattr(cls, "get_num_tokens", None) is not BaseLanguageModel.get_num_tokens
            or getattr(cls, "get_token_ids", None) is not BaseLanguageModel.get_token_ids
        )

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None) -> Iterator[str]:
        kwargs = {"max_tokens": max_tokens} if (max_tokens is not None and self.pass_max_tokens) else {}
        try:
            for chunk in self.chat_model.stream(to_langchain_messages(messages), **kwargs):
                text = chunk_text(chunk)
                if text:
                    yield text
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - every provider failure becomes a BackendError
            raise translate_error(exc, self.model) from exc


def chunk_text(chunk: Any) -> str:
    """The text of a streamed chunk: a string, or the text blocks of a content list."""
    content = getattr(chunk, "content", chunk)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return ""


def translate_error(exc: Exception, model: str) -> BackendError:
    """Map a provider's exception (openai, anthropic, httpx, ...) by its HTTP status or kind."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    kind = type(exc).__name__
    detail = f"{kind}: {exc}"
    if status in (401, 403) or "Authentication" in kind or "PermissionDenied" in kind:
        return BackendAuthError(f"the LangChain model {model!r} was refused access ({detail}); check its API key")
    if status == 404 or kind == "NotFoundError":
        return BackendModelNotFound(f"the LangChain model {model!r} was not found ({detail}); check the model name")
    if status == 429 or "RateLimit" in kind:
        return BackendRateLimited(f"the LangChain model {model!r} is rate limited ({detail}); wait and try again")
    if (
        (isinstance(status, int) and status >= 500)
        or isinstance(exc, (ConnectionError, TimeoutError))
        or "Connection" in kind
        or "Timeout" in kind
    ):
        return BackendUnavailable(f"the LangChain model {model!r} is unavailable ({detail}); try again later")
    return BackendError(f"the LangChain model {model!r} failed ({detail})")
