"""What every chat backend is: messages in, streamed text out, and the errors it may raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Protocol, Sequence, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    # OpenAI's fields of a tool round trip, sent as they came: an assistant message's
    # ``tool_calls``, a tool message's ``tool_call_id`` (only to a backend that ``takes_tools``)
    tool: dict[str, Any] | None = field(default=None, compare=False)

    def as_dict(self) -> dict:
        if self.tool:
            return {"role": self.role, "content": self.content or None, **self.tool}
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class ToolCalls:
    """The model's calls of the client's tools (OpenAI's ``tool_calls``: id, type, function name
    and arguments), the last item of a backend's stream when it made any."""

    calls: tuple[dict, ...]


def takes_tools(backend: object) -> bool:
    """Whether ``backend.stream`` takes a client's ``tools`` and ``tool_choice`` (and may yield a
    ``ToolCalls``)."""
    return bool(getattr(backend, "takes_tools", False))


@runtime_checkable
class ChatBackend(Protocol):
    name: str  # registry name, e.g. "openai", "hf"
    model: str  # what is being run (model id, path or preset)
    context_tokens: int  # how many tokens the prompt plus reply may take

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None) -> Iterator[str]:
        """Yield the reply as text chunks. Raises BackendError subclasses on failure."""
        ...

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` takes for this model (an estimate is fine for remote models)."""
        ...


class BackendError(RuntimeError):
    """A failure the user should see, worded so that they know what to do about it."""


class BackendUnavailable(BackendError):
    """The model server cannot be reached, or timed out."""


class BackendAuthError(BackendError):
    """The credentials were refused (HTTP 401/403)."""


class BackendModelNotFound(BackendError):
    """The model named in the settings does not exist on the server / hub / disk."""


class BackendRateLimited(BackendError):
    """Still rate limited (HTTP 429) after the retries."""


@dataclass(frozen=True)
class Sampling:
    """Generation settings for one call, over the backend's own (None: the backend's). A task that
    must not invent (a summary of what was said) asks for less chance than a chat reply does.
    A backend that takes them says so (``takes_sampling = True``) and takes ``sampling=`` in
    ``stream``; what it cannot apply it leaves out."""

    temperature: float | None = None  # 0: greedy
    repetition_penalty: float | None = None  # 1.0: none
    no_repeat_ngram_size: int | None = None  # 0: none
    # whether the penalties count the prompt's words too (a chat reply: do not parrot the user) or
    # only the model's own (a summary: copying what was said is the point, looping is not)
    penalise_prompt: bool = True
    # an API client's own settings (OpenAI's names), for a backend that has them
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: tuple[str, ...] = ()  # the server may stop there itself (the companion cuts there anyway)


def takes_sampling(backend: object) -> bool:
    """Whether ``backend.stream`` takes ``sampling=``."""
    return bool(getattr(backend, "takes_sampling", False))


def join_stream(chunks: Iterator[str]) -> str:
    return "".join(chunks)
