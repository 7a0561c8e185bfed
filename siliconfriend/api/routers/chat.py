"""``/models`` and ``/chat/completions``: OpenAI's chat protocol, one companion turn per request,
streamed as server-sent events or not."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...accounts.keys import KeyOwner
from .. import footnote
from ..fields import check_chat_request
from ..service import MODEL_ID, ApiError, ApiService, Switches
from ..streaming import ClosingStreamingResponse, sse_body
from ..tool_calls import refuse_tool_calling
from .deps import owner, service

router = APIRouter()


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str = Field(description="system, user or assistant")
    content: str | list[dict[str, Any]] | None = Field(None, description="text, or a list of content parts")


class ChatCompletionRequest(BaseModel):
    """OpenAI's request; fields the companion does not use (temperature, top_p...) are accepted
    where OpenAI would accept them (``fields.py``)."""

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
    refuse_tool_calling(body.model_extra or {}, messages)  # a 400 that names the setting to change
    headers = {k.lower(): v for k, v in request.headers.items()}
    show = footnote.wanted(headers, body.siliconfriend)
    switches = Switches.of(headers, body.siliconfriend)
    completion = api.start_chat(who.user, messages, model=body.model, switches=switches)
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
