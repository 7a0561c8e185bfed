"""Chat with a local causal LM run with transformers (loaded by ``loader.py``: Hugging Face id,
local folder, .gguf file or preset). Each call to ``stream`` gets its own TextIteratorStreamer
and generation thread; by default one generation runs at a time per model.

``stream(..., cache_key=...)`` names the conversation: the KV cache of its prompt's stable prefix
(everything before the last message) is kept until its next turn, so that only the new part is
processed (``prefix_cache.py``). ``stream(..., sampling=Sampling(...))`` sets the generation
for one call (a summary's, greedy); its penalties may count the generated tokens only
(``_OwnWordsPenalty``), where transformers' own count the prompt's too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..base import BackendError, BackendModelNotFound, Message, Sampling
from ..registry import require
from .adapter_meta import check_adapter_base, trained_system_prompts
from .loader import has_accelerate, load_model, load_tokenizer, model_spec, pick_device, pick_dtype, preset_settings
from .prefix_cache import DEFAULT_PER_KEY_MB, DEFAULT_TOTAL_MB, PrefixCache, common_prefix, full_attention_only

log = logging.getLogger("siliconfriend.backends.hf")

DEFAULT_CONTEXT_CAP = 8192


def load_causal_lm(
    model_id_or_preset: str | os.PathLike,
    *,
    device: str | None = None,
    dtype: Any = None,
    adapter: str | os.PathLike | None = None,
    preset: str | None = None,
    trust_remote_code: bool | None = None,
) -> tuple[Any, Any, str]:
    """Load a causal LM and its tokenizer for chat: ``(model, tokenizer, resolved_id)``.

    ``model_id_or_preset``: a preset name, a Hugging Face id, a local folder or a .gguf file.
    ``preset`` applies a preset's settings (chat template fallback, ...) to another id/path.
    ``adapter``: a LoRA adapter folder, checked against the base (``adapter_meta``) and
    loaded with peft. The model is returned in eval mode on the chosen device.
    """
    spec = model_spec(model_id_or_preset, preset)
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    tokenizer = load_tokenizer(spec, trust_remote_code=trust_remote_code)
    # spread big models over the GPUs (and CPU if they do not fit)
    device_map = "auto" if device == "cuda" and has_accelerate() else None
    model = load_model(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code, device_map=device_map)
    if adapter is not None:
        model = _attach_adapter(model, adapter)
    model.eval()
    return model, tokenizer, spec.display


def _trained_system_prompts(adapter: str | os.PathLike) -> dict[str, str]:
    try:
        return trained_system_prompts(Path(adapter).expanduser())
    except (OSError, ValueError) as exc:
        log.warning("the adapter's training metadata could not be read: %s", exc)
        return {}


def _attach_adapter(model: Any, adapter: str | os.PathLike) -> Any:
    folder = Path(adapter).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise BackendModelNotFound(
            f"no LoRA adapter at {folder} (adapter_config.json is missing); train one "
            f"with `python -m finetune.train_lora` or fix the --adapter path"
        )
    check_adapter_base(folder, model)  # AdapterMismatch(ValueError) with the reason
    peft = require("peft")
    return peft.PeftModel.from_pretrained(model, str(folder))


def context_length(model: Any, cap: int | None = DEFAULT_CONTEXT_CAP) -> int:
    """The model's position limit (max_position_embeddings, seq_length, ...) capped at ``cap``."""
    config = model.config
    text_config = getattr(config, "get_text_config", lambda: config)() or config
    for attr in ("max_position_embeddings", "seq_length", "n_positions", "max_sequence_length"):
        value = getattr(text_config, attr, None)
        if isinstance(value, int) and value > 0:
            return min(value, cap) if cap else value
    return cap or 2048


class HFLocalChat:
    """Chat with a local transformers causal LM, streaming tokens.

    ``model``: preset name, Hugging Face id, folder or .gguf file. ``preset``: apply a preset's
    settings to another ``model``. ``temperature=0`` means greedy decoding. ``serialize``: run one
    generation at a time on this model (safe default; concurrent callers wait their turn).
    ``loaded``: an already loaded ``(model, tokenizer, resolved_id)`` to share between backends.
    ``prefix_cache_mb`` / ``prefix_cache_mb_per_key``: how much memory the conversations' kept
    prompt prefixes may take in all and each (0 turns the reuse off).
    """

    name = "hf"
    keeps_prefix = True  # stream() takes cache_key: the conversation whose prefix it keeps
    takes_sampling = True  # stream() takes sampling: one call's generation settings

    def __init__(
        self,
        model: str | os.PathLike = "smollm2",
        *,
        adapter: str | os.PathLike | None = None,
        preset: str | None = None,
        device: str | None = None,
        dtype: Any = None,
        max_new_tokens: int = 256,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        repetition_penalty: float | None = None,
        context_tokens: int | None = None,
        serialize: bool = True,
        trust_remote_code: bool | None = None,
        loaded: tuple[Any, Any, str] | None = None,
        prefix_cache_mb: float = DEFAULT_TOTAL_MB,
        prefix_cache_mb_per_key: float = DEFAULT_PER_KEY_MB,
    ) -> None:
        spec = preset_settings(preset or str(model))
        if loaded is None:
            try:
                loaded = load_causal_lm(
                    model,
                    device=device,
                    dtype=dtype,
                    adapter=adapter,
                    preset=preset,
                    trust_remote_code=trust_remote_code,
                )
            except ValueError as exc:  # AdapterMismatch and other refusals worded for the user
                raise BackendError(str(exc)) from exc
        self._model, self.tokenizer, self.model = loaded
        self.preset = spec.get("name")
        gen = dict(spec.get("generation") or {})
        for key, value in (
            ("temperature", temperature),
            ("top_p", top_p),
            ("top_k", top_k),
            ("repetition_penalty", repetition_penalty),
        ):
            if value is not None:
                gen[key] = value
        self.generation = gen
        self.stop = list(spec.get("stop") or [])
        self.max_new_tokens = max_new_tokens
        self.context_tokens = context_tokens or context_length(self._model)
        self._lock = threading.Lock() if serialize else None
        self._eos = self._eos_ids()
        # what the adapter was trained to follow, per language: the companion opens its
        # meta-prompt with it, so the fine-tuned model sees the start it learned
        self.system_prompts = _trained_system_prompts(adapter) if adapter is not None else {}
        # models of remote code may not take transformers' cache objects: no reuse for them
        self.prefix_cache = (
            PrefixCache(prefix_cache_mb, prefix_cache_mb_per_key)
            if prefix_cache_mb > 0 and _native(self._model)
            else None
        )
        self.last_prompt = {"total": 0, "processed": 0}  # tokens of the last prompt: all, and not reused

    def __repr__(self) -> str:
        return f"HFLocalChat(model={self.model!r}, preset={self.preset!r})"

    @property
    def hf_model(self) -> Any:
        return self._model

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def render(self, messages: Sequence[Message], *, generation_prompt: bool = True) -> str:
        """The prompt text the chat template makes of ``messages``."""
        dicts = [m.as_dict() for m in messages]
        try:
            return self.tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as exc:  # templates that refuse a system role: fold it into the first turn
            if not dicts or dicts[0]["role"] != "system" or "system" not in str(exc).lower():
                raise BackendError(f"the chat template of {self.model!r} failed: {exc}") from exc
            system = dicts.pop(0)["content"]
            if dicts and dicts[0]["role"] == "user":
                dicts[0] = {"role": "user", "content": f"{system}\n\n{dicts[0]['content']}"}
            else:
                dicts.insert(0, {"role": "user", "content": system})
            return self.tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=generation_prompt)

    def drop_prefix(self, cache_key: str) -> None:
        """Forget the kept prompt prefix of a conversation (its day is over, its user is gone)."""
        if self.prefix_cache is not None:
            self.prefix_cache.drop(cache_key)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        cache_key: str | None = None,
        sampling: Sampling | None = None,
    ) -> Iterator[str]:
        torch = require("torch")
        transformers = require("transformers")
        ids = self._ids(self.render(messages))
        prompt_len = len(ids)
        room = self.context_tokens - prompt_len
        if room < 1:
            raise BackendError(
                f"the prompt takes {prompt_len} tokens, more than the {self.context_tokens} "
                f"{self.model!r} can take; shorten the history or lower the memory budget"
            )
        limit = min(max_tokens or self.max_new_tokens, self.generation.get("max_new_tokens") or room, room)
        streamer = transformers.TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cancel = threading.Event()
        input_ids = torch.tensor([ids], dtype=torch.long, device=self._model.device)
        kwargs = dict(
            self._sampling(sampling, prompt_len),
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            streamer=streamer,
            max_new_tokens=limit,
            eos_token_id=self._eos,
            pad_token_id=self.tokenizer.pad_token_id,
            stopping_criteria=transformers.StoppingCriteriaList([_Cancelled(cancel)]),
        )
        if self.stop:
            kwargs.update(stop_strings=self.stop, tokenizer=self.tokenizer)
        # the part of this prompt the next turn's starts with: everything before the last message
        keep = (
            common_prefix(ids, self._ids(self.render(messages[:-1], generation_prompt=False)))
            if cache_key is not None and self.prefix_cache is not None and len(messages) > 1
            else 0
        )
        reuse = _Reuse(cache_key, ids, keep) if cache_key is not None and self.prefix_cache is not None else None
        failure: list[BaseException] = []
        running = threading.Event()  # set once the worker holds the model
        worker = threading.Thread(
            target=self._generate,
            args=(torch, transformers, kwargs, streamer, cancel, failure, running, reuse),
            name="hf-generate",
            daemon=True,
        )
        worker.start()
        try:
            yield from _until_stop(streamer, self.stop)
        finally:
            cancel.set()  # a consumer that stops early (or a stop string) ends generate at the next token
            if running.is_set():
                # also when the consumer closed the stream: the model is left at its next token, and
                # never mid-token when the process exits (a worker still queued returns on its own)
                worker.join()
        if failure:
            raise _translate(failure[0], self.model) from failure[0]

    def _with_prefix(self, transformers: Any, kwargs: dict, reuse: "_Reuse") -> Any:
        """Put the conversation's kept cache, cut to what this prompt shares with it, into
        ``kwargs``; the cache (a fresh one if nothing is shared) or None where it cannot be used."""
        assert self.prefix_cache is not None
        kept = self.prefix_cache.take(reuse.key)
        cache = None
        if kept is not None:
            # at least the last token is processed: generate needs one to predict from
            shared = min(common_prefix(kept.ids, reuse.ids), len(reuse.ids) - 1)
            if shared > 0:
                cache = kept.cache
                have = cache.get_seq_length()
                if shared < have:
                    cache.crop(shared - have)
                reuse.reused = shared
        if cache is None:
            cache = transformers.DynamicCache(config=self._model.config)
            if not full_attention_only(cache):  # sliding windows cannot be cut back to a prefix
                return None
        kwargs["cache"] = cache
        return cache

    def _generate(
        self,
        torch: Any,
        transformers: Any,
        kwargs: dict,
        streamer: Any,
        cancel: threading.Event,
        failure: list[BaseException],
        running: threading.Event,
        reuse: "_Reuse | None",
    ) -> None:
        try:
            with self._lock or contextlib.nullcontext():
                running.set()
                if cancel.is_set():  # the consumer left while this call waited for the model
                    streamer.end()
                    return
                cache = self._with_prefix(transformers, kwargs, reuse) if reuse is not None else None
                total = len(kwargs["input_ids"][0])
                self.last_prompt = {"total": total, "processed": total - (reuse.reused if reuse else 0)}
                log.debug(
                    "prompt of %d tokens, %d reused from the last turn", total, total - self.last_prompt["processed"]
                )
                with torch.inference_mode():
                    self._model.generate(**kwargs)
                if cache is not None and reuse is not None and reuse.keep > 0 and self.prefix_cache is not None:
                    self.prefix_cache.put(reuse.key, reuse.ids[: reuse.keep], cache)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread
            failure.append(exc)
            streamer.end()

    def _sampling(self, sampling: Sampling | None = None, prompt_len: int = 0) -> dict[str, Any]:
        gen = dict(self.generation)
        if sampling is not None:
            for key in ("temperature", "top_p", "repetition_penalty", "no_repeat_ngram_size"):
                if getattr(sampling, key) is not None:
                    gen[key] = getattr(sampling, key)
        if not gen.get("temperature"):
            out = {"do_sample": False}
        else:
            out = {"do_sample": True, "temperature": gen["temperature"]}
            for key in ("top_p", "top_k"):
                if gen.get(key) is not None:
                    out[key] = gen[key]
        if gen.get("repetition_penalty"):
            out["repetition_penalty"] = gen["repetition_penalty"]
        if gen.get("no_repeat_ngram_size"):
            out["no_repeat_ngram_size"] = gen["no_repeat_ngram_size"]
        if sampling is not None and not sampling.penalise_prompt:
            own = _OwnWordsPenalty(
                prompt_len, out.pop("repetition_penalty", None), out.pop("no_repeat_ngram_size", None)
            )
            if own.active:
                require("transformers")
                from transformers import LogitsProcessorList

                out["logits_processor"] = LogitsProcessorList([own])
        return out

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        configured = getattr(getattr(self._model, "generation_config", None), "eos_token_id", None)
        for value in (configured, self.tokenizer.eos_token_id):
            for i in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(i, int) and i not in ids:
                    ids.append(i)
        return ids


@dataclass
class _Reuse:
    key: str  # the conversation
    ids: list[int]  # this prompt's tokens
    keep: int  # how many of them to keep for the next turn (those before the last message)
    reused: int = 0  # how many came from the kept cache


def _native(model: Any) -> bool:
    base = getattr(model, "get_base_model", lambda: model)()  # a peft model: the model it wraps
    return type(base).__module__.startswith("transformers.")


class _OwnWordsPenalty:
    """A repetition penalty and a ban on repeated n-grams that count only the tokens generated
    after ``start`` (transformers' own count the prompt's too: a summary would be kept from
    copying the names and words it is summarising)."""

    def __init__(self, start: int, penalty: float | None, ngram: int | None) -> None:
        self.start = start
        self.penalty = penalty if penalty and penalty != 1.0 else None
        self.ngram = ngram or 0

    @property
    def active(self) -> bool:
        return bool(self.penalty or self.ngram)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row in range(input_ids.shape[0]):
            own = input_ids[row, self.start :].tolist()
            if not own:
                continue
            if self.penalty:
                seen = torch.tensor(sorted(set(own)), device=scores.device)
                s = scores[row, seen]
                scores[row, seen] = torch.where(s < 0, s * self.penalty, s / self.penalty)
            n = self.ngram
            if n and len(own) >= n:
                tail = own[len(own) - n + 1 :]
                banned = [own[i + n - 1] for i in range(len(own) - n + 1) if own[i : i + n - 1] == tail]
                if banned:
                    scores[row, banned] = float("-inf")
        return scores


class _Cancelled:
    """Stopping criterion: stop generating once the consumer went away."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def _until_stop(chunks: Iterator[str], stops: Sequence[str]) -> Iterator[str]:
    """Pass chunks through, ending before the first stop string; hold back a possible stop prefix."""
    if not stops:
        yield from (c for c in chunks if c)
        return
    buffer = ""
    for chunk in chunks:
        buffer += chunk
        cut = min((i for i in (buffer.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            if buffer[:cut].rstrip():
                yield buffer[:cut].rstrip()
            return
        keep = max((k for s in stops for k in range(1, len(s)) if buffer.endswith(s[:k])), default=0)
        if len(buffer) > keep:
            yield buffer[: len(buffer) - keep]
            buffer = buffer[len(buffer) - keep :]
    if buffer:
        yield buffer


def _translate(exc: BaseException, model: str) -> BackendError:
    if isinstance(exc, BackendError):
        return exc
    if type(exc).__name__ == "OutOfMemoryError":
        return BackendError(
            f"{model!r} ran out of GPU memory: lower max_new_tokens or the context, or use a smaller model"
        )
    return BackendError(f"local generation with {model!r} failed: {type(exc).__name__}: {exc}")
