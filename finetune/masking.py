"""Dialogues -> token ids and labels, rendered with the tokenizer's own chat template.

The text is made by ``tokenizer.apply_chat_template`` exactly as the app's hf backend renders a
prompt at inference, and only the assistant's (counsellor's) tokens are learned: each assistant
turn's content plus the template's end-of-turn marker get their token id as label, every other
token (system prompt, user turns, role headers, padding) gets -100. Every assistant turn of a
multi-turn dialogue is trained. Dialogues longer than ``max_length`` are split at turn boundaries
into windows of whole (user, assistant) pairs, each window starting with the system prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from finetune.datasets import Dialogue

IGNORE_INDEX = -100
SystemPrompt = str | Callable[[Dialogue], str] | None


class TemplateError(ValueError):
    """The tokenizer cannot render chats (no chat template, or one that rejects the dialogue)."""


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    source: str

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class BuildStats:
    dialogues: int = 0
    examples: int = 0
    windows_split: int = 0  # dialogues split into several windows
    truncated: int = 0  # windows cut at max_length
    dropped: int = 0  # windows left with no assistant token after truncation
    tokens: int = 0
    label_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.examples} examples from {self.dialogues} dialogues "
            f"({self.windows_split} split into windows, {self.truncated} truncated, "
            f"{self.dropped} dropped); {self.tokens} tokens, {self.label_tokens} trained"
        )


class ChatRenderer:
    """Renders and masks dialogues for one tokenizer."""

    def __init__(self, tokenizer: Any, *, max_length: int = 1024, system_prompt: SystemPrompt = None):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError(
                "the tokenizer has no chat template, so the training text would not match what the "
                "app sends at inference; use an instruct/chat base model or set "
                "tokenizer.chat_template"
            )
        if max_length < 16:
            raise ValueError(f"max_length {max_length} is too short")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.system_prompt = system_prompt
        self.system_supported = self._supports_system()

    # ------------------------------------------------------------------ rendering
    def _supports_system(self) -> bool:
        probe = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ]
        try:
            return "s" in self._apply(probe)
        except Exception:
            return False

    def _apply(self, messages: Sequence[dict], generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=generation_prompt
        )

    def render(self, messages: Sequence[dict], generation_prompt: bool = False) -> str:
        """The chat text of ``messages`` (system merged into the first user turn if the template
        has no system role)."""
        msgs = [dict(m) for m in messages]
        if msgs and msgs[0]["role"] == "system" and not self.system_supported:
            system = msgs.pop(0)["content"]
            if msgs:
                msgs[0]["content"] = f"{system}\n\n{msgs[0]['content']}"
        try:
            return self._apply(msgs, generation_prompt)
        except Exception as exc:  # jinja raises its own errors for unsupported role orders
            raise TemplateError(f"the chat template rejected the dialogue: {exc}") from exc

    def with_system(self, dialogue: Dialogue) -> list[dict]:
        msgs = [dict(m) for m in dialogue.messages]
        if msgs and msgs[0]["role"] == "system":
            return msgs
        prompt = self.system_prompt(dialogue) if callable(self.system_prompt) else self.system_prompt
        return ([{"role": "system", "content": prompt}] if prompt else []) + msgs

    # ------------------------------------------------------------------ masking
    def assistant_spans(self, messages: Sequence[dict]) -> tuple[str, list[tuple[int, int]]]:
        """(text, [(start, end) character spans of each assistant turn incl. its end marker])."""
        text = self.render(messages)
        spans: list[tuple[int, int]] = []
        cursor = 0
        for i, msg in enumerate(messages):
            if msg["role"] != "assistant":
                continue
            before = self.render(messages[:i], generation_prompt=True)
            upto = self.render(messages[: i + 1])
            if text.startswith(upto) and upto.startswith(before) and len(before) >= cursor:
                spans.append((len(before), len(upto)))
                cursor = len(upto)
                continue
            # template not prefix-stable (e.g. it rewrites earlier turns): find the content
            start = text.find(msg["content"], cursor)
            if start < 0:
                raise TemplateError(f"assistant turn {i} not found in the rendered chat")
            end = start + len(msg["content"])
            eos = getattr(self.tokenizer, "eos_token", None)
            if eos and text.startswith(eos, end):
                end += len(eos)
            spans.append((start, end))
            cursor = end
        return text, spans

    def encode(self, messages: Sequence[dict]) -> tuple[list[int], list[int]]:
        """(input_ids, labels) of the whole chat, labels -100 outside the assistant spans."""
        text, spans = self.assistant_spans(messages)
        tok = self.tokenizer
        if getattr(tok, "is_fast", False):
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            labels = [IGNORE_INDEX] * len(ids)
            k = 0
            for j, (start, _end) in enumerate(enc["offset_mapping"]):
                while k < len(spans) and start >= spans[k][1]:
                    k += 1
                if k < len(spans) and spans[k][0] <= start < spans[k][1]:
                    labels[j] = ids[j]
            return ids, labels
        # slow tokenizers have no offsets: tokenize the pieces between span edges separately
        ids, labels, pos = [], [], 0
        for start, end in spans:
            for piece, learn in ((text[pos:start], False), (text[start:end], True)):
                if piece:
                    piece_ids = tok(piece, add_special_tokens=False)["input_ids"]
                    ids += piece_ids
                    labels += piece_ids if learn else [IGNORE_INDEX] * len(piece_ids)
            pos = end
        if text[pos:]:
            rest = tok(text[pos:], add_special_tokens=False)["input_ids"]
            ids += rest
            labels += [IGNORE_INDEX] * len(rest)
        return ids, labels

    # ------------------------------------------------------------------ windows
    def examples(self, dialogue: Dialogue, stats: BuildStats | None = None) -> list[Example]:
        """One example per window of the dialogue that fits ``max_length``."""
        stats = stats if stats is not None else BuildStats()
        stats.dialogues += 1
        msgs = self.with_system(dialogue)
        head = msgs[:1] if msgs[0]["role"] == "system" else []
        turns = msgs[len(head) :]
        ids, labels = self.encode(msgs)
        windows = [(ids, labels)]
        if len(ids) > self.max_length:
            windows = self._split(head, turns)
            stats.windows_split += len(windows) > 1
        out = []
        for w_ids, w_labels in windows:
            if len(w_ids) > self.max_length:
                stats.truncated += 1
                w_ids, w_labels = w_ids[: self.max_length], w_labels[: self.max_length]
            n_learn = sum(lab != IGNORE_INDEX for lab in w_labels)
            if n_learn == 0:
                stats.dropped += 1
                continue
            out.append(Example(w_ids, w_labels, dialogue.source))
            stats.examples += 1
            stats.tokens += len(w_ids)
            stats.label_tokens += n_learn
        return out

    def _split(self, head: list[dict], turns: list[dict]) -> list[tuple[list[int], list[int]]]:
        """Greedy windows of whole (user, assistant) pairs, each encoded exactly."""
        pairs = [turns[i : i + 2] for i in range(0, len(turns), 2)]
        windows: list[tuple[list[int], list[int]]] = []
        current: list[dict] = []
        encoded: tuple[list[int], list[int]] | None = None
        for pair in pairs:
            trial = self.encode(head + current + pair)
            if current and encoded is not None and len(trial[0]) > self.max_length:  # encoded: current's
                windows.append(encoded)
                current, encoded = list(pair), self.encode(head + pair)
            else:
                current, encoded = current + pair, trial
        if encoded is not None:
            windows.append(encoded)
        return windows


def build_examples(
    dialogues: Sequence[Dialogue], renderer: ChatRenderer, on_bad: Callable[[str], None] | None = None
) -> tuple[list[Example], BuildStats]:
    """Examples of all dialogues; a dialogue the template rejects is reported and skipped."""
    stats = BuildStats()
    examples: list[Example] = []
    for d in dialogues:
        try:
            examples += renderer.examples(d, stats)
        except TemplateError as exc:
            stats.notes.append(f"{d.source}: {exc}")
            if on_bad is not None:
                on_bad(f"{d.source}: {exc}")
    return examples, stats


def collate(batch: Sequence[Example], pad_token_id: int) -> dict:
    """Right-padded tensors: input_ids, attention_mask, labels (-100 on padding)."""
    import torch

    width = max(len(ex) for ex in batch)
    ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, ex in enumerate(batch):
        n = len(ex)
        ids[i, :n] = torch.tensor(ex.input_ids)
        labels[i, :n] = torch.tensor(ex.labels)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
