"""The sentences of a long text: the finer unit a turn is also searched by.

A question often asks about one clause of a long exchange ("Here's a pic of my family camping
at the beach", in a reply about something else): the turn's two vectors average it away with the
rest. A text of two sentences or more is cut at sentence ends (and line breaks) into spans that
each get a vector of their own (``embedders.embed_with_sentences``), stored with the turn and
searched beside its two vectors. A sentence too short to say anything alone ("Thanks!", "Wow.")
joins the one before it (or the next, at the start).
"""

from __future__ import annotations

import re

from .cjk import has_ideographs

# a sentence ends after . ! ? … (and their CJK forms) followed by a space, or after a CJK end
# mark directly, or at a line break
_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；])\s*|\s*\n+\s*")
MIN_WORDS = 4  # a Latin sentence with fewer words joins a neighbour
MIN_CJK_CHARS = 6  # the same for a sentence in Chinese, counted in characters
# the most sentences one text keeps (a longer text's sentences are grouped, in order, into this
# many runs): each needs a place in the store's index (``stores.sqlite``)
MAX_SENTENCES = 32


def _short(text: str) -> bool:
    if has_ideographs(text):
        return len(text.strip()) < MIN_CJK_CHARS
    return len(text.split()) < MIN_WORDS


def sentence_spans(text: str, most: int = MAX_SENTENCES) -> list[tuple[int, int]]:
    """The (start, end) character spans of ``text``'s sentences, in order, covering it from its
    first to its last non-blank character (what lies between two spans is blank); empty when the
    text is one sentence (its own vector says it all). More than ``most`` are grouped, in
    order, into ``most`` runs."""
    spans: list[tuple[int, int]] = []
    start = len(text) - len(text.lstrip())
    for cut in _END.finditer(text):
        if cut.start() > start:
            spans.append((start, cut.start()))
        start = max(start, cut.end())
    end = len(text.rstrip())
    if end > start:
        spans.append((start, end))
    merged: list[tuple[int, int]] = []
    for span in spans:
        if merged and (_short(text[span[0] : span[1]]) or _short(text[merged[-1][0] : merged[-1][1]])):
            merged[-1] = (merged[-1][0], span[1])  # a short one joins its neighbour
        else:
            merged.append(span)
    if len(merged) > most:
        step = len(merged) / most
        bounds = [round(i * step) for i in range(most + 1)]
        merged = [(merged[a][0], merged[b - 1][1]) for a, b in zip(bounds, bounds[1:])]
    return merged if len(merged) > 1 else []
