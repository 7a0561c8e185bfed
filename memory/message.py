"""Words a person reads, made where they are said: each message has an id and its text in English
and in Chinese, and is handed on as a ``Said`` (its id and values) for the page to show in its
language.

A ``Said`` is also a ``str``: its English text, which is what logs, the command line and the API's
English fields show, and what older records stored. ``Message.read`` finds the message an English
text was made from (a stored "why", a refusal that crossed a process), so that those too are shown
in the page's language, from the same definitions.
"""

from __future__ import annotations

import re
import string
from typing import Any

LANGS = ("en", "zh")


class Said(str):
    """A message as said: the English text, with the message and the values it was made from."""

    message: Message
    values: dict[str, Any]

    def __new__(cls, message: Message, values: dict[str, Any]) -> Said:
        said = super().__new__(cls, message.render("en", values))
        said.message = message
        said.values = values
        return said

    @property
    def id(self) -> str:
        return self.message.id

    def in_lang(self, lang: str) -> str:
        return self.message.render(lang, self.values)

    # a copy or a pickle is the same message with the same values (str's own would lose them)
    def __reduce__(self) -> tuple:
        return (Said, (self.message, self.values))

    def __copy__(self) -> Said:
        return self

    def __deepcopy__(self, memo: dict) -> Said:
        return self


class Message:
    """One message: ``id`` and a template per language (``str.format`` fields, no format specs:
    values come as text; a value that is itself a ``Said`` is shown in the same language)."""

    _all: dict[str, Message] = {}

    def __init__(self, id: str, *, en: str, zh: str):
        if id in Message._all:
            raise ValueError(f"two messages with the id {id!r}")
        if any(spec for text in (en, zh) for _, _, spec, _ in string.Formatter().parse(text)):
            raise ValueError(f"{id}: a value comes formatted already (a stored text reads it back as text)")
        self.id, self.templates = id, {"en": en, "zh": zh}
        Message._all[id] = self
        self._pattern: re.Pattern[str] | None = None

    def __call__(self, **values: Any) -> Said:
        return Said(self, values)

    def __reduce__(self) -> tuple:
        return (Message.get, (self.id,))

    @classmethod
    def get(cls, id: str) -> Message:
        return cls._all[id]

    def render(self, lang: str, values: dict[str, Any]) -> str:
        template = self.templates.get(lang) or self.templates["en"]
        shown = {k: v.in_lang(lang) if isinstance(v, Said) else v for k, v in values.items()}
        return template.format(**shown)

    @property
    def fields(self) -> list[str]:
        return [name for _, name, _, _ in string.Formatter().parse(self.templates["en"]) if name]

    def match(self, text: str) -> Said | None:
        """This message, if ``text`` is its English text (the values read back as text)."""
        if self._pattern is None:
            parts = []
            for literal, name, _, _ in string.Formatter().parse(self.templates["en"]):
                parts.append(re.escape(literal))
                if name:
                    parts.append(f"(?P<{name}>.+?)")
            self._pattern = re.compile("".join(parts) + r"\Z", re.S)
        m = self._pattern.match(text)
        if m is None:
            return None
        # a value that is itself a message's words ("edited", "40 seconds") is read back as that message
        values = {k: Message.read(v) or v for k, v in m.groupdict().items()}
        return Said(self, values)

    @classmethod
    def all(cls) -> list[Message]:
        return list(cls._all.values())

    @classmethod
    def read(cls, text: str) -> Said | None:
        """The message ``text`` was made from (its English text), or None. A message without
        values is tried first, then the others, longer templates first (the most specific)."""
        if isinstance(text, Said):
            return text
        for message in sorted(cls._all.values(), key=lambda m: (bool(m.fields), -len(m.templates["en"]))):
            said = message.match(text)
            if said is not None:
                return said
        return None


__all__ = ["LANGS", "Message", "Said"]
