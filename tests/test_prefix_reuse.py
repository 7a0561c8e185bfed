"""Reusing a prompt's work across turns: the companion's prompt keeps what stays the same within a
day first, the window of today's talk moves in steps, and the local model keeps each
conversation's KV cache of that prefix (bounded, dropped at the day's end) -- with the same reply."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fakes import Clock

from memory.records import Kind
from siliconfriend.config import Settings
from siliconfriend.core.companion import Companion, day_window


def test_the_window_of_todays_talk_moves_in_steps_and_keeps_its_bounds():
    costs = [50, 70, 40, 300, 60, 80, 90, 20, 400, 30, 10, 10]
    starts = [day_window(costs[: n + 1], turns=5, tokens=600) for n in range(len(costs))]
    for n, start in enumerate(starts):
        shown = costs[start : n + 1]
        assert len(shown) <= 5 and (sum(shown) <= 600 or len(shown) == 1), (n, start)
    assert starts == sorted(starts)  # it only moves forward...
    moves = sum(1 for a, b in zip(starts, starts[1:]) if a != b)
    assert 0 < moves <= len(costs) // 3  # ...and in steps, not at every turn
    assert day_window([5000], turns=5, tokens=600) == 0  # the newest turn is always shown
    assert day_window([10] * 30, turns=20, tokens=10_000) == 16  # at 21 turns to 13, at 29 to 13 again


def test_the_kept_prefixes_are_bounded_per_conversation_and_in_all():
    torch = pytest.importorskip("torch")
    from transformers import DynamicCache

    from siliconfriend.backends.hf.prefix_cache import PrefixCache

    def filled(tokens: int) -> DynamicCache:  # 2 layers, keys and values of 256 floats: 4 KiB a token
        cache = DynamicCache()
        for layer in range(2):
            cache.update(torch.randn(1, 1, tokens, 256), torch.randn(1, 1, tokens, 256), layer)
        return cache

    kept = PrefixCache(total_mb=2, per_key_mb=0.5)  # 512 tokens in all, 128 per conversation
    first = filled(100)
    entry = kept.put("ann", list(range(90)), first)  # only what the next turn can use is kept
    assert entry is not None and entry.ids == list(range(90)) and first.get_seq_length() == 90
    assert entry.nbytes == 90 * 4096
    long = kept.put("bob", list(range(300)), filled(300))
    assert long is not None and len(long.ids) == 128 and long.cache.get_seq_length() == 128
    for name in ("cem", "dan", "eve"):
        kept.put(name, list(range(128)), filled(128))
    assert "ann" not in kept and "bob" in kept and kept.nbytes <= 2 * 2**20  # the least recent went
    assert kept.take("eve") is not None and "eve" not in kept  # taken out while a reply uses it
    kept.drop("dan")
    assert len(kept) == 2 and "bob" in kept and "cem" in kept
    assert kept.put("fay", list(range(50)), filled(20)) is None  # a cache shorter than its tokens


@pytest.fixture
def local(smollm2_backend):
    """The packaged SmolLM2 (greedy) with a prefix cache of its own."""
    from siliconfriend.backends.hf.chat import HFLocalChat

    b = smollm2_backend
    return HFLocalChat(loaded=(b.hf_model, b.tokenizer, b.model), preset="smollm2", temperature=0, max_new_tokens=6)


def test_the_companion_keeps_the_prefix_within_a_day_and_drops_it_at_the_next(bank, local, tmp_path):
    clock = Clock(datetime(2024, 5, 1, 19, 0))
    companion = Companion(bank, local, settings=Settings(home=tmp_path, max_new_tokens=3), clock=clock)
    companion.respond("Maya", "I adopted a grey kitten today.").collect()
    clock.now += timedelta(minutes=3)
    second = companion.respond("Maya", "Her name is Pixel.").collect()
    assert second.error is None and [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    used = dict(local.last_prompt)
    assert used["processed"] < used["total"] // 2, used  # the system message and the first turn were kept
    fresh = "".join(local.stream(second.messages, max_tokens=3))  # no conversation named: all processed
    assert local.last_prompt == {"total": used["total"], "processed": used["total"]}
    assert fresh.strip() == second.reply and second.reply  # greedy decoding: token for token the same
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY, Kind.GLOBAL_EVENTS, Kind.GLOBAL_PERSONALITY):
        day = clock.now.date() if kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY) else None
        bank.set_summary("Maya", kind, "Maya adopted a kitten, Pixel.", clock.now, day=day)  # day 1 is summarised
    clock.now += timedelta(days=1)
    companion.respond("Maya", "Good morning!").collect()  # a new day: a new system message
    assert local.last_prompt["processed"] == local.last_prompt["total"]
    companion.forget_user("Maya")
    assert len(local.prefix_cache) == 0


def test_a_deletion_drops_the_prompts_every_model_kept_of_the_conversation(bank, smollm2_backend, tmp_path):
    """A person who chose another model than the companion's own: deleting a memory drops the
    prompt that model keeps of their conversation too (it held the deleted words), and so does
    deleting the account; a model let go of is not kept alive for it."""
    import gc
    import weakref

    from siliconfriend.backends.hf.chat import HFLocalChat

    b = smollm2_backend

    def model() -> HFLocalChat:
        return HFLocalChat(loaded=(b.hf_model, b.tokenizer, b.model), preset="smollm2", temperature=0, max_new_tokens=3)

    own, chosen = model(), model()
    clock = Clock(datetime(2024, 5, 1, 19, 0))
    companion = Companion(bank, own, settings=Settings(home=tmp_path, max_new_tokens=3), clock=clock)
    said = companion.respond("Maya", "My locker code is Zorblax 4471.", backend=chosen).collect()
    companion.respond("Ann", "Hello there.", backend=chosen).collect()
    assert said.error is None and len(chosen.prefix_cache) == 2 and len(own.prefix_cache) == 0
    companion.forget("Maya", [said.turn.stored_id])
    assert len(chosen.prefix_cache) == 1  # Maya's went, Ann's is Ann's

    companion.respond("Ann", "Still there?", backend=chosen).collect()
    companion.forget_user("Ann")
    assert len(chosen.prefix_cache) == 0
    gone = weakref.ref(chosen)
    del chosen
    gc.collect()
    assert gone() is None
