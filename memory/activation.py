"""What a turn's use of its memories says about them: the gain each recall earns and which
memories the person confirmed (the forgetting policy turns these into strength).

- A memory's gain is relevance x confidence (0..1). Relevance: its score beside the best of the
  memories in the prompt (a strong match near 1, a marginal one far below). Confidence: full when
  the reply used it (the reply shares the memory's own words), ``IN_PROMPT`` when it only sat in
  the prompt. So a strong match the reply used gains a full step and a marginal one that only
  sat there a small part of it.
- Validation: the person confirms what the reply recalled ("yes, still Pixel", "对，还是它") or
  says a memory again in their own words: that memory gains much more (``EbbinghausPolicy.validate``).

Words are compared as the lexical search compares them (``lexical.Tokenizer``: stop words out,
Chinese cut into words), so this works alike in English and Chinese and needs no model.
"""

from __future__ import annotations

import re
from typing import Sequence

from .lexical import Tokenizer
from .records import Kind, MemoryRecord

IN_PROMPT = 0.4  # the confidence of a memory the reply did not use
RESTATED = 0.6  # the share of a memory's words a message must repeat to confirm it (3 words at least)

# a confirmation: these words at the start of the message, followed by anything but a letter
# ("yes, still Pixel"; "没错，就是它"), or the weaker ones followed by punctuation ("right!",
# "对，"), so that "right now ..." or "true crime ..." is not one
_YES = re.compile(
    r"^\s*(?:(?:yes|yeah|yep|yup|exactly|correct|that's right|that is right|you remember(?:ed)?|good memory)"
    r"(?![a-z])|(?:right|true|indeed|sure)\s*[,.!;:]|是的|是啊|没错|对的|对啊|嗯对|确实|你记得|对\s*[，,。！!])",
    re.I,
)


def words(tokenizer: Tokenizer, text: str) -> set[str]:
    return set(tokenizer.tokenize(text))


def own_words(rec: MemoryRecord) -> str:
    """What a memory says in the person's words: a turn's message, a summary's text."""
    return rec.query if rec.kind == Kind.TURN and rec.query.strip() else rec.text


def reply_uses(tokenizer: Tokenizer, rec: MemoryRecord, reply_words: set[str]) -> bool:
    """Whether a reply (its words) used ``rec``: it shares two of the memory's words, or the only
    word of a one-word memory."""
    mine = words(tokenizer, own_words(rec))
    shared = len(mine & reply_words)
    return shared >= min(2, len(mine)) and shared > 0


def recall_gains(tokenizer: Tokenizer, memories: Sequence[tuple[MemoryRecord, float]], reply: str) -> dict[int, float]:
    """Each memory's gain (relevance x confidence) from ``(record, retrieval score)`` pairs of one
    prompt and the reply it got."""
    if not memories:
        return {}
    top = max(score for _, score in memories)
    reply_words = words(tokenizer, reply)
    gains = {}
    for rec, score in memories:
        relevance = 1.0 if top <= 0 else min(1.0, max(0.0, score) / top)
        confidence = 1.0 if reply_uses(tokenizer, rec, reply_words) else IN_PROMPT
        gains[rec.stored_id] = round(relevance * confidence, 4)
    return gains


def confirms(message: str) -> bool:
    """Whether ``message`` begins by confirming what was just said ("yes", "right", "对", "没错")."""
    return bool(_YES.match(message))


def confirmed_by(
    tokenizer: Tokenizer,
    used: Sequence[MemoryRecord],
    message: str,
    previous: Sequence[MemoryRecord] = (),
    previous_reply: str = "",
) -> set[int]:
    """The ids of the memories ``message`` confirms: those of its prompt (``used``) it says again
    in the person's words, and, when it begins by agreeing ("yes, still Pixel"), those of the
    previous prompt (``previous``) that the previous reply used."""
    found = {r.stored_id for r in restated(tokenizer, used, message)}
    if previous and confirms(message):
        reply_words = words(tokenizer, previous_reply)
        found |= {r.stored_id for r in previous if reply_uses(tokenizer, r, reply_words)}
    return found


def restated(tokenizer: Tokenizer, memories: Sequence[MemoryRecord], message: str) -> list[MemoryRecord]:
    """The memories whose own words ``message`` says again (``RESTATED`` of them, 3 at least)."""
    said = words(tokenizer, message)
    found = []
    for rec in memories:
        mine = words(tokenizer, own_words(rec))
        shared = len(mine & said)
        if shared >= 3 and shared >= RESTATED * len(mine):
            found.append(rec)
    return found
