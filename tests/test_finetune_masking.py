"""Loss masks: only the assistant's tokens are learned, in the chat format used at inference."""

from pathlib import Path

import pytest

from finetune.datasets import Dialogue, load_dialogues
from finetune.masking import IGNORE_INDEX, ChatRenderer, TemplateError, build_examples, collate
from finetune.persona import COUNSELLOR_SYSTEM_PROMPT_EN

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "psych_sample.jsonl"
DIALOGUE = Dialogue(
    [
        {"role": "user", "content": "I can't sleep lately."},
        {"role": "assistant", "content": "That sounds exhausting. What keeps you up?"},
        {"role": "user", "content": "Work, mostly."},
        {"role": "assistant", "content": "Work stress often follows us to bed."},
    ],
    "test:1",
)


@pytest.fixture(scope="module")
def tokenizer():
    from finetune.lora import load_tokenizer, resolve_base

    return load_tokenizer(resolve_base(None))


def learned(tok, ids, labels) -> str:
    return tok.decode([i for i, lab in zip(ids, labels) if lab != IGNORE_INDEX])


def label_runs(labels):
    """Contiguous runs of learned positions, as (start, end)."""
    runs, start = [], None
    for i, lab in enumerate(labels + [IGNORE_INDEX]):
        if lab != IGNORE_INDEX and start is None:
            start = i
        elif lab == IGNORE_INDEX and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_text_is_the_chat_template_and_only_assistant_tokens_learn(tokenizer):
    r = ChatRenderer(tokenizer, max_length=512, system_prompt=COUNSELLOR_SYSTEM_PROMPT_EN)
    msgs = r.with_system(DIALOGUE)
    ids, labels = r.encode(msgs)
    # exactly what the app's hf backend renders with apply_chat_template
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(msgs, tokenize=False)
    assert len(ids) == len(labels)
    runs = label_runs(labels)
    assert len(runs) == 2  # both counsellor turns are trained
    for (start, end), reply in zip(runs, [DIALOGUE.messages[1], DIALOGUE.messages[3]]):
        assert tokenizer.decode(ids[start:end]) == reply["content"] + "<|im_end|>\n"
        assert labels[start:end] == ids[start:end]
    text = learned(tokenizer, ids, labels)
    assert "sleep" not in text and "Work, mostly" not in text
    assert COUNSELLOR_SYSTEM_PROMPT_EN not in text and "assistant" not in text


def test_system_prompt_not_duplicated_and_optional(tokenizer):
    with_sys = Dialogue([{"role": "system", "content": "Own prompt"}] + DIALOGUE.messages, "x")
    r = ChatRenderer(tokenizer, max_length=512, system_prompt=COUNSELLOR_SYSTEM_PROMPT_EN)
    assert r.with_system(with_sys)[0]["content"] == "Own prompt"
    assert sum(m["role"] == "system" for m in r.with_system(with_sys)) == 1
    none = ChatRenderer(tokenizer, max_length=512, system_prompt=None)
    assert none.with_system(DIALOGUE)[0]["role"] == "user"
    per_dialogue = ChatRenderer(tokenizer, max_length=512, system_prompt=lambda d: d.source)
    assert per_dialogue.with_system(DIALOGUE)[0]["content"] == "test:1"


def test_long_dialogues_split_into_windows_that_each_start_with_the_system(tokenizer):
    dialogues, _ = load_dialogues([SAMPLE])
    long = max(dialogues[:10], key=lambda d: len(d.text))
    probe = ChatRenderer(tokenizer, max_length=4096, system_prompt="Be kind.")
    msgs = probe.with_system(long)
    pair_lengths = [len(probe.encode(msgs[:1] + msgs[i : i + 2])[0]) for i in range(1, len(msgs), 2)]
    limit = max(pair_lengths) + 8  # every (client, counsellor) pair fits, the dialogue does not
    assert len(probe.encode(msgs)[0]) > limit
    r = ChatRenderer(tokenizer, max_length=limit, system_prompt="Be kind.")
    examples = r.examples(long)
    assert len(examples) >= 2
    for ex in examples:
        assert len(ex) <= limit
        assert tokenizer.decode(ex.input_ids).startswith("<|im_start|>system\nBe kind.<|im_end|>")
    # every counsellor turn is trained exactly once, whole
    replies = [m["content"] + "<|im_end|>\n" for m in msgs if m["role"] == "assistant"]
    windows = [tokenizer.decode(ex.input_ids[s:e]) for ex in examples for s, e in label_runs(ex.labels)]
    assert windows == replies


def test_truncation_and_dropping_are_counted(tokenizer):
    huge = Dialogue([{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "reply"}], "huge:1")
    ok = DIALOGUE
    r = ChatRenderer(tokenizer, max_length=64, system_prompt=None)
    examples, stats = build_examples([huge, ok], r)
    assert stats.dropped == 1 and stats.truncated >= 1
    assert all(len(ex) <= 64 for ex in examples)
    assert "dropped" in stats.summary()


def test_collate_pads_right_with_ignored_labels(tokenizer):
    r = ChatRenderer(tokenizer, max_length=512, system_prompt=None)
    a = r.examples(DIALOGUE)[0]
    b = r.examples(Dialogue(DIALOGUE.messages[:2], "short"))[0]
    batch = collate([a, b], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, len(a))
    assert batch["attention_mask"][1].sum() == len(b)
    assert (batch["labels"][1, len(b) :] == IGNORE_INDEX).all()
    assert (batch["input_ids"][1, len(b) :] == tokenizer.pad_token_id).all()


class SlowProxy:
    """The same tokenizer seen as a slow one (no offsets): the piecewise path."""

    is_fast = False

    def __init__(self, tok):
        self._tok = tok
        self.chat_template = tok.chat_template
        self.eos_token = tok.eos_token

    def apply_chat_template(self, *a, **k):
        return self._tok.apply_chat_template(*a, **k)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": self._tok(text, add_special_tokens=add_special_tokens)["input_ids"]}


def test_slow_tokenizer_path_masks_the_same_text(tokenizer):
    fast = ChatRenderer(tokenizer, max_length=512, system_prompt="S")
    slow = ChatRenderer(SlowProxy(tokenizer), max_length=512, system_prompt="S")
    msgs = fast.with_system(DIALOGUE)
    f_ids, f_labels = fast.encode(msgs)
    s_ids, s_labels = slow.encode(msgs)
    assert learned(tokenizer, f_ids, f_labels) == learned(tokenizer, s_ids, s_labels)


def test_template_without_system_role_merges_it(tokenizer):
    class NoSystem(SlowProxy):
        def apply_chat_template(self, messages, **k):
            if any(m["role"] == "system" for m in messages):
                raise ValueError("System role not supported")
            return self._tok.apply_chat_template(messages, **k)

    r = ChatRenderer(NoSystem(tokenizer), max_length=512, system_prompt="Persona")
    assert not r.system_supported
    text = r.render(r.with_system(DIALOGUE))
    assert "Persona\n\nI can't sleep lately." in text


def test_no_chat_template_is_refused(tokenizer):
    class Bare(SlowProxy):
        chat_template = None

        def __init__(self, tok):
            self._tok = tok

    with pytest.raises(TemplateError, match="no chat template"):
        ChatRenderer(Bare(tokenizer))
