"""What a trained adapter folder says about itself, and whether it fits a loaded base model.

The declared interface between the app and ``finetune/``: the trainer writes this format
(``write_adapter_meta``), the chat backend reads it; the app never imports ``finetune``.

A folder written by ``python -m finetune.train_lora`` holds the PEFT adapter
(``adapter_config.json`` + ``adapter_model.safetensors``) and ``siliconfriend_adapter.json``:

    {"format": 1,
     "base": {"model_type", "architectures", "hidden_size", "num_hidden_layers", "vocab_size",
              "name_or_path"},              # identity of the base it was trained on
     "training": {...},                     # the full training configuration
     "metrics": {...},                      # losses, steps, time
     "system_prompt": "..."}                # the counsellor persona used in the training data

The base is identified by its shape, never by file paths (those differ between machines).
This module only reads JSON (and, for foreign adapters, safetensors headers): no torch import.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

from memory.cjk import language_of

META_FILE = "siliconfriend_adapter.json"
PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
META_FORMAT = 1

# Fields compared between the adapter's base and the loaded model, with the config attribute
# names used by different architectures (the remote-code ChatGLM uses its own names).
IDENTITY_FIELDS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "num_layers", "n_layer"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}


class AdapterMismatch(ValueError):
    """The adapter was trained for a different base model than the one loaded."""


def _config_of(model: Any) -> Any:
    """The transformers config of ``model`` (a PreTrainedModel, a PeftModel, or a config itself)."""
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "to_dict") and hasattr(model, "model_type"):
        config = model
    if config is None:
        raise TypeError(f"cannot find a transformers config on {type(model).__name__}")
    return getattr(config, "get_text_config", lambda: config)() or config


def _first_attr(config: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def base_identity(model: Any) -> dict:
    """The identity of a loaded base model (or its config): what an adapter must match."""
    config = _config_of(model)
    ident = {
        "model_type": getattr(config, "model_type", None),
        "architectures": list(getattr(config, "architectures", None) or []),
    }
    for field, names in IDENTITY_FIELDS.items():
        value = _first_attr(config, names)
        ident[field] = int(value) if value is not None else None
    ident["name_or_path"] = str(getattr(config, "_name_or_path", "") or "")
    return ident


def read_adapter_meta(path: str | Path) -> dict:
    """The metadata of the adapter folder ``path``: ``{"base", "training", "metrics", ...}``.

    Adapters not made by ``finetune.train_lora`` (only ``adapter_config.json``) give a minimal
    dict with ``"base": {"name_or_path": ...}`` and empty training/metrics. Raises
    FileNotFoundError when ``path`` is no adapter folder.
    """
    folder = Path(path).expanduser()
    meta_path = folder / META_FILE
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{meta_path} is not valid JSON: {exc}") from exc
        meta.setdefault("base", {})
        meta.setdefault("training", {})
        meta.setdefault("metrics", {})
        return meta
    peft_path = folder / PEFT_CONFIG_FILE
    if peft_path.is_file():
        peft_cfg = json.loads(peft_path.read_text(encoding="utf-8"))
        return {
            "format": 0,
            "base": {"name_or_path": peft_cfg.get("base_model_name_or_path") or ""},
            "training": {"peft": peft_cfg},
            "metrics": {},
        }
    if not folder.exists():
        raise FileNotFoundError(f"adapter folder {folder} does not exist")
    raise FileNotFoundError(
        f"{folder} is not a LoRA adapter folder: it has neither {META_FILE} nor {PEFT_CONFIG_FILE}"
        " (train one with `python -m finetune.train_lora --out FOLDER`)"
    )


def trained_system_prompts(path: str | Path) -> dict[str, str]:
    """The system prompt an adapter was trained with, per language (``{"en": ..., "zh": ...}``):
    the most used of each language in its training data, else its one ``system_prompt``. Empty
    for an adapter without that metadata (trained elsewhere, or with ``--system-prompt none``)."""
    meta = read_adapter_meta(path)
    used = meta["training"].get("system_prompts_used") or {}
    if not used and meta.get("system_prompt"):
        used = {meta["system_prompt"]: 1}
    best: dict[str, tuple[int, str]] = {}
    for prompt, count in used.items():
        if not isinstance(prompt, str) or not prompt.strip():
            continue
        lang = language_of(prompt)
        if lang not in best or int(count) > best[lang][0]:
            best[lang] = (int(count), prompt.strip())
    return {lang: prompt for lang, (_, prompt) in best.items()}


def write_adapter_meta(
    path: str | Path, *, base: dict, training: dict, metrics: dict, system_prompt: str | None = None
) -> Path:
    """Write ``siliconfriend_adapter.json`` into the adapter folder ``path``; returns its path."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": META_FORMAT, "base": base, "training": training, "metrics": metrics}
    if system_prompt is not None:
        meta["system_prompt"] = system_prompt
    out = folder / META_FILE
    out.write_text(json.dumps(meta, ensure_ascii=False, indent=2, default=str) + "\n", encoding="utf-8")
    return out


def _describe(ident: dict) -> str:
    arch = ", ".join(ident.get("architectures") or []) or ident.get("model_type") or "?"
    name = ident.get("name_or_path")
    shape = (
        f"hidden {ident.get('hidden_size')}, {ident.get('num_hidden_layers')} layers, vocab {ident.get('vocab_size')}"
    )
    return f"{arch} ({shape})" + (f" from {name}" if name else "")


def check_adapter_base(path: str | Path, model: Any) -> None:
    """Raise AdapterMismatch when the adapter at ``path`` was trained for another base than ``model``.

    Compares model type and shape (hidden size, layer count, vocabulary size), not paths.
    For adapters without SiliconFriend metadata, the LoRA weight shapes are checked against
    the model's hidden size and layer count instead.
    """
    meta = read_adapter_meta(path)
    have = base_identity(model)
    want = meta.get("base") or {}
    if not any(want.get(f) is not None for f in IDENTITY_FIELDS):
        _check_weight_shapes(Path(path), have)
        return
    problems = []
    if want.get("model_type") and have["model_type"] and want["model_type"] != have["model_type"]:
        problems.append(f"model type {want['model_type']!r} vs {have['model_type']!r}")
    for field in IDENTITY_FIELDS:
        a, b = want.get(field), have.get(field)
        if a is not None and b is not None and int(a) != int(b):
            problems.append(f"{field.replace('_', ' ')} {a} vs {b}")
    if problems:
        raise AdapterMismatch(
            f"the LoRA adapter at {path} was trained for {_describe(want)}, but the loaded model is "
            f"{_describe(have)} ({'; '.join(problems)}). Load the base it was trained on, "
            f"or train an adapter for this model with `python -m finetune.train_lora --base ...`."
        )


def _safetensors_shapes(file: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors header (no torch needed)."""
    with open(file, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def _check_weight_shapes(folder: Path, have: dict) -> None:
    """Fallback for foreign adapters: layer indices and LoRA-A input widths must fit the model."""
    weights = folder / PEFT_WEIGHTS_FILE
    if not weights.is_file():
        return  # nothing to compare (e.g. a .bin adapter); PEFT will complain if it does not fit
    layers = have.get("num_hidden_layers")
    hidden = have.get("hidden_size")
    for name, shape in _safetensors_shapes(weights).items():
        m = re.search(r"\.layers\.(\d+)\.", name)
        if m and layers is not None and int(m.group(1)) >= layers:
            raise AdapterMismatch(
                f"the LoRA adapter at {folder} has weights for layer {m.group(1)}, but the loaded "
                f"model {_describe(have)} has only {layers} layers: it was made for another base"
            )
        if (
            hidden is not None
            and "lora_A" in name
            and len(shape) == 2
            and re.search(r"(q_proj|k_proj|v_proj|gate_proj|up_proj|query_key_value)", name)
            and shape[1] != hidden
        ):
            raise AdapterMismatch(
                f"the LoRA adapter at {folder} expects hidden size {shape[1]} ({name}), but the "
                f"loaded model {_describe(have)} has hidden size {hidden}: it was made for another base"
            )
