"""Base model loading (HF id, folder or GGUF file; optional 4-bit) and the LoRA wrapping.

Heavy libraries (torch, transformers, peft) are imported inside the functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GLM_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"]

# LoRA target modules per transformers ``model_type``. ChatGLM-6B/ChatGLM2/3 (remote code) fuse
# Q, K and V into ``query_key_value``; LLaMA (BELLE is a LLaMA model), Qwen, Mistral: attention
# and MLP projections; the native GLM classes of transformers 5 fuse gate and up.
ARCH_TARGETS: dict[str, list[str]] = {
    "chatglm": ["query_key_value"],
    "llama": LLAMA_TARGETS, "mistral": LLAMA_TARGETS, "qwen2": LLAMA_TARGETS,
    "qwen3": LLAMA_TARGETS, "gemma": LLAMA_TARGETS, "gemma2": LLAMA_TARGETS,
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "internlm2": ["wqkv", "wo", "w1", "w2", "w3"],
    "baichuan": ["W_pack", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "glm": GLM_TARGETS, "glm4": GLM_TARGETS,
    "bloom": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
PACKAGED_BASE_NAMES = {"", "smollm2", "packaged", "default"}


class SetupError(RuntimeError):
    """The requested setup cannot run here (no CUDA for 4-bit, missing library, no model...)."""


@dataclass
class BaseSpec:
    """Where the base model comes from: ``source`` (id or folder) and, for GGUF, the file name;
    ``template``/``legacy_template``: the chat template the app's preset forces on the tokenizer
    (always / only when the tokenizer has none), so that training renders like the app."""
    source: str
    gguf_file: str | None = None
    preset: str | None = None
    template: str | None = None
    legacy_template: str | None = None

    @property
    def display(self) -> str:
        return f"{self.source}/{self.gguf_file}" if self.gguf_file else self.source


def app_presets() -> dict:
    """The chat backends' model presets (smollm2, chatglm, belle, qwen), if that module is there."""
    try:
        from siliconfriend.backends.hf.chat import PRESETS
    except ImportError:
        return {}
    return PRESETS


def _preset_spec(name: str) -> dict:
    from siliconfriend.backends.hf.chat import resolve_preset

    try:
        return resolve_preset(name)
    except Exception as exc:  # BackendModelNotFound for a missing packaged model
        raise SetupError(str(exc)) from exc


def resolve_base(base: str | None, preset: str | None = None) -> BaseSpec:
    """``None``/'smollm2' -> the packaged SmolLM2 GGUF; an app preset name (chatglm, belle, qwen)
    -> its model and chat template; a ``.gguf`` path -> its folder and file; anything else is a
    Hugging Face id or a model folder. ``preset`` applies a preset's template to another base."""
    name = (base or "").strip()
    presets = app_presets()
    if name.lower() in presets or name.lower() in PACKAGED_BASE_NAMES:
        key = name.lower() if name.lower() in presets else "smollm2"
        if key in presets:
            spec = _preset_spec(key)
            return BaseSpec(spec["model"], spec.get("gguf_file"), key, spec.get("template"),
                            spec.get("legacy_template"))
        from siliconfriend.backends.hf.model_files import smollm2_gguf_path

        path = smollm2_gguf_path()
        return BaseSpec(str(path.parent), path.name, "smollm2")
    extra: dict = {}
    if preset:
        if preset.lower() not in presets:
            raise SetupError(f"unknown preset {preset!r}; presets: {', '.join(sorted(presets)) or 'none'}")
        p = presets[preset.lower()]
        extra = {"preset": preset.lower(), "template": p.get("template"),
                 "legacy_template": p.get("legacy_template")}
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise SetupError(f"GGUF file {path} does not exist")
        return BaseSpec(str(path.parent), path.name, **extra)
    return BaseSpec(str(path) if path.exists() else name, **extra)


def target_modules_for(model_type: str | None, override: list[str] | None = None) -> list[str] | str:
    """The LoRA target modules for ``model_type``; ``override`` wins; unknown types: all linear."""
    if override:
        return list(override)
    return list(ARCH_TARGETS.get((model_type or "").lower(), [])) or "all-linear"


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SetupError(f"--device {device} asked for, but torch sees no CUDA GPU")
    return device


def resolve_precision(precision: str, device: str) -> str:
    """'bf16', 'fp16' or 'fp32'. 'auto': bf16 on GPUs that have it, else fp16 on CUDA, else fp32."""
    import torch

    cuda = device.startswith("cuda")
    if precision == "auto":
        if cuda:
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "fp32"
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


def load_tokenizer(spec: BaseSpec, *, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if spec.gguf_file:
        kwargs["gguf_file"] = spec.gguf_file
    try:
        tok = AutoTokenizer.from_pretrained(spec.source, **kwargs)
    except OSError as exc:
        raise SetupError(f"cannot load the tokenizer of {spec.display}: {exc}. Give a local model "
                         "folder or a .gguf file when there is no internet.") from exc
    if spec.template:
        tok.chat_template = spec.template
    elif not getattr(tok, "chat_template", None) and spec.legacy_template and trust_remote_code:
        tok.chat_template = spec.legacy_template
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_base_model(spec: BaseSpec, *, precision: str, device: str, load_in_4bit: bool = False,
                    trust_remote_code: bool = False):
    """The base causal LM on ``device``: weights in the training precision, or 4-bit (QLoRA)."""
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code,
                              "dtype": torch_dtype(precision)}
    if spec.gguf_file:
        kwargs["gguf_file"] = spec.gguf_file
    if load_in_4bit:
        kwargs.update(quantization_config=_bnb_4bit_config(precision, device, spec),
                      device_map={"": device if ":" in device else f"{device}:0"})
    try:
        model = AutoModelForCausalLM.from_pretrained(spec.source, **kwargs)
    except OSError as exc:
        raise SetupError(f"cannot load the base model {spec.display}: {exc}. Give a local model "
                         "folder or a .gguf file when there is no internet.") from exc
    if not load_in_4bit:
        model.to(device)
    model.config.use_cache = False
    return model


def _bnb_4bit_config(precision: str, device: str, spec: BaseSpec):
    import importlib.util

    if not device.startswith("cuda"):
        raise SetupError("--load-in-4bit (QLoRA) needs a CUDA GPU; on this machine train the "
                         "full-precision base instead (drop --load-in-4bit)")
    if spec.gguf_file:
        raise SetupError("--load-in-4bit works on safetensors models, not on a GGUF file")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise SetupError("--load-in-4bit needs bitsandbytes: pip install bitsandbytes")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch_dtype(
                                  "bf16" if precision == "fp32" else precision))


def apply_lora(model, *, r: int, alpha: float, dropout: float, targets: list[str] | str,
               gradient_checkpointing: bool, quantized: bool = False):
    """Wrap ``model`` in a trainable PEFT LoRA model (base weights frozen)."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False})
    elif gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # the new name in transformers 5.x
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                        bias="none", task_type="CAUSAL_LM")
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as exc:
        raise SetupError(f"cannot place LoRA on target modules {targets}: {exc}. "
                         "Name them with --target-modules") from exc
    return peft_model


def trainable_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
