"""``/models`` and ``/chat/completions``: OpenAI's chat protocol, one companion turn per request,
streamed as server-sent events or not."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...accounts.keys import KeyOwner
from ...backends.base import Sampling
from ...core.companion import Limits
from .. import footnote
from ..fields import check_chat_request
from ..service import MODEL_ID, ApiError, ApiService, Switches
from ..streaming import ClosingStreamingResponse, sse_body
from ..tool_calls import check_tool_choice
from .deps import owner, service

router = APIRouter()


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str = Field(description="system, user or assistant")
    content: str | list[dict[str, Any]] | None = Field(None, description="text, or a list of content parts")


class ChatCompletionRequest(BaseModel):
    """OpenAI's request, its fields checked as OpenAI checks them (``fields.py``).
    ``max_tokens`` / ``max_completion_tokens``, ``stop``, ``temperature``, ``top_p`` and the
    penalties are honoured (``limits_of``); ``tools`` are left unused unless a call is forced
    (``tool_calls.py``); other fields are accepted."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _as_openai_checks(cls, data: Any) -> Any:
        check_chat_request(data)  # an ApiError: a 400 naming the field, as OpenAI's
        return data

    model: str = Field(MODEL_ID, description="any name; the companion answers with the configured backend")
    messages: list[ChatMessageIn] = Field(description="the chat so far; the last one is the user's turn")
    stream: bool = False
    n: int | None = Field(None, description="only 1")
    stream_options: dict[str, Any] | None = None
    siliconfriend: dict[str, Any] | None = Field(
        None,
        description='SiliconFriend\'s switches: {"task": "title"} (a chat app\'s own request: answered, '
        'never remembered; as the X-SiliconFriend-Task header), {"memory": "off"} (answered with the '
        "companion's memory, nothing written or reinforced) or \"on\" (a turn of the person's even "
        "where it looks like a task); as the X-SiliconFriend-Memory header; "
        '{"show_memories": true}: the "what I remembered" footnote (X-SiliconFriend-Show-Memories)',
    )


def limits_of(fields: dict[str, Any]) -> Limits:
    """The request's own settings for the reply (OpenAI's names, already checked by
    ``fields.py``): ``max_completion_tokens`` or ``max_tokens``, ``stop``, and ``temperature``,
    ``top_p``, ``presence_penalty``, ``frequency_penalty`` for a backend that has them."""

    def number(name: str) -> float | None:
        value = fields.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    cap = fields.get("max_completion_tokens")
    cap = cap if cap is not None else fields.get("max_tokens")
    max_tokens = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None
    stop = fields.get("stop")
    stops = (
        (stop,)
        if isinstance(stop, str)
        else tuple(s for s in stop if isinstance(s, str))
        if isinstance(stop, list)
        else ()
    )
    stops = tuple(s for s in stops if s)
    temperature, top_p = number("temperature"), number("top_p")
    presence, frequency = number("presence_penalty"), number("frequency_penalty")
    given = (temperature, top_p, presence, frequency)
    sampling = (
        Sampling(
            temperature=temperature, top_p=top_p, presence_penalty=presence, frequency_penalty=frequency, stop=stops
        )
        if any(v is not None for v in given) or stops
        else None
    )
    tools = fields.get("tools")
    tools = tuple(t for t in tools if isinstance(t, dict)) if isinstance(tools, list) else ()
    return Limits(
        max_tokens=max_tokens, stop=stops, sampling=sampling, tools=tools, tool_choice=fields.get("tool_choice")
    )


@router.get("/models", summary="The models: one, the companion")
def models(who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return {"object": "list", "data": api.models()}


@router.get("/models/{model_id}", summary="One model")
def model(model_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    found = [m for m in api.models() if m["id"] == model_id]
    if not found:
        raise ApiError(404, f"no model {model_id[:60]!r}: the model is {MODEL_ID!r}", code="model_not_found")
    return found[0]


@router.post("/chat/completions", summary="One turn with the companion (streaming or not)")
def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    who: KeyOwner = Depends(owner),
    api: ApiService = Depends(service),
):
    if body.n not in (None, 1):
        raise ApiError(400, "n must be 1: the companion gives one reply per turn", param="n")
    messages = footnote.strip_footnotes([m.model_dump() for m in body.messages])
    headers = {k.lower(): v for k, v in request.headers.items()}
    fields = body.model_extra or {}
    if not api.passes_tools:  # a forced call the model cannot make: a 400 naming the app's setting
        check_tool_choice(fields, headers)
    show = footnote.wanted(headers, body.siliconfriend)
    switches = Switches.of(headers, body.siliconfriend, fields)
    completion = api.start_chat(who.user, messages, model=body.model, switches=switches, limits=limits_of(fields))
    if not body.stream:
        done = api.finish(completion)
        if show:
            done["choices"][0]["message"]["content"] += footnote.of_completion(completion)
        return JSONResponse(done)
    usage = bool((body.stream_options or {}).get("include_usage"))
    return ClosingStreamingResponse(
        sse_body(api, completion, usage, show_memories=show),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
