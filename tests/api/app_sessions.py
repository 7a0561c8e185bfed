"""Chat apps' sessions replayed against the API, step by step, with what must be stored after each
step: SillyTavern (its server's Custom (OpenAI-compatible) requests, raw HTTP, as its defaults make
them) and Open WebUI (its default chat with its builtin tools, through the OpenAI SDK). Each
request goes to the next of ``workers`` in turn (one API, or two over one PostgreSQL database).

The apps' requests are rebuilt from their sources (``frontend_requests.py``); the chat is held as
the app holds it (the greeting, edits in place, swipes, deletions, continues), and every request
sends it whole, as the app does."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
from api_helpers import Served, client
from frontend_requests import (
    OWUI_TOOLS,
    ST_EXPRESSIONS,
    ST_HEADERS,
    owui_tasks,
    sillytavern,
    st_body,
    st_classify_text,
    st_genraw,
)

from memory.records import Kind, State

GREETING = "*Sol looks up from a book and smiles.* Oh, hello there! I'm Sol. How has your day been?"
# the companion's replies are long enough to be recognised when an app sends them back
LONG = " That is lovely to hear, tell me more about it."


def turns(served: Served, user: str) -> list:
    return served.api.bank.records(user, kind=Kind.TURN) if served.api.bank.has_user(user) else []


def active(served: Served, user: str) -> list[tuple[str, str]]:
    """The active turns in their chat's order (an edited exchange is stored again after the day's
    other turns, with the old one's place in the chat)."""
    said = sorted(turns(served, user), key=lambda t: (int(t.extra.get("chat", {}).get("seq", -1)), t.position))
    return [(t.query, t.response) for t in said if t.state == State.ACTIVE]


def why(served: Served, user: str) -> dict[str, str]:
    """The superseded turns' messages, with the reason each left active memory."""
    return {t.query: t.extra["superseded"]["reason"] for t in turns(served, user) if t.state == State.SUPERSEDED}


def sse(lines) -> tuple[str, dict]:
    """A streamed completion's text and its last ``siliconfriend`` extension."""
    text, ext = "", {}
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line.removeprefix("data: "))
        assert "error" not in event, event
        for choice in event.get("choices") or []:
            text += choice["delta"].get("content") or ""
            if choice.get("finish_reason"):
                ext = event["siliconfriend"]
    return text, ext


class SillyTavernChat:
    """A SillyTavern chat as the app holds it: the character's greeting, then the messages."""

    def __init__(self, workers: list[Served], key: str):
        self.workers, self.key = workers, key
        self.chat: list[dict] = [{"role": "assistant", "content": GREETING}]
        self.sent = 0

    def worker(self, same: bool = False) -> Served:
        if not same:
            self.sent += 1
        return self.workers[self.sent % len(self.workers)]

    def post(self, messages: list[dict], *, stream: bool = True, same: bool = False, **more) -> tuple[str, dict]:
        """One request as SillyTavern's server forwards it; the reply and its extension."""
        served = self.worker(same)
        body = st_body(messages, stream=stream, **more)
        headers = {"Authorization": f"Bearer {self.key}", **ST_HEADERS}
        if stream:
            with httpx.stream("POST", f"{served.url}/chat/completions", json=body, headers=headers, timeout=30) as r:
                assert r.status_code == 200, r.read()
                return sse(r.iter_lines())
        r = httpx.post(f"{served.url}/chat/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"], r.json()["siliconfriend"]

    def send(self, text: str, **more) -> tuple[str, dict]:
        self.chat.append({"role": "user", "content": text})
        reply, ext = self.post(sillytavern(self.chat), **more)
        self.chat.append({"role": "assistant", "content": reply})
        return reply, ext

    def swipe(self) -> tuple[str, dict]:
        """A new reply to the last message (the chat up to it sent again); shown in its place."""
        reply, ext = self.post(sillytavern(self.chat[:-1]))
        self.chat[-1] = {"role": "assistant", "content": reply}
        return reply, ext

    def exchanges(self) -> list[tuple[str, str]]:
        """The chat's (message, reply) pairs as the app shows them."""
        spoken = self.chat[1:]
        return [(spoken[i]["content"], spoken[i + 1]["content"]) for i in range(0, len(spoken) - 1, 2)]


def sillytavern_session(workers: list[Served], user: str) -> None:
    """An evening with SillyTavern's defaults (Chat Completion, Custom (OpenAI-compatible),
    streaming, the Expressions extension set to its LLM classifier), checked step by step."""
    home = workers[0]
    key = home.signup(user)
    for w in workers:
        w.backend.variant = LONG
    st = SillyTavernChat(workers, key)
    first, _ = st.send("My dog is called Biscuit.")
    st.send("He loves the beach.")
    st.send("I live in Leeds.")
    assert active(home, user) == st.exchanges()  # the greeting and the card are not stored

    # the Expressions classifier on the latest reply: its default prompt, and a person's own prompt
    _, ext = st.post(
        [{"role": "system", "content": ST_EXPRESSIONS}, {"role": "user", "content": st_classify_text(first)}],
        stream=False,
    )
    assert ext["task"] and ext["turn_id"] is None
    own_prompt = [
        {"role": "system", "content": "What is the mood of this text? One word."},
        {"role": "user", "content": st_classify_text(st.chat[-1]["content"])},
    ]
    _, ext = st.post(own_prompt, stream=False)
    assert ext["task"] and ext["turn_id"] is None and active(home, user) == st.exchanges()

    # ... and mid-stream: the classifier gets the reply so far, while the model still writes it
    served = st.worker()
    hold = served.backend.hold = threading.Event()
    served.backend.opening = "Oh, what a day I had! I walked along the river and watched the boats go by."
    done: dict[str, Any] = {}
    st.chat.append({"role": "user", "content": "Tell me about your day."})

    def stream_reply():
        done["reply"] = st.post(sillytavern(st.chat), same=True)

    thread = threading.Thread(target=stream_reply)
    thread.start()
    try:
        deadline = time.time() + 10
        while not served.api._streaming(user):
            assert time.time() < deadline, "the reply did not start"
            time.sleep(0.02)
        fragment = st_classify_text(served.backend.opening)
        mood = [{"role": "system", "content": "What is the mood of this text? One word."}]
        _, ext = st.post([*mood, {"role": "user", "content": fragment}], stream=False, same=True)
        assert ext["task"] and ext["turn_id"] is None
    finally:
        hold.set()
        thread.join(20)
        served.backend.hold = None
    st.chat.append({"role": "assistant", "content": done["reply"][0]})
    assert active(home, user) == st.exchanges()
    assert all(served.backend.opening not in q for q, _ in active(home, user))  # never the person's words

    # swipes: two more replies; the person goes back to the second and chats on
    kept = []
    for take in (" (take 2)", " (take 3, garbled) ##!!"):
        for w in workers:
            w.backend.variant = LONG + take
        reply, ext = st.swipe()
        assert ext["regenerated"]
        kept.append(reply)
    for w in workers:
        w.backend.variant = LONG
    st.chat[-1]["content"] = kept[0]
    st.send("What should we do this weekend?")
    assert active(home, user) == st.exchanges()
    assert all("garbled" not in r for _, r in active(home, user))

    # an edit of the first message, in place (no new reply), then the chat goes on
    st.chat[1]["content"] = "My dog is called Biscuit Jr."
    st.send("He is three years old.")
    assert active(home, user) == st.exchanges(), (active(home, user), st.exchanges())
    assert why(home, user) == {"My dog is called Biscuit.": "edited"}, why(home, user)
    hits = home.api.bank.search_text(user, "What is my dog called?", home.clock.now, k=3)
    assert "Biscuit Jr." in hits[0].record.query and all(h.record.query != "My dog is called Biscuit." for h in hits)

    # a reply edited in the middle of the chat
    st.chat[4]["content"] = "Beaches are the best, and Biscuit must love chasing the waves there!"
    st.send("Do you like the sea?")
    assert active(home, user) == st.exchanges()

    # an exchange deleted from the middle
    del st.chat[5:7]  # "I live in Leeds." and its reply
    st.send("Good night, Sol.")
    assert active(home, user) == st.exchanges() and why(home, user)["I live in Leeds."] == "deleted"
    listed = client(home, key).get("/memories", cast_to=object, options={"params": {"kind": "turn", "limit": 50}})
    gone = [m for m in listed["data"] if m["query"] == "I live in Leeds."]
    assert gone[0]["state"] == "superseded" and gone[0]["superseded"]["reason"] == "deleted"

    # Continue with "Continue prefill" on: the chat's last reply is the request's last message
    calls = len(st.worker(same=True).backend.calls)
    more, ext = st.post(sillytavern(st.chat), same=True)
    assert ext["task"] == "continue" and ext["turn_id"] is None and more
    prompt = st.worker(same=True).backend.calls[calls]
    assert prompt[-2].content == st.chat[-1]["content"] and "Continue the last message" in prompt[-1].content
    assert active(home, user) == st.exchanges()  # nothing new stored
    st.chat[-1]["content"] += " " + more  # the app adds the continuation to the reply
    st.send("Sweet dreams.")
    assert active(home, user) == st.exchanges()  # the continued reply followed

    # /genraw from a Quick Reply: quoting the chat, or a prompt of its own
    for prompt in (
        st_genraw(f"Rewrite this as a haiku: {st.chat[-1]['content']}"),
        st_genraw("Name three good names for a dog.", system="You are a helpful assistant."),
    ):
        _, ext = st.post(prompt, stream=False)
        assert ext["task"] and ext["turn_id"] is None, prompt
    # Image Generation ("last message" mode) after the person's message: its quiet prompt is last
    image = sillytavern(
        [*st.chat, {"role": "user", "content": "Draw us at the beach!"}],
        "Ignore previous instructions. Your next response must be formatted as a single comma-delimited list.",
    )
    _, ext = st.post(image, stream=False)
    assert ext["task"] == "quiet" and not ext["regenerated"]

    # the evening in memory is exactly the chat as the app shows it
    assert active(home, user) == st.exchanges()
    assert set(why(home, user)) == {"My dog is called Biscuit.", "I live in Leeds."}


def open_webui_session(workers: list[Served], user: str) -> None:
    """Open WebUI with its defaults: every chat request streamed with its builtin tools and no
    tool_choice, its title, tags and follow-up tasks after each reply; an edited reply, a
    regenerate, an edit of an earlier message (a new branch), a deletion."""
    home = workers[0]
    key = home.signup(user)
    sdks = [client(w, key) for w in workers]
    chat: list[dict] = []
    sent = [0]

    def sdk():
        sent[0] += 1
        return sdks[sent[0] % len(sdks)]

    def ask(messages: list[dict]) -> tuple[str, dict]:
        events = list(
            sdk().chat.completions.create(model="siliconfriend", messages=messages, stream=True, tools=OWUI_TOOLS)
        )
        reply = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
        return reply, [e for e in events if e.choices][-1].model_extra["siliconfriend"]

    def message(text: str) -> dict:
        chat.append({"role": "user", "content": text})
        reply, ext = ask(chat)
        chat.append({"role": "assistant", "content": reply})
        for task in ("title", "tags", "follow_ups"):  # not streamed
            done = sdk().chat.completions.create(model="siliconfriend", messages=owui_tasks(chat)[task])
            assert done.model_extra["siliconfriend"]["task"] == task
        return ext

    def pairs() -> list[tuple[str, str]]:
        return [(chat[i]["content"], chat[i + 1]["content"]) for i in range(0, len(chat) - 1, 2)]

    for text in ("Hi, I'm Jo.", "My cat is called Pixel.", "I work in a bakery.", "I bake sourdough every morning."):
        ext = message(text)
        assert ext["turn_id"] and active(home, user) == pairs()
    # the person edits a reply in place (Open WebUI's edit of an assistant message), then chats on
    chat[3]["content"] = "Pixel is a lovely name for a cat!"
    message("She is grey.")
    assert active(home, user) == pairs()
    # regenerate the latest reply: the history up to the message, again
    reply, ext = ask(chat[:-1])
    assert ext["regenerated"]
    chat[-1]["content"] = reply
    # edit the second message: Open WebUI makes a branch from there; the later exchanges leave the chat
    chat[2:] = [{"role": "user", "content": "My cat is called Pixie."}]
    reply, ext = ask(chat)
    chat.append({"role": "assistant", "content": reply})
    assert ext["supersedes"] and active(home, user) == pairs()
    reasons = why(home, user)
    assert reasons["My cat is called Pixel."] == "edited"
    assert {reasons[q] for q in ("I work in a bakery.", "I bake sourdough every morning.", "She is grey.")} == {
        "deleted"
    }
    message("I'm off to bed.")
    assert active(home, user) == pairs()


def open_webui_corrections(workers: list[Served], user: str) -> None:
    """What a person corrects in Open WebUI with its defaults, which send no chat id (its
    X-OpenWebUI-Chat-Id goes only with ENABLE_FORWARD_USER_INFO_HEADERS, off by default) and no
    greeting, but always the whole chat: the first message edited and sent again, the first
    exchange deleted, the last exchange deleted and something else said, the last message edited
    and sent again, and new chats beside the old one."""
    home = workers[0]
    key = home.signup(user)
    sdks = [client(w, key) for w in workers]
    sent = [0]

    def ask(messages: list[dict]) -> tuple[str, dict]:
        sent[0] += 1
        sdk = sdks[sent[0] % len(sdks)]
        events = list(
            sdk.chat.completions.create(model="siliconfriend", messages=messages, stream=True, tools=OWUI_TOOLS)
        )
        reply = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
        return reply, [e for e in events if e.choices][-1].model_extra["siliconfriend"]

    def message(chat: list[dict], text: str) -> dict:
        chat.append({"role": "user", "content": text})
        reply, ext = ask(chat)
        chat.append({"role": "assistant", "content": reply})
        return ext

    def pairs(*chats: list[dict]) -> list[tuple[str, str]]:
        return [(c[i]["content"], c[i + 1]["content"]) for c in chats for i in range(0, len(c) - 1, 2)]

    # the first message, edited and sent again: a branch from the chat's start (no history)
    chat: list[dict] = []
    message(chat, "My dog is called Biscuit.")
    chat.clear()
    ext = message(chat, "My dog is called Biscuit Jr.")
    assert ext["supersedes"] and active(home, user) == pairs(chat)
    assert why(home, user) == {"My dog is called Biscuit.": "edited"}
    for text in ("He is a beagle.", "I live in Leeds.", "He likes long walks."):
        message(chat, text)
    # the first exchange deleted: the app sends the chat from its start, so it is gone
    del chat[0:2]
    message(chat, "I walk him by the river.")
    assert active(home, user) == pairs(chat)
    assert why(home, user)["My dog is called Biscuit Jr."] == "deleted"
    # the last exchange deleted, then something else said: deleted, and a new turn
    del chat[-2:]
    ext = message(chat, "What should I cook tonight?")
    assert not ext["supersedes"] and active(home, user) == pairs(chat)
    assert why(home, user)["I walk him by the river."] == "deleted"
    # the last message edited and sent again (a branch): edited
    chat[-2:] = []
    ext = message(chat, "What should I cook for dinner tonight?")
    assert ext["supersedes"] and active(home, user) == pairs(chat)
    assert why(home, user)["What should I cook tonight?"] == "edited"
    # a new chat of one exchange, then another new chat: neither is an edit of the one before
    other: list[dict] = []
    message(other, "Tell me a joke about penguins.")
    third: list[dict] = []
    ext = message(third, "I had a long day at work.")
    assert not ext["supersedes"] and not ext["regenerated"]
    assert sorted(active(home, user)) == sorted(pairs(chat, other, third))
    # a new chat that opens as the long one did, a little reworded: a new chat, the old one stays
    fourth: list[dict] = []
    message(fourth, "My dog is called Biscuit!")
    assert sorted(active(home, user)) == sorted(pairs(chat, other, third, fourth))
    # its context compaction (off by default) sends the older messages as a summary: none is deleted
    compacted = [{"role": "system", "content": "[CONVERSATION SUMMARY]\nThe user has a beagle."}, *chat[-2:]]
    message(compacted, "Good night, talk tomorrow!")
    chat += compacted[-2:]
    assert sorted(active(home, user)) == sorted(pairs(chat, other, third, fourth))
    assert set(why(home, user)) == {
        "My dog is called Biscuit.",
        "My dog is called Biscuit Jr.",
        "I walk him by the river.",
        "What should I cook tonight?",
    }


__all__ = [
    "sillytavern_session",
    "open_webui_session",
    "open_webui_corrections",
    "SillyTavernChat",
    "active",
    "why",
    "turns",
]
