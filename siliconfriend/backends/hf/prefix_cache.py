"""Each conversation's KV cache of its prompt's stable prefix, kept between turns.

The companion orders its prompt so that a turn's prompt starts with the previous turn's (the
system message, then today's conversation; the memories and the new message come last). The
local model then needs to process only what is new: the cache of a conversation holds the keys
and values of the tokens up to where the last prompt's final message began, and the next prompt
is compared with those tokens; the common part is reused, the rest is processed.

A reused cache is cut to the tokens the new prompt shares with it, so what a prompt sees is
always the work of exactly its own tokens (a cache never carries anything else into a reply).
Bounded twice: per conversation (a longer prefix keeps only its first tokens) and in total
(the least recently used conversation goes first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

DEFAULT_TOTAL_MB = 512
DEFAULT_PER_KEY_MB = 128


@dataclass
class Prefix:
    ids: list[int]  # the tokens whose keys and values ``cache`` holds
    cache: Any  # a transformers DynamicCache of exactly those tokens
    nbytes: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def full_attention_only(cache: Any) -> bool:
    """Whether every layer of ``cache`` keeps all past tokens (then it can be cut back to any
    prefix); sliding-window and linear-attention layers cannot."""
    layers = list(getattr(cache, "layers", None) or [])
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def cache_bytes(cache: Any) -> int:
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None and hasattr(t, "numel"):
                total += t.numel() * t.element_size()
    return total


def cut(cache: Any, keep: int) -> None:
    """Cut ``cache`` to its first ``keep`` tokens, copying them so that the longer tensors (the
    reply's tokens, the memories) are freed."""
    have = cache.get_seq_length()
    if keep < have:
        cache.crop(keep - have)  # a negative count: the tokens to remove
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and hasattr(layer.keys, "clone"):
            layer.keys = layer.keys.clone()
            layer.values = layer.values.clone()


class PrefixCache:
    """Conversation key -> its ``Prefix``, least recently used first out."""

    def __init__(self, total_mb: float = DEFAULT_TOTAL_MB, per_key_mb: float = DEFAULT_PER_KEY_MB) -> None:
        self.total_bytes = int(total_mb * 2**20)
        self.per_key_bytes = int(min(per_key_mb, total_mb) * 2**20)
        self._entries: OrderedDict[str, Prefix] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> Prefix | None:
        """The conversation's prefix, taken out (a generation uses it alone; ``put`` returns it)."""
        with self._lock:
            return self._entries.pop(key, None)

    def put(self, key: str, ids: Sequence[int], cache: Any) -> Prefix | None:
        """Keep ``cache`` (of at least ``len(ids)`` tokens) as the prefix ``ids`` of ``key``,
        cut to what the per-conversation bound allows; older conversations make room."""
        have = cache.get_seq_length()
        if not ids or have < len(ids):
            return None
        per_token = cache_bytes(cache) / max(have, 1)
        keep = min(len(ids), int(self.per_key_bytes // max(per_token, 1)))
        if keep < 1:
            return None
        cut(cache, keep)
        entry = Prefix(list(ids[:keep]), cache, cache_bytes(cache))
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = entry
            while self._entries and self.nbytes > self.total_bytes:
                self._entries.popitem(last=False)
        return entry

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries
