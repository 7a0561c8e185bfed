"""A streamed reply as OpenAI's server-sent events: ``chat.completion.chunk`` events, each chunk
taken on a worker thread, the reply stopped and stored when the client goes away."""

from __future__ import annotations

import json
from typing import AsyncIterator, Generator

import anyio
import anyio.lowlevel
from fastapi.responses import StreamingResponse

from . import footnote
from .service import ApiService, Completion


def _event(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def sse_chunks(
    api: ApiService, completion: Completion, usage: bool, *, show_memories: bool = False
) -> Generator[str, None, None]:
    """The turn as OpenAI's ``chat.completion.chunk`` events: the first carries the role and the
    memories used, the last the finish reason and the stored turn; a backend failure mid-reply
    is an ``error`` event (the OpenAI SDK raises it). ``show_memories``: the "what I remembered"
    footnote comes as a last piece of content (``footnote.py``)."""

    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        return {
            "id": completion.id,
            "object": "chat.completion.chunk",
            "created": completion.created,
            "model": completion.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    stream = completion.stream
    chunks = iter(stream)
    parts: list[str] = []
    try:
        first = completion.first or ""
        parts.append(first)
        yield _event(
            chunk(
                {"role": "assistant", "content": first},
                siliconfriend={"memories": [m.as_json() for m in completion.remembered]},
            )
        )
        for piece in chunks:
            parts.append(piece)
            yield _event(chunk({"content": piece}))
        result = stream.result
        if result is None or result.error:
            message = result.error if result else "the reply did not finish"
            yield _event(
                {"error": {"message": message, "type": "server_error", "param": None, "code": "backend_unavailable"}}
            )
            return
        note = footnote.of_completion(completion) if show_memories and not result.tool_calls else ""
        if note:
            yield _event(chunk({"content": note}))
        if result.tool_calls:  # the model's calls of the client's tools, whole, in one chunk
            calls = [{"index": i, **call} for i, call in enumerate(result.tool_calls)]
            yield _event(chunk({"tool_calls": calls}))
        finish = "tool_calls" if result.tool_calls else "stop"
        end = _event(chunk({}, finish, siliconfriend=api.extension(completion)))
        if usage:
            end += _event(
                {
                    "id": completion.id,
                    "object": "chat.completion.chunk",
                    "created": completion.created,
                    "model": completion.model,
                    "choices": [],
                    "usage": api.usage(completion, result.reply),
                }
            )
        yield end + _event("[DONE]")  # one write for the end (each chunk is a hop to a thread)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # a client that went away: the companion keeps what came so far


async def sse_body(
    api: ApiService, completion: Completion, usage: bool, *, show_memories: bool = False
) -> AsyncIterator[str]:
    """``sse_chunks`` for the server, each chunk taken on a worker thread. A client that goes away
    (a stop button, a closed tab) cancels this at its next chunk: the reply is stopped there and
    the turn stored at once with what came so far, marked as stopped, instead of whenever the
    abandoned generator would have been collected."""
    chunks = sse_chunks(api, completion, usage, show_memories=show_memories)
    try:
        while True:
            piece = await anyio.to_thread.run_sync(next, chunks, None)
            # a cancel while the thread ran (a disconnect) waited for it: it is raised here
            await anyio.lowlevel.checkpoint()
            if piece is None:
                return
            yield piece
    finally:
        if completion.stream.result is None:
            completion.stream.stop()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(chunks.close)


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that closes its body when it ends, however it ends: a client that
    went away leaves the body suspended, and its ``finally`` (``sse_body``) must run now."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
