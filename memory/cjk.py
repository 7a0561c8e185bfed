"""Chinese, Japanese and Korean text: the one definition of which characters are CJK.

``IDEOGRAPHS``: the Han characters (CJK Unified Ideographs, Extension A, Compatibility).
``WIDE``: every character a tokenizer tends to give a token of its own: the ideographs plus
CJK punctuation, kana, hangul syllables and full-width forms.
"""

from __future__ import annotations

import re

IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
WIDE = "\u3000-\u30ff" + IDEOGRAPHS + "\uac00-\ud7af\uff00-\uffef"

IDEOGRAPH = re.compile(f"[{IDEOGRAPHS}]")
IDEOGRAPH_RUN = re.compile(f"[{IDEOGRAPHS}]+")
_WIDE = re.compile(f"[{WIDE}]")


def has_ideographs(text: str) -> bool:
    return IDEOGRAPH.search(text) is not None


def count_wide(text: str) -> int:
    """How many characters of ``text`` are wide CJK characters (``WIDE``)."""
    if text.isascii():  # a flag CPython keeps on every string: an English text's count is free
        return 0
    return len(_WIDE.findall(text))


def language_of(text: str) -> str:
    """'zh' when at least a fifth of the letters are ideographs, else 'en'."""
    letters = sum(ch.isalpha() for ch in text) or 1
    return "zh" if len(IDEOGRAPH.findall(text)) * 5 >= letters else "en"
