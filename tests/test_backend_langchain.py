"""The langchain backend with real langchain-core fake chat models."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel, ParrotFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from siliconfriend.backends.base import (
    BackendAuthError,
    BackendError,
    BackendRateLimited,
    BackendUnavailable,
    ChatBackend,
    Message,
    join_stream,
)
from siliconfriend.backends.langchain_chat import (
    LangChainChat,
    chunk_text,
    load_chat_model,
    to_langchain_messages,
    translate_error,
)

MESSAGES = [
    Message("system", "Be warm."),
    Message("user", "I love jazz."),
    Message("assistant", "Nice!"),
    Message("user", "What do I love?"),
]


def test_streams_chunks_from_a_fake_list_model():
    backend = LangChainChat(FakeListChatModel(responses=["You love jazz."]))
    assert isinstance(backend, ChatBackend)
    chunks = list(backend.stream(MESSAGES, max_tokens=20))
    assert len(chunks) > 1
    assert "".join(chunks) == "You love jazz."
    assert backend.model == "FakeListChatModel"


def test_generic_fake_model_streams_words():
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello there friend")]))
    chunks = list(LangChainChat(model).stream(MESSAGES))
    assert chunks == ["hello", " ", "there", " ", "friend"]


def test_messages_are_mapped_and_reach_the_model():
    lc = to_langchain_messages(MESSAGES)
    assert [type(m) for m in lc] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert [m.content for m in lc] == [m.content for m in MESSAGES]
    # the parrot answers with the last message it was given: proof the list went through
    assert join_stream(LangChainChat(ParrotFakeChatModel()).stream(MESSAGES)) == "What do I love?"


def test_import_path_factory():
    backend = LangChainChat(
        "langchain_core.language_models.fake_chat_models:FakeListChatModel", responses=["from a factory"]
    )
    assert join_stream(backend.stream(MESSAGES)) == "from a factory"
    assert isinstance(load_chat_model(backend.chat_model), FakeListChatModel)


@pytest.mark.parametrize(
    "target",
    [
        "no_colon_here",
        "siliconfriend_missing_pkg.mod:make",
        "langchain_core.language_models.fake_chat_models:NoSuchModel",
    ],
)
def test_bad_import_paths_are_explained(target):
    with pytest.raises(BackendError):
        LangChainChat(target)


def test_not_a_chat_model():
    with pytest.raises(BackendError, match="not a LangChain chat model"):
        LangChainChat(object())


def test_failure_mid_stream_is_a_backend_error():
    model = FakeListChatModel(responses=["abcdef"], error_on_chunk_number=2)
    with pytest.raises(BackendError, match="FakeListChatModelError"):
        join_stream(LangChainChat(model).stream(MESSAGES))


def test_provider_errors_are_mapped_by_status():
    class StatusError(Exception):
        def __init__(self, status_code):
            super().__init__(f"HTTP {status_code}")
            self.status_code = status_code

    assert isinstance(translate_error(StatusError(401), "m"), BackendAuthError)
    assert isinstance(translate_error(StatusError(429), "m"), BackendRateLimited)
    assert isinstance(translate_error(StatusError(503), "m"), BackendUnavailable)
    assert isinstance(translate_error(ConnectionRefusedError("refused"), "m"), BackendUnavailable)
    assert type(translate_error(ValueError("x"), "m")) is BackendError


def test_chunk_text_handles_content_blocks():
    assert chunk_text(AIMessage(content=[{"type": "text", "text": "a"}, "b", {"type": "image"}])) == "ab"


def test_count_tokens_estimates_without_download():
    backend = LangChainChat(FakeListChatModel(responses=["x"]), context_tokens=2048)
    assert backend.context_tokens == 2048
    assert backend.count_tokens("abcdefgh") == 2
    assert backend.count_tokens("你好") == 2
