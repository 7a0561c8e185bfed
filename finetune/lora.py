"""The base model for training, loaded by the app's one loader (``siliconfriend/backends/hf/loader.py``),
optionally in 4 bits, and the LoRA wrapping.

Heavy libraries (torch, transformers, peft) are imported inside the functions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from siliconfriend.backends.base import BackendError
from siliconfriend.backends.hf import loader
from siliconfriend.backends.hf.loader import PRESETS, ModelSpec, model_spec, pick_device, pick_dtype

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GLM_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"]

# LoRA target modules per transformers ``model_type``. ChatGLM-6B/ChatGLM2/3 (remote code) fuse
# Q, K and V into ``query_key_value``; LLaMA (BELLE is a LLaMA model), Qwen, Mistral: attention
# and MLP projections; the native GLM classes of transformers 5 fuse gate and up.
ARCH_TARGETS: dict[str, list[str]] = {
    "chatglm": ["query_key_value"],
    "llama": LLAMA_TARGETS,
    "mistral": LLAMA_TARGETS,
    "qwen2": LLAMA_TARGETS,
    "qwen3": LLAMA_TARGETS,
    "gemma": LLAMA_TARGETS,
    "gemma2": LLAMA_TARGETS,
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "internlm2": ["wqkv", "wo", "w1", "w2", "w3"],
    "baichuan": ["W_pack", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "glm": GLM_TARGETS,
    "glm4": GLM_TARGETS,
    "bloom": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
PACKAGED_BASE_NAMES = {"", "smollm2", "packaged", "default"}


class SetupError(RuntimeError):
    """The requested setup cannot run here (no CUDA for 4-bit, missing library, no model...)."""


def resolve_base(base: str | None, preset: str | None = None) -> ModelSpec:
    """``None``/'smollm2' -> the packaged SmolLM2 GGUF; an app preset name (chatglm, belle, qwen)
    -> its model and chat template; a ``.gguf`` path -> its folder and file; anything else is a
    Hugging Face id or a model folder. ``preset`` applies a preset's template to another base.
    The app's loader decides, so that training loads what the app loads."""
    name = (base or "").strip()
    if name.lower() in PACKAGED_BASE_NAMES:
        name = "smollm2"
    if preset and preset.strip().lower() not in PRESETS:
        raise SetupError(f"unknown preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and not path.is_file():
        raise SetupError(f"GGUF file {path} does not exist")
    try:
        return model_spec(name, preset)
    except BackendError as exc:  # BackendModelNotFound for a missing packaged model or folder
        raise SetupError(str(exc)) from exc


def target_modules_for(model_type: str | None, override: list[str] | None = None) -> list[str] | str:
    """The LoRA target modules for ``model_type``; ``override`` wins; unknown types: all linear."""
    if override:
        return list(override)
    return list(ARCH_TARGETS.get((model_type or "").lower(), [])) or "all-linear"


def resolve_device(device: str = "auto") -> str:
    try:
        return pick_device(device)
    except BackendError as exc:
        raise SetupError(f"--{exc}") from exc


def resolve_precision(precision: str, device: str) -> str:
    """'bf16', 'fp16' or 'fp32'. 'auto': the app's choice for the device (bf16 on GPUs that have
    it, else fp16 on CUDA, else fp32)."""
    import torch

    cuda = device.startswith("cuda")
    if precision == "auto":
        if device.startswith("mps"):
            return "fp32"  # fp16 training on MPS is not supported by the loop's scaler
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(pick_dtype(device), "fp32")
    if precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise SetupError("this GPU has no bf16; use --precision fp16")
    if precision == "fp16" and not cuda:
        raise SetupError("--precision fp16 needs a CUDA GPU (use fp32 or bf16 on CPU)")
    if precision not in ("bf16", "fp16", "fp32"):
        raise SetupError(f"unknown precision {precision!r}: choose auto, bf16, fp16 or fp32")
    return precision


def torch_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]


def load_tokenizer(spec: ModelSpec, *, trust_remote_code: bool = False):
    """The tokenizer as the app loads it, with the app's chat-template policy."""
    try:
        return loader.load_tokenizer(spec, trust_remote_code=trust_remote_code)
    except BackendError as exc:  # not found (says what to give instead), or no chat template
        raise SetupError(str(exc)) from exc


def load_base_model(
    spec: ModelSpec, *, precision: str, device: str, load_in_4bit: bool = False, trust_remote_code: bool = False
):
    """The base causal LM on ``device`` (the app's loader): weights in the training precision,
    or 4-bit (QLoRA)."""
    options: dict[str, Any] = {}
    if load_in_4bit:
        options.update(
            quantization_config=_bnb_4bit_config(precision, device, spec),
            device_map={"": device if ":" in device else f"{device}:0"},
        )
    try:
        model = loader.load_model(
            spec, device=device, dtype=torch_dtype(precision), trust_remote_code=trust_remote_code, **options
        )
    except BackendError as exc:
        raise SetupError(str(exc)) from exc
    model.config.use_cache = False
    return model


def _bnb_4bit_config(precision: str, device: str, spec: ModelSpec):
    if not device.startswith("cuda"):
        raise SetupError(
            "--load-in-4bit (QLoRA) needs a CUDA GPU; on this machine train the "
            "full-precision base instead (drop --load-in-4bit)"
        )
    if spec.gguf_file:
        raise SetupError("--load-in-4bit works on safetensors models, not on a GGUF file")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise SetupError("--load-in-4bit needs bitsandbytes: pip install bitsandbytes")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch_dtype("bf16" if precision == "fp32" else precision),
    )


def apply_lora(
    model,
    *,
    r: int,
    alpha: float,
    dropout: float,
    targets: list[str] | str,
    gradient_checkpointing: bool,
    quantized: bool = False,
):
    """Wrap ``model`` in a trainable PEFT LoRA model (base weights frozen)."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # the new name in transformers 5.x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    config = LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none", task_type="CAUSAL_LM"
    )
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as exc:
        raise SetupError(
            f"cannot place LoRA on target modules {targets}: {exc}. Name them with --target-modules"
        ) from exc
    return peft_model


def trainable_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
