"""The official OpenAI SDK against the running API server: a turn streamed and not, the memories
it used in the extension field, the client's history used but never stored again, wrong and
revoked keys (401), the rate limits (429), a dead backend (503), bad requests (400), and two
users' keys that never see each other's memories."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import openai
import pytest
from api_helpers import client, serve_api


def test_models_and_a_plain_turn(served):
    key = served.signup("amy")
    sdk = client(served, key)
    assert [m.id for m in sdk.models.list().data] == ["siliconfriend"]
    done = sdk.chat.completions.create(
        model="siliconfriend", messages=[{"role": "user", "content": "My cat is called Pixel."}]
    )
    assert done.object == "chat.completion" and done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content == "I hear you: My cat is called Pixel.."
    ext = done.model_extra["siliconfriend"]
    stored = served.api.bank.get("amy", ext["turn_id"])
    assert stored.query == "My cat is called Pixel." and stored.response == done.choices[0].message.content
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0
    # the prompt is the companion's: its meta-prompt first, the user's words last
    prompt = served.backend.calls[-1]
    assert prompt[0].role == "system" and "amy" in prompt[0].content
    assert prompt[-1].content.endswith("\n\nMy cat is called Pixel.")  # after the memories that come with it


def test_streaming_reports_the_memories_used_and_stores_only_the_last_message(served):
    key = served.signup("ben")
    sdk = client(served, key)
    first = sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "I love hiking in the Alps."}])
    served.clock.now += timedelta(hours=1)
    history = [
        {"role": "system", "content": "You are Sol, a cheerful friend."},
        {"role": "user", "content": "I love hiking in the Alps."},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "What do I like doing in the mountains?"},
    ]
    events = list(
        sdk.chat.completions.create(model="x", messages=history, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert text == "I hear you: What do I like doing in the mountains?."
    assert events[0].choices[0].delta.role == "assistant"
    assert "memories" in events[0].model_extra["siliconfriend"]
    last = [e for e in events if e.choices][-1]
    assert last.choices[0].finish_reason == "stop" and last.model_extra["siliconfriend"]["turn_id"]
    assert events[-1].usage is not None and events[-1].usage.total_tokens > 0
    # the earlier exchange was the conversation so far, in the prompt once, and not stored again
    prompt = served.backend.calls[-1]
    assert "You are Sol, a cheerful friend." in prompt[0].content
    said = [m.content.split("\n\n")[-1] for m in prompt[1:] if m.role == "user"]
    assert said == ["I love hiking in the Alps.", "What do I like doing in the mountains?"]
    assert "I love hiking in the Alps." not in prompt[0].content  # not also as a retrieved memory
    assert [t.query for t in served.api.bank.turns_on("ben", served.clock.now.date())] == [
        "I love hiking in the Alps.",
        "What do I like doing in the mountains?",
    ]


def test_wrong_missing_and_revoked_keys_get_401_in_openai_shape(served):
    key = served.signup("cat")
    for bad in ("sf-" + "x" * 43, "not-a-key"):
        with pytest.raises(openai.AuthenticationError) as err:
            client(served, bad).models.list()
        assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
        assert err.value.body["message"]
    raw = httpx.get(f"{served.url}/models")
    assert raw.status_code == 401 and set(raw.json()["error"]) == {"message", "type", "param", "code"}
    assert client(served, key).models.list().data
    info = served.api.keys.list("cat")[0]
    served.api.keys.revoke("cat", info.id)
    with pytest.raises(openai.AuthenticationError):
        client(served, key).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert not served.api.bank.has_user("cat")  # nothing was stored for a refused request


def test_bad_requests_get_400_and_store_nothing(served):
    key = served.signup("dan")
    sdk = client(served, key)
    for messages in (
        [],
        [{"role": "user", "content": "   "}],
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user", "content": "x" * 20_001}],
    ):
        with pytest.raises(openai.BadRequestError) as err:
            sdk.chat.completions.create(model="x", messages=messages)
        assert err.value.status_code == 400 and err.value.body["message"], messages
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], n=2)
    raw = httpx.post(f"{served.url}/chat/completions", headers={"Authorization": f"Bearer {key}"}, content=b"{not json")
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    assert not served.api.bank.has_user("dan") or not served.api.bank.count("dan")


def test_a_dead_backend_is_503_and_loses_nothing(served):
    key = served.signup("eve")
    sdk = client(served, key)
    served.backend.fail = "the model server at 127.0.0.1:9 refused the connection"
    try:
        with pytest.raises(openai.InternalServerError) as err:
            sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "Are you there?"}])
        assert err.value.status_code == 503 and err.value.code == "backend_unavailable"
        assert "refused the connection" in err.value.body["message"]
        with pytest.raises(openai.InternalServerError):
            list(
                sdk.chat.completions.create(
                    model="x", stream=True, messages=[{"role": "user", "content": "Are you there?"}]
                )
            )
    finally:
        served.backend.fail = None
    assert not served.api.bank.has_user("eve") or not served.api.bank.count("eve")
    done = sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "Are you there?"}])
    assert done.choices[0].message.content


def test_two_users_keys_never_see_each_others_memories(served):
    fay, gus = served.signup("fay"), served.signup("gus")
    client(served, fay).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "My secret recipe uses cardamom and saffron."}]
    )
    served.clock.now += timedelta(days=1)
    asked = client(served, gus).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "What spices are in my secret recipe?"}]
    )
    assert asked.model_extra["siliconfriend"]["memories"] == []
    assert all("cardamom" not in m.content for m in served.backend.calls[-1])
    raw = httpx.get(
        f"{served.url}/memories/search",
        params={"q": "cardamom saffron recipe"},
        headers={"Authorization": f"Bearer {gus}"},
    )
    assert raw.status_code == 200 and all("cardamom" not in m["text"] for m in raw.json()["data"])
    mine = client(served, fay).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "What spices are in my secret recipe?"}]
    )
    assert any("cardamom" in m["text"] for m in mine.model_extra["siliconfriend"]["memories"])


def test_rate_limits_like_logins(tmp_path, e5_embedder):
    """Wrong keys from one client: after five within the window the next wrong one gets 429, while
    the valid keys of everyone behind that client still work; a good key over its requests a
    minute: 429 with Retry-After."""
    served, stop = serve_api(tmp_path / "home", e5_embedder, api_requests_per_minute=3)
    try:
        key, other = served.signup("hal"), served.signup("ivy")
        for _ in range(5):
            with pytest.raises(openai.AuthenticationError):
                client(served, "sf-" + "y" * 43).models.list()
        with pytest.raises(openai.RateLimitError) as err:
            client(served, "sf-" + "z" * 43).models.list()
        assert err.value.status_code == 429 and err.value.code == "rate_limit_exceeded"
        first = int(err.value.response.headers["Retry-After"])
        assert 1 <= first <= 5  # the README: a pause of 5 s after the fifth wrong key...
        time.sleep(first)
        with pytest.raises(openai.AuthenticationError):  # ...after which one more try is heard...
            client(served, "sf-" + "z" * 43).models.list()
        with pytest.raises(openai.RateLimitError) as err:
            client(served, "sf-" + "z" * 43).models.list()
        assert 6 <= int(err.value.response.headers["Retry-After"]) <= 10  # ...and the next pause is 10 s
        # one stale key jams nobody: hal's and ivy's keys are served from the same client
        assert client(served, key).models.list().data and client(served, other).models.list().data
        served.api.accounts.store.prune_events(float("inf"))  # the window has passed
        sdk = client(served, key)
        for _ in range(2):  # hal's third request of the minute (the first was above)
            sdk.models.list()
        with pytest.raises(openai.RateLimitError) as err:
            sdk.models.list()
        assert "3 requests a minute" in err.value.body["message"]
    finally:
        stop()
