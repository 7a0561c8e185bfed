""" "What I remembered" for chat apps that drop the ``siliconfriend`` extension field (Open WebUI,
SillyTavern, LibreChat show only the message's text): on request, a short footnote appended to the
reply, in the language of the person's message, naming the memories used and the stored turn.

Opted into per request, so that each app can be set once: the header
``X-SiliconFriend-Show-Memories: true`` (Open WebUI's connection *Headers*, SillyTavern's
*Include Request Headers*, LibreChat's ``headers``) or the body field
``"siliconfriend": {"show_memories": true}``.

The footnote is display only. It is never stored (the stored reply is the companion's words), it
comes only with a reply that stored a turn (never under a chat title or a tag list), and when the
app sends the chat back, ``strip_footnotes`` takes it off the earlier replies, so that the history
the companion reads is what was said.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from memory.cjk import language_of
from memory.shown import UsedMemory

from ..i18n import t
from .service import Completion, bad_request

HEADER = "x-siliconfriend-show-memories"
SHOWN = 5  # memories listed (the companion puts retrieval_k of them in the prompt: 5 by default)
CLIP = 90  # characters of each memory's text
RULE = "\n\n---\n"
# the footnote's first line in each language: how it is told apart from the reply when sent back
_TITLES = {lang: t("remembered", lang) for lang in ("en", "zh")}
_FOOTNOTE = re.compile(
    r"\s*\n-{3,}[ \t]*\n+[ \t]*🧠 \*\*(?:" + "|".join(map(re.escape, _TITLES.values())) + r")\*\*.*\Z",
    re.DOTALL,
)
_TEXT = {
    "turn": {"en": "stored as turn #{id}: GET /v1/turns/{id}", "zh": "已存为第 #{id} 轮：GET /v1/turns/{id}"},
    "more": {"en": "…and {n} more", "zh": "……还有 {n} 条"},
}
_YES, _NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def wanted(headers: Mapping[str, str], body: Any) -> bool:
    """Whether the request asked for the footnote (the header wins over the body field)."""
    value: Any = headers.get(HEADER)
    if value is None and isinstance(body, dict):
        value = body.get("show_memories")
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower()
    if text not in _YES + _NO:
        raise bad_request("show_memories is true or false", "siliconfriend.show_memories")
    return text in _YES


def _escaped(text: str) -> str:
    """Markdown's marks escaped: a memory is shown as the words it is, never as markup."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"


def footnote(memories: Sequence[UsedMemory], turn_id: Any, said: str) -> str:
    """The footnote for a reply that used ``memories`` and was
    stored as ``turn_id``, in the language of ``said`` (the person's message); "" when no memory
    was used (an empty note under every new user's first replies says nothing)."""
    if not memories:
        return ""
    lang = language_of(said)
    lines = [f"🧠 **{_TITLES[lang]}** ({len(memories)})"]
    for m in memories[:SHOWN]:
        day = "" if m.day.startswith("1970") else f"{m.day} · "  # the global summary has no day
        lines.append(f"- {day}{_escaped(_clip(m.text))}")
    if len(memories) > SHOWN:
        lines.append(f"- {_TEXT['more'][lang].format(n=len(memories) - SHOWN)}")
    if turn_id is not None:
        lines.append(f"\n_{_TEXT['turn'][lang].format(id=turn_id)}_")
    return RULE + "\n".join(lines)


def of_completion(completion: Completion) -> str:
    """The footnote of a finished completion: "" unless it stored a turn (a task's reply, such as
    a chat title, never gets one)."""
    result = completion.stream.result
    if result is None or result.error or result.turn is None:
        return ""
    return footnote(completion.remembered, result.turn.id, result.turn.query)


def strip_footnote(text: str) -> str:
    return _FOOTNOTE.sub("", text)


def strip_footnotes(messages: Sequence[dict]) -> list[dict]:
    """The app's messages with our footnotes taken off its earlier replies (text or text parts)."""
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "assistant" and isinstance(content, str):
            m = {**m, "content": strip_footnote(content)}
        elif m.get("role") == "assistant" and isinstance(content, list):
            parts = [
                {**p, "text": strip_footnote(p["text"])}
                if isinstance(p, dict) and isinstance(p.get("text"), str)
                else p
                for p in content
            ]
            m = {**m, "content": parts}
        out.append(m)
    return out


__all__ = ["wanted", "footnote", "of_completion", "strip_footnote", "strip_footnotes", "HEADER"]
