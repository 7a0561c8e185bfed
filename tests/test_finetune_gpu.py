"""GPU smoke test of the LoRA pipeline (skipped without CUDA; CI has none).

Run it alone on a GPU machine: ``python -m pytest -q -m gpu tests/test_finetune_gpu.py -s``
or the standalone ``python -m finetune.gpu_smoke`` that prints tokens/s and peak memory.
"""

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_gpu_smoke_smollm2_bf16(tmp_path):
    from finetune.gpu_smoke import main

    out = tmp_path / "smoke.json"
    assert main(["--steps", "6", "--warmup", "2", "--batch-size", "4", "--max-length", "1024", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    print(result)
    assert result["precision"] in ("bf16", "fp16")
    assert result["peak_memory_gib"] > 0 and result["tokens_per_second"] > 0
    assert result["loss_after"] < result["loss_before"]
    assert result["reloaded_adapter_changes_logits"]


def test_gpu_smoke_with_gradient_checkpointing(tmp_path):
    from finetune.gpu_smoke import main

    assert (
        main(["--steps", "2", "--warmup", "1", "--batch-size", "2", "--max-length", "512", "--gradient-checkpointing"])
        == 0
    )


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="QLoRA needs bitsandbytes")
def test_qlora_4bit_on_a_tiny_safetensors_base(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from finetune.gpu_smoke import main
    from finetune.lora import load_tokenizer, resolve_base

    tok = load_tokenizer(resolve_base(None))
    LlamaForCausalLM(
        LlamaConfig(
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=len(tok),
            pad_token_id=2,
        )
    ).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert (
        main(
            [
                "--base",
                str(tmp_path),
                "--load-in-4bit",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--batch-size",
                "2",
                "--max-length",
                "256",
                "--lr",
                "5e-3",
            ]
        )
        == 0
    )
