"""The training CLI end to end on a tiny random LLaMA base (no download), the adapter folder it
writes, resume, clear errors, and AdapterMismatch for adapters made for another base."""

import json
from pathlib import Path

import pytest

from finetune.lora import resolve_base, target_modules_for
from finetune.train_lora import main
from siliconfriend.backends.hf.adapter_meta import (
    META_FILE,
    AdapterMismatch,
    base_identity,
    check_adapter_base,
    read_adapter_meta,
    write_adapter_meta,
)
from siliconfriend.backends.hf.loader import PRESETS

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "psych_sample.jsonl"


def tiny_llama(vocab_size: int, hidden: int = 32, layers: int = 2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        pad_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
    )
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A tiny random LlamaForCausalLM with the packaged SmolLM2 tokenizer, saved to a folder."""
    from finetune.lora import load_tokenizer

    tok = load_tokenizer(resolve_base(None))
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def trained(tiny_base, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "adapter"
    code = main(
        [
            "--base",
            str(tiny_base),
            "--data",
            str(SAMPLE),
            "--out",
            str(out),
            "--max-dialogues",
            "7",
            "--eval-split",
            "1",
            "--max-length",
            "256",
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--max-steps",
            "2",
            "--lr",
            "1e-3",
            "--save-every",
            "1",
            "--no-progress",
        ]
    )
    assert code == 0
    return out


def test_adapter_folder_holds_everything_needed(trained, tiny_base):
    for name in (
        "adapter_config.json",
        "adapter_model.safetensors",
        META_FILE,
        "loss_curve.png",
        "loss_history.json",
        "tokenizer_config.json",
    ):
        assert (trained / name).is_file(), name
    assert (trained / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    meta = read_adapter_meta(trained)
    assert meta["format"] == 1
    assert meta["base"] == {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "vocab_size": 49152,
        "name_or_path": str(tiny_base),
        "resolved_path": str(tiny_base),
        "preset": None,
    }
    t = meta["training"]
    assert (t["r"], t["alpha"], t["dropout"]) == (16, 32, 0.05)
    assert t["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert t["data_report"]["train_dialogues"] == 6 and t["data_report"]["eval_dialogues"] == 1
    assert meta["metrics"]["steps"] == 2 and meta["metrics"]["eval_loss_after"] is not None
    assert "硅基朋友" in meta["system_prompt"]  # Chinese data -> the Chinese persona prompt
    history = json.loads((trained / "loss_history.json").read_text())
    assert [r["step"] for r in history["train"]] == [1, 2]


def test_matching_base_passes_and_other_bases_are_refused(trained):
    check_adapter_base(trained, tiny_llama(49152))  # same shape, different weights: fine
    with pytest.raises(AdapterMismatch, match="hidden size 32 vs 48"):
        check_adapter_base(trained, tiny_llama(49152, hidden=48))
    with pytest.raises(AdapterMismatch, match="num hidden layers 2 vs 3"):
        check_adapter_base(trained, tiny_llama(49152, layers=3))
    with pytest.raises(AdapterMismatch, match="vocab size 49152 vs 1000"):
        check_adapter_base(trained, tiny_llama(1000))
    from transformers import Qwen2Config

    qwen = Qwen2Config(hidden_size=32, num_hidden_layers=2, vocab_size=49152, pad_token_id=0)
    with pytest.raises(AdapterMismatch, match="model type 'llama' vs 'qwen2'") as err:
        check_adapter_base(trained, qwen)
    assert str(trained) in str(err.value) and "finetune.train_lora" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_adapter_loads_with_peft_alone(trained):
    from peft import PeftModel

    model = PeftModel.from_pretrained(tiny_llama(49152), str(trained))
    assert any("lora_A" in n for n, _ in model.named_parameters())


def test_resume_continues_from_the_last_checkpoint(trained, tiny_base, tmp_path):
    import shutil

    run = tmp_path / "resumed"
    shutil.copytree(trained, run)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    code = main(
        [
            "--base",
            str(tiny_base),
            "--data",
            str(SAMPLE),
            "--out",
            str(run),
            "--max-dialogues",
            "7",
            "--eval-split",
            "1",
            "--max-length",
            "256",
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--max-steps",
            "3",
            "--lr",
            "1e-3",
            "--save-every",
            "0",
            "--no-progress",
            "--resume",
        ]
    )
    assert code == 0
    history = json.loads((run / "loss_history.json").read_text())["train"]
    assert [r["step"] for r in history] == [1, 2, 3]
    original = json.loads((trained / "loss_history.json").read_text())["train"]
    assert history[:2] == original  # the first two steps were kept, not redone
    # a checkpoint made with another LoRA shape is refused
    code = main(
        [
            "--base",
            str(tiny_base),
            "--data",
            str(SAMPLE),
            "--out",
            str(run),
            "--r",
            "8",
            "--max-dialogues",
            "7",
            "--eval-split",
            "1",
            "--max-length",
            "256",
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--max-steps",
            "3",
            "--no-progress",
            "--resume",
            str(run / "checkpoints" / "step-000002"),
        ]
    )
    assert code == 2


def test_existing_adapter_is_not_overwritten_by_accident(trained, tiny_base, capsys):
    code = main(["--base", str(tiny_base), "--data", str(SAMPLE), "--out", str(trained), "--max-steps", "1"])
    assert code == 2 and "already holds an adapter" in capsys.readouterr().err


def test_clear_errors(tiny_base, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no dialogue"}\n{broken\n')
    assert main(["--base", str(tiny_base), "--data", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: unknown record format" in err and f"{bad}:2: invalid JSON" in err
    assert "no usable training dialogue" in err
    import torch

    if not torch.cuda.is_available():
        args = [
            "--base",
            str(tiny_base),
            "--data",
            str(SAMPLE),
            "--out",
            str(tmp_path / "q"),
            "--max-dialogues",
            "2",
            "--max-length",
            "256",
            "--eval-split",
            "0",
        ]
        assert main(args + ["--load-in-4bit", "--device", "cpu"]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
        assert main(args + ["--precision", "fp16"]) == 2
        assert "fp16 needs a CUDA GPU" in capsys.readouterr().err


def test_foreign_adapter_without_metadata_is_checked_by_weight_shapes(tmp_path):
    from peft import LoraConfig, get_peft_model

    folder = tmp_path / "foreign"
    peft_model = get_peft_model(tiny_llama(1000), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(folder)
    assert not (folder / META_FILE).exists()
    assert read_adapter_meta(folder)["format"] == 0
    check_adapter_base(folder, tiny_llama(1000))
    with pytest.raises(AdapterMismatch, match="hidden size 32"):
        check_adapter_base(folder, tiny_llama(1000, hidden=48))
    with pytest.raises(AdapterMismatch, match="layer 1"):
        check_adapter_base(folder, tiny_llama(1000, layers=1))


def test_read_adapter_meta_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_adapter_meta(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="not a LoRA adapter folder"):
        read_adapter_meta(tmp_path)
    write_adapter_meta(
        tmp_path, base=base_identity(tiny_llama(100)), training={"r": 16}, metrics={"steps": 1}, system_prompt="P"
    )
    meta = read_adapter_meta(tmp_path)
    assert meta["training"] == {"r": 16} and meta["system_prompt"] == "P"
    assert meta["base"]["vocab_size"] == 100


def test_target_modules_per_architecture():
    assert target_modules_for("chatglm") == ["query_key_value"]
    for arch in ("llama", "qwen2", "mistral"):
        assert target_modules_for(arch) == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert "gate_up_proj" in target_modules_for("glm4")
    assert target_modules_for("unknown-arch") == "all-linear"
    assert target_modules_for("llama", ["q_proj"]) == ["q_proj"]


def test_preset_template_is_used_for_training_like_the_app(tiny_base, tmp_path):
    belle = PRESETS["belle"]
    out = tmp_path / "belle"
    assert (
        main(
            [
                "--base",
                str(tiny_base),
                "--preset",
                "belle",
                "--data",
                str(SAMPLE),
                "--out",
                str(out),
                "--max-dialogues",
                "2",
                "--eval-split",
                "0",
                "--max-length",
                "256",
                "--batch-size",
                "2",
                "--grad-accum",
                "1",
                "--max-steps",
                "1",
                "--save-every",
                "0",
                "--no-progress",
            ]
        )
        == 0
    )
    assert read_adapter_meta(out)["base"]["preset"] == "belle"
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).chat_template == belle["template"]


def test_resolve_base(tmp_path):
    packaged = resolve_base(None)
    assert packaged.gguf_file and packaged.gguf_file.endswith(".gguf")
    assert resolve_base("smollm2") == packaged and packaged.preset == "smollm2"
    assert resolve_base("Qwen/Qwen2.5-7B-Instruct").source == "Qwen/Qwen2.5-7B-Instruct"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_base(str(gguf)).gguf_file == "m.gguf"


def test_bf16_and_gradient_checkpointing_paths_run_on_cpu(tiny_base, tmp_path):
    out = tmp_path / "bf16"
    assert (
        main(
            [
                "--base",
                str(tiny_base),
                "--data",
                str(SAMPLE),
                "--out",
                str(out),
                "--max-dialogues",
                "2",
                "--eval-split",
                "0",
                "--max-length",
                "256",
                "--batch-size",
                "2",
                "--grad-accum",
                "2",
                "--max-steps",
                "1",
                "--precision",
                "bf16",
                "--gradient-checkpointing",
                "--save-every",
                "0",
                "--no-progress",
            ]
        )
        == 0
    )
    training = read_adapter_meta(out)["training"]
    assert training["precision"] == "bf16" and training["gradient_checkpointing"] is True
    assert not (out / "checkpoints").exists()
