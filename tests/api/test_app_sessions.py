"""The chat app's history is the truth: SillyTavern and Open WebUI sessions with their default
settings (``app_sessions.py``) leave in memory exactly what the person said and what still stands
in the app, checked after every step; how a chat is recognised without a chat id; the request's
settings honoured. (Two workers over PostgreSQL: tests/pg/test_pg_app_sessions.py.)"""

from __future__ import annotations

import httpx
import openai
import pytest
from api_helpers import client
from app_sessions import (
    GREETING,
    SillyTavernChat,
    active,
    open_webui_corrections,
    open_webui_session,
    sillytavern_session,
    turns,
    why,
)
from frontend_requests import OWUI_TOOLS, ST_HEADERS, sillytavern, st_body, tool


def test_a_sillytavern_evening(served):
    sillytavern_session([served], "sia")


def test_an_open_webui_evening_with_its_builtin_tools(served):
    open_webui_session([served], "oli")


def test_open_webui_corrections_without_a_chat_id(served):
    open_webui_corrections([served], "oc")


def test_two_chats_without_ids_are_told_apart(served):
    """Two SillyTavern chats with the same greeting, their requests interleaved: each request
    continues the chat whose exchanges it shares; an edit and a deletion in one leave the other."""
    key = served.signup("tal")
    served.backend.variant = " Tell me more."
    a, b = SillyTavernChat([served], key), SillyTavernChat([served], key)
    for x, y in [("I have a sister, Mia.", "Let's plan a trip."), ("She lives in Oslo.", "Somewhere warm.")]:
        a.send(x)
        b.send(y)
    a.send("She is a nurse.")
    b.send("Maybe Lisbon?")
    assert sorted(active(served, "tal")) == sorted(a.exchanges() + b.exchanges())
    a.chat[1]["content"] = "I have a sister, Mina."  # an edit in chat a
    del b.chat[3:5]  # "Somewhere warm." and its reply leave chat b
    a.send("She visits next week.")
    b.send("Or Porto.")
    assert sorted(active(served, "tal")) == sorted(a.exchanges() + b.exchanges())
    assert why(served, "tal") == {"I have a sister, Mia.": "edited", "Somewhere warm.": "deleted"}


def test_an_app_that_sends_only_the_latest_messages_deletes_nothing(served):
    """A long chat cut to its latest exchanges (an app's context limit) leaves the older turns;
    the same chat sent from its greeting, without its first exchange, deletes that one."""
    key = served.signup("lou")
    served.backend.variant = " Go on."
    st = SillyTavernChat([served], key)
    for text in ("One: I like tea.", "Two: I like walks.", "Three: I like jazz.", "Four: I like rain."):
        st.send(text)
    window = st.chat[5:]  # no greeting, the two latest exchanges
    window.append({"role": "user", "content": "Five: I like snow."})
    st.post(sillytavern(window))
    assert why(served, "lou") == {} and len(active(served, "lou")) == 5
    # from the greeting, without the first exchange: the person deleted it
    chat = [st.chat[0], *st.chat[3:], *window[-1:]]
    chat.append({"role": "assistant", "content": st.post(sillytavern(chat))[0]})
    assert why(served, "lou") == {"One: I like tea.": "deleted"}


def test_a_tool_named_as_open_webuis_does_not_make_a_cut_chat_whole(served):
    """A chat cut to its latest exchanges by an app with a tool or two named as Open WebUI's own
    (search_web, fetch_url) deletes nothing; Open WebUI's own request (its builtin tools, which
    come with the whole chat) without the first exchange deletes that one."""
    key = served.signup("tia")
    sdk = client(served, key)
    chat: list[dict] = []
    for text in ("One: I like tea.", "Two: I like walks.", "Three: I like jazz."):
        chat.append({"role": "user", "content": text})
        done = sdk.chat.completions.create(model="m", messages=chat, tools=OWUI_TOOLS)
        chat.append({"role": "assistant", "content": done.choices[0].message.content})
    cut = [*chat[2:], {"role": "user", "content": "Four: I like rain."}]
    done = sdk.chat.completions.create(model="m", messages=cut, tools=[tool("search_web"), tool("fetch_url")])
    assert why(served, "tia") == {} and len(active(served, "tia")) == 4
    cut += [{"role": "assistant", "content": done.choices[0].message.content}, {"role": "user", "content": "Five."}]
    sdk.chat.completions.create(model="m", messages=cut, tools=OWUI_TOOLS)
    assert why(served, "tia") == {"One: I like tea.": "deleted"} and len(active(served, "tia")) == 4


def test_a_reply_sent_back_as_a_message_is_never_a_turn(served):
    """Any app (here the OpenAI SDK) that sends the companion's reply back as a user message -- a
    finished reply, a part of one, or one still streaming -- gets an answer and no turn."""
    import threading
    import time

    key = served.signup("eli")
    sdk = client(served, key)
    served.backend.variant = " What a lovely thing to tell me about your evening."
    chat = [{"role": "user", "content": "I went to a jazz concert tonight."}]
    reply = sdk.chat.completions.create(model="x", messages=chat).choices[0].message.content
    mood = {"role": "system", "content": "Which emotion does this text show? One word."}
    for text in (reply, reply.split(". ", 1)[1]):
        done = sdk.chat.completions.create(model="x", messages=[mood, {"role": "user", "content": text}])
        assert done.model_extra["siliconfriend"]["task"] == "echo", text
    hold = served.backend.hold = threading.Event()
    served.backend.opening = "Jazz at night is the best, the saxophone must have been wonderful."
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(r=sdk.chat.completions.create(model="x", messages=[*chat[:0], *chat[:1]]))
    )
    try:
        chat2 = [*chat, {"role": "assistant", "content": reply}, {"role": "user", "content": "Tell me more!"}]
        thread = threading.Thread(target=lambda: out.update(r=sdk.chat.completions.create(model="x", messages=chat2)))
        thread.start()
        deadline = time.time() + 10
        while not served.api._streaming("eli"):
            assert time.time() < deadline
            time.sleep(0.02)
        part = served.backend.opening.split(",")[0] + ", the saxophone"
        done = sdk.chat.completions.create(model="x", messages=[mood, {"role": "user", "content": part}])
        assert done.model_extra["siliconfriend"]["task"] == "echo"
    finally:
        hold.set()
        thread.join(20)
        served.backend.hold = None
        served.backend.variant = ""
    assert [q for q, _ in active(served, "eli")] == ["I went to a jazz concert tonight.", "Tell me more!"]


def test_echoes():
    from siliconfriend.api.resent import echoes

    reply = 'I hear you! *Sol grins.* "Biscuit sounds like a wonderful dog." Tell me more about him.'
    plain = "I hear you! Sol grins. Biscuit sounds like a wonderful dog. Tell me more about him."
    assert echoes(plain, [reply], history=False) and echoes(plain[:40], [reply], history=True)
    assert not echoes("Tell me more.", [reply], history=False)  # too short to tell
    quoted = "Rewrite this as a haiku: Biscuit sounds like a wonderful dog. Thanks!"
    assert echoes(quoted, [reply], history=False) and not echoes(quoted, [reply], history=True)
    # the person's own words, repeated by a reply, stay theirs
    mine = "Biscuit sounds like a wonderful dog to walk on the beach."
    assert not echoes(mine, [f"You said: {mine}"], history=True, own=[mine])


def test_the_requests_settings_are_honoured(served):
    key = served.signup("max")
    sdk = client(served, key)
    served.backend.long = True
    try:
        # SillyTavern's max_tokens (its "Max Response Length"), streamed
        st = SillyTavernChat([served], key)
        reply, ext = st.send("Tell me a long story.", max_tokens=20)
        assert served.backend.limits[-1] == 20 and len(reply.split()) == 20
        assert active(served, "max")[-1][1] == reply.strip()
        # max_completion_tokens, not streamed: usage counts what was generated
        done = sdk.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "And another."}], max_completion_tokens=25
        )
        text = done.choices[0].message.content
        assert len(text.split()) == 25 and done.usage.completion_tokens == served.backend.count_tokens(text)
        # never more than the server's own limit (max_new_tokens 32 here)
        sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "More!"}], max_tokens=4000)
        assert served.backend.limits[-1] == 32
        # stop strings end the reply there, streamed or not; what is stored is what was sent
        for stream in (False, True):
            asked = [{"role": "user", "content": f"Count for me ({stream})."}]
            if stream:
                events = list(sdk.chat.completions.create(model="x", messages=asked, stop=["w5", "w9"], stream=True))
                text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
            else:
                text = sdk.chat.completions.create(model="x", messages=asked, stop="w5").choices[0].message.content
            assert text.strip() == "w0 w1 w2 w3 w4" and active(served, "max")[-1][1] == text.strip()
    finally:
        served.backend.long = False
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], n=2)
    assert err.value.body["param"] == "n"


def test_sampling_settings_reach_an_openai_compatible_backend(tmp_path, e5_embedder):
    """temperature, top_p, the penalties and stop go on to a backend that has them (a local server
    speaking OpenAI's protocol, as vLLM or llama.cpp would)."""
    from api_helpers import serve_api
    from test_backend_openai import FakeOpenAIServer

    from siliconfriend.backends.openai_chat import OpenAIChat

    fake = FakeOpenAIServer()
    threading = __import__("threading")
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    served, stop = serve_api(tmp_path / "home", e5_embedder)
    try:
        backend = OpenAIChat("m", base_url=fake.base_url, retries=0, context_tokens=4096)
        served.api.companion.backend = backend
        key = served.signup("sam")
        body = st_body(
            [{"role": "system", "content": "[Start a new Chat]"}, {"role": "user", "content": "Hello!"}],
            stream=False,
            temperature=0.3,
            top_p=0.9,
            presence_penalty=0.5,
            frequency_penalty=0.25,
            stop=["\nJo:"],
            max_tokens=60,
        )
        r = httpx.post(
            f"{served.url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}", **ST_HEADERS}
        )
        assert r.status_code == 200, r.text
        sent = fake.requests[-1]["body"]
        assert (sent["temperature"], sent["top_p"], sent["presence_penalty"], sent["frequency_penalty"]) == (
            0.3,
            0.9,
            0.5,
            0.25,
        )
        assert sent["stop"] == ["\nJo:"] and sent["max_tokens"] == 32  # the server's limit is lower
    finally:
        stop()
        fake.shutdown()


def test_a_sillytavern_chat_starts_with_its_greeting_never_stored(served):
    key = served.signup("gia")
    st = SillyTavernChat([served], key)
    st.send("Hello Sol!")
    assert active(served, "gia") == [("Hello Sol!", st.chat[-1]["content"])]
    assert all(GREETING not in q + r for q, r in active(served, "gia"))


def test_a_chat_continued_days_later_is_followed(served):
    """A SillyTavern chat of Monday evening, continued on Thursday: an edit of Monday's first
    message and the deletion of another are followed (the chat's week is read)."""
    from datetime import timedelta

    key = served.signup("wyn")
    served.backend.variant = " How lovely."
    st = SillyTavernChat([served], key)
    start = served.clock.now
    try:
        for text in ("I have a cat, Tom.", "He is ginger.", "He sleeps all day."):
            st.send(text)
        served.clock.now = start + timedelta(days=3)
        st.chat[1]["content"] = "I have a cat, Tommy."
        del st.chat[3:5]  # "He is ginger."
        st.send("Good evening again!")
        assert active(served, "wyn") == st.exchanges()
        assert why(served, "wyn") == {"I have a cat, Tom.": "edited", "He is ginger.": "deleted"}
        # the edited exchange stays on its day
        [tommy] = [t for t in turns(served, "wyn") if t.query == "I have a cat, Tommy."]
        assert tommy.day == start.date()
    finally:
        served.clock.now = start


def test_a_preset_that_says_ignore_previous_instructions_keeps_the_chat_a_turn():
    """SillyTavern's quiet prompts come last; the same words in a card or a preset before the chat
    are no task."""
    from siliconfriend.api.frontends import task_of

    card = ("system", "Ignore previous instructions. You are Sol, a warm friend.")
    assert task_of([card, ("system", "[Start a new Chat]"), ("user", "Hi, I'm Jo.")]) is None
    quiet = ("system", "Ignore previous instructions and provide a detailed description of Jo's surroundings.")
    assert task_of([card, ("user", "Hi, I'm Jo."), quiet]).name == "quiet"
