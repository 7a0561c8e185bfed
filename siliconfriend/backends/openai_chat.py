"""Any OpenAI-compatible chat server (OpenAI, vLLM, SGLang, Ollama, llama.cpp server) via the openai SDK.

The SDK's own retries are turned off: this backend retries 429, 5xx and refused connections itself
with exponential backoff (honouring Retry-After), only before the first chunk reached the caller,
and turns every failure into a BackendError subclass whose message says what to do.
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any, Iterator, Sequence

from memory.cjk import count_wide

from .base import (
    BackendAuthError,
    BackendError,
    BackendModelNotFound,
    BackendRateLimited,
    BackendUnavailable,
    Message,
    Sampling,
    ToolCalls,
)

log = logging.getLogger("siliconfriend.backends.openai")

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per CJK character, one per ~4 other characters."""
    if not text:
        return 0
    cjk = count_wide(text)
    return cjk + math.ceil((len(text) - cjk) / 4)


class OpenAIChat:
    """Chat completions from an OpenAI-compatible server.

    ``api_key`` and ``base_url`` come from the settings (OPENAI_API_KEY, OPENAI_BASE_URL: see
    ``factory.backend_options``); ``base_url`` defaults to api.openai.com. A local server needs
    no key. ``retries`` extra attempts are made on 429/5xx/refused connections, waiting
    ``retry_base_delay * 2**attempt`` seconds (capped at ``retry_max_delay``).
    """

    name = "openai"
    # stream() takes sampling: temperature, top_p, the presence and frequency penalties, stop (the
    # API has no repetition penalty)
    takes_sampling = True
    # stream() takes a client's tools and tool_choice and yields the model's ToolCalls; a server
    # that refuses tools (vLLM without --enable-auto-tool-choice, llama.cpp without --jinja) is
    # asked again without them, and not sent them again
    takes_tools = True

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float | None = 0.7,
        max_tokens: int | None = 1024,
        streaming: bool = True,
        timeout: float = 60.0,
        retries: int = 3,
        retry_base_delay: float = 1.0,
        retry_max_delay: float = 30.0,
        context_tokens: int = 8192,
        max_tokens_param: str = "max_tokens",
        extra_body: dict | None = None,
    ) -> None:
        from .registry import require

        openai = require("openai")
        self.model = model or DEFAULT_MODEL
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        if not api_key:
            if self.base_url == DEFAULT_BASE_URL:
                raise BackendAuthError(
                    "No OpenAI API key: set OPENAI_API_KEY (or openai_api_key in config.toml), "
                    "or set OPENAI_BASE_URL to a local OpenAI-compatible server"
                )
            api_key = "not-needed"  # local servers (Ollama, vLLM, llama.cpp) accept any key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.streaming = streaming
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.context_tokens = context_tokens
        self.max_tokens_param = max_tokens_param
        self.extra_body = extra_body
        self._openai = openai
        # the last reply's prompt tokens as the server reported them: all, those it did not have
        # cached, and those it did (prefix caching: vLLM, llama.cpp, OpenAI); empty where not reported
        self.last_prompt: dict[str, int] = {}
        self.refuses_tools = False  # the server said it takes no tools: they are not sent again
        self._client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=timeout, max_retries=0)

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    # ------------------------------------------------------------------ streaming
    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        sampling: Sampling | None = None,
        tools: Sequence[dict] = (),
        tool_choice: Any = None,
    ) -> Iterator[str | ToolCalls]:
        request = self._request(messages, max_tokens)
        if tools and not self.refuses_tools:
            request["tools"] = list(tools)
            if tool_choice is not None:
                request["tool_choice"] = tool_choice
        if sampling is not None:
            for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
                if getattr(sampling, name) is not None:
                    request[name] = getattr(sampling, name)
            if sampling.stop:
                request["stop"] = list(sampling.stop)[:4]  # OpenAI takes at most 4
        attempt = 0
        while True:
            yielded = False
            try:
                for piece in self._attempt(request):
                    if piece:
                        yielded = True
                        yield piece
                return
            except BackendError:
                raise
            except Exception as exc:  # noqa: BLE001 - every SDK failure is mapped below
                if not isinstance(exc, self._openai.OpenAIError):
                    raise
                if not yielded and "tools" in request and self._refused_tools(exc):
                    log.warning("%s refused the client's tools (%s): answering in text", self.base_url, exc)
                    self.refuses_tools = True
                    request.pop("tools")
                    request.pop("tool_choice", None)
                    continue
                if yielded or attempt >= self.retries or not self._retryable(exc):
                    raise self._translate(exc, attempt) from exc
                delay = self._delay(attempt, exc)
                log.info(
                    "%s from %s, retry %d/%d in %.2fs", _describe(exc), self.base_url, attempt + 1, self.retries, delay
                )
                time.sleep(delay)
                attempt += 1

    def _request(self, messages: Sequence[Message], max_tokens: int | None) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": [m.as_dict() for m in messages]}
        limit = max_tokens if max_tokens is not None else self.max_tokens
        if limit is not None:
            request[self.max_tokens_param] = int(limit)
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    def _attempt(self, request: dict[str, Any]) -> Iterator[str | ToolCalls]:
        if not self.streaming:
            completion = self._client.chat.completions.create(**request)
            if not completion.choices:
                raise BackendError(f"{self.base_url} returned no choices for model {self.model!r}")
            self._usage(getattr(completion, "usage", None))
            message = completion.choices[0].message
            yield message.content or ""
            if getattr(message, "tool_calls", None):
                yield ToolCalls(tuple(_call(c) for c in message.tool_calls))
            return
        response = self._client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **request)
        calls: dict[int, dict] = {}  # the tool calls, put together from their deltas
        try:
            for chunk in response:
                if getattr(chunk, "error", None):  # some servers report failures inside the stream
                    raise BackendError(f"{self.base_url} failed while streaming: {chunk.error}")
                self._usage(getattr(chunk, "usage", None))
                for choice in chunk.choices or ():
                    if choice.delta is not None and choice.delta.content:
                        yield choice.delta.content
                    for delta in (choice.delta.tool_calls if choice.delta is not None else None) or ():
                        call = calls.setdefault(
                            delta.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                        )
                        call["id"] = delta.id or call["id"]
                        if delta.function is not None:
                            call["function"]["name"] += delta.function.name or ""
                            call["function"]["arguments"] += delta.function.arguments or ""
        finally:
            response.close()
        if calls:
            yield ToolCalls(tuple(calls[i] for i in sorted(calls)))

    def _usage(self, usage: Any) -> None:
        prompt = getattr(usage, "prompt_tokens", None) if usage is not None else None
        if not isinstance(prompt, int):
            return
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        cached = cached if isinstance(cached, int) else 0
        self.last_prompt = {"total": prompt, "processed": prompt - cached, "server_cached": cached}
        log.info("prompt of %d tokens, %d of them cached by %s", prompt, cached, self.base_url)

    # ------------------------------------------------------------------ failures
    def _refused_tools(self, exc: Exception) -> bool:
        """Whether the server refused the request for its tools (a 400 / 422 that names them)."""
        o = self._openai
        if not isinstance(exc, o.APIStatusError) or exc.status_code not in (400, 422, 500, 501):
            return False
        return "tool" in _server_message(exc).lower()

    def _retryable(self, exc: Exception) -> bool:
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return False  # waiting again as long would double the user's wait
        if isinstance(exc, o.APIConnectionError):
            return True
        if isinstance(exc, o.APIStatusError):
            if exc.status_code == 429:
                return _error_code(exc) != "insufficient_quota"
            return exc.status_code >= 500
        return False

    def _delay(self, attempt: int, exc: Exception) -> float:
        delay = self.retry_base_delay * (2**attempt) * (1 + 0.25 * random.random())
        retry_after = _retry_after(exc)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.retry_max_delay)

    def _translate(self, exc: Exception, attempt: int) -> BackendError:
        o = self._openai
        where = self.base_url
        tries = f" after {attempt + 1} attempts" if attempt else ""
        if isinstance(exc, o.APITimeoutError):
            return BackendUnavailable(
                f"{where} did not answer within {self.timeout:g}s: the server may be overloaded or still "
                f"loading the model; try again, or raise the backend timeout"
            )
        if isinstance(exc, o.APIConnectionError):
            return BackendUnavailable(
                f"cannot reach the model server at {where}{tries}: is it running? Check OPENAI_BASE_URL "
                f"(or base_url in the settings) and your network"
            )
        if not isinstance(exc, o.APIStatusError):
            return BackendError(f"{where} failed: {exc}")
        status, detail = exc.status_code, _server_message(exc)
        if status in (401, 403):
            return BackendAuthError(
                f"{where} refused the API key (HTTP {status}: {detail}). Check OPENAI_API_KEY "
                f"(or api_key in the settings) and that it is valid for this server"
            )
        if status == 404:
            return BackendModelNotFound(
                f"model {self.model!r} was not found at {where} (HTTP 404: {detail}). Check the model name "
                f"(the server lists them at {where}/models) and that base_url ends in /v1"
            )
        if status == 429:
            if _error_code(exc) == "insufficient_quota":
                return BackendRateLimited(f"{where}: quota exhausted ({detail}); check your plan and billing")
            return BackendRateLimited(
                f"{where} is still rate limiting requests (HTTP 429){tries}: wait a minute and try again, "
                f"or lower the request rate"
            )
        if status >= 500:
            return BackendUnavailable(
                f"the model server at {where} failed (HTTP {status}: {detail}){tries}; try again later"
            )
        if status in (400, 413, 422) and "context" in detail.lower():
            return BackendError(f"the prompt is too long for {self.model!r} ({detail}); lower context_tokens")
        return BackendError(f"{where} rejected the request (HTTP {status}: {detail})")


def _call(call: Any) -> dict:
    """One tool call of a completion, as OpenAI's JSON."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": call.function.arguments},
    }


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


def _error_code(exc: Exception) -> str | None:
    code = getattr(exc, "code", None)
    if code:
        return str(code)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("code"):
            return str(inner["code"])
    return None


def _server_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(exc, "message", None) or exc)


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
