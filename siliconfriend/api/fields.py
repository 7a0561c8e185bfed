"""A chat request's fields checked as OpenAI checks them, before anything reads them: a field of
the wrong type or out of its range is a 400 that names it (``param``), never taken for something
else (``"stream": "yes"`` is not true, ``"max_tokens": -5`` is not "no limit") and never a 500
further in. Text that is not text (a lone UTF-16 surrogate, ``"\\ud800"``, which JSON can spell but
no UTF-8 can carry) is refused the same way, wherever in the request it is.

The fields the companion does not use are checked too: a client learns of its mistake here, as
it would from OpenAI, instead of from a server that switches to it later.
"""

from __future__ import annotations

import math
from typing import Any

from .service import ApiError

INT_MAX = 2**31 - 1  # OpenAI's integers are 32-bit; a larger one is a mistake, not a wish
SEED_MAX = 2**63 - 1


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _boolean(data: dict, name: str) -> None:
    if data.get(name) is not None and not _is_bool(data[name]):
        raise _bad(name, f"must be a boolean (true or false), not {type(data[name]).__name__} {data[name]!r:.40}")


def _ranged(data: dict, name: str, low: float, high: float, *, whole: bool) -> None:
    """``data[name]``, where given, a number (``whole``: an integer) from ``low`` to ``high``."""
    v = data.get(name)
    if v is None:
        return
    if not (_is_int(v) if whole else _is_number(v)):
        raise _bad(name, f"must be {'an integer' if whole else 'a number'}, not {type(v).__name__} {v!r:.40}")
    if not low <= v <= high:
        raise _bad(name, f"must be from {_shown(low)} to {_shown(high)}, not {_shown(v)}")


def _shown(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) < 10**20 else f"{x:g}"


def lone_surrogate(value: Any, where: str = "") -> str | None:
    """The place (``messages.0.content``) of the first string in ``value`` that holds a lone
    surrogate, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(key, where) if isinstance(key, str) else None
            found = found or lone_surrogate(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{where}.{i}" if where else str(i))
            if found:
                return found
    return None


def check_chat_request(data: Any) -> None:
    """Raise a 400 ``ApiError`` naming the first field of a chat-completions request ``data`` (the
    parsed JSON) that OpenAI would refuse."""
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object with model and messages", param=None)
    where = lone_surrogate(data)
    if where:
        raise _bad(
            where,
            "holds a lone surrogate (such as \\ud800), which is not a character: send the text as "
            "UTF-8, or its escapes in pairs",
        )
    if "messages" not in data:
        raise _bad("messages", "is required: the chat so far, ending with the user's message")
    if not isinstance(data["messages"], list):
        raise _bad("messages", "must be an array of messages")
    if data.get("model") is not None and not isinstance(data["model"], str):
        raise _bad("model", "must be a string")
    for name in ("stream", "logprobs", "parallel_tool_calls", "store"):
        _boolean(data, name)
    options = data.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("stream_options", "must be an object")
        if options.get("include_usage") is not None and not _is_bool(options["include_usage"]):
            raise _bad("stream_options.include_usage", "must be a boolean (true or false)")
        if not data.get("stream"):
            raise _bad("stream_options", "is only allowed when stream is true")
    _ranged(data, "n", 1, 128, whole=True)
    _ranged(data, "max_tokens", 1, INT_MAX, whole=True)
    _ranged(data, "max_completion_tokens", 1, INT_MAX, whole=True)
    _ranged(data, "top_logprobs", 0, 20, whole=True)
    _ranged(data, "seed", -SEED_MAX - 1, SEED_MAX, whole=True)
    _ranged(data, "temperature", 0.0, 2.0, whole=False)
    _ranged(data, "top_p", 0.0, 1.0, whole=False)
    _ranged(data, "presence_penalty", -2.0, 2.0, whole=False)
    _ranged(data, "frequency_penalty", -2.0, 2.0, whole=False)
    stop = data.get("stop")
    if stop is not None and not isinstance(stop, str):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("stop", "must be a string or an array of strings")
        if len(stop) > 4:
            raise _bad("stop", f"can have at most 4 sequences, not {len(stop)}")
    if data.get("user") is not None and not isinstance(data["user"], str):
        raise _bad("user", "must be a string")
    bias = data.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict):
            raise _bad("logit_bias", "must be an object of token ids to numbers")
        for token, value in bias.items():
            if not _is_number(value) or not -100 <= value <= 100:
                raise _bad(f"logit_bias.{token}", "must be a number from -100 to 100")
    for i, message in enumerate(data["messages"]):
        if not isinstance(message, dict):
            raise _bad(f"messages.{i}", "must be an object with a role and content")


__all__ = ["check_chat_request", "lone_surrogate"]
