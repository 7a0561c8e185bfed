"""SmolLM2-135M + LoRA r=16 on SmileChat dialogues for a few CPU steps: the loss falls, the adapter
saves, reloads with PEFT, changes the model's output, and fits only its own base."""

from pathlib import Path

import pytest

from finetune.datasets import load_dialogues
from finetune.lora import apply_lora, load_base_model, load_tokenizer, resolve_base, target_modules_for
from finetune.masking import IGNORE_INDEX, ChatRenderer, build_examples, collate
from finetune.persona import COUNSELLOR_SYSTEM_PROMPT_EN
from finetune.train_lora import save_adapter
from finetune.trainer import LoopConfig, Trainer
from siliconfriend.backends.hf.adapter_meta import (
    AdapterMismatch,
    base_identity,
    check_adapter_base,
    read_adapter_meta,
    write_adapter_meta,
)

pytestmark = pytest.mark.slow
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "psych_sample.jsonl"


@pytest.fixture(scope="module")
def smol():
    spec = resolve_base(None)
    return load_tokenizer(spec), load_base_model(spec, precision="fp32", device="cpu")


def loss_and_logits(model, examples, pad_id):
    """Mean loss per assistant token and the logits, from one forward pass."""
    import torch
    import torch.nn.functional as F

    model.eval()
    with torch.no_grad():
        batch = collate(examples, pad_id)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        target = batch["labels"][:, 1:]
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=IGNORE_INDEX
        )
    return float(loss), logits


def test_lora_on_smilechat_learns_saves_reloads_and_changes_output(smol, tmp_path):
    import torch
    from peft import PeftModel

    tok, base = smol
    identity = dict(base_identity(base), name_or_path="smollm2")
    dialogues, _ = load_dialogues([SAMPLE])
    assert len(dialogues) == 40
    # the English persona prompt keeps the CPU cost down (the Chinese one is ~150 tokens)
    renderer = ChatRenderer(tok, max_length=256, system_prompt=COUNSELLOR_SYSTEM_PROMPT_EN)
    examples, stats = build_examples(dialogues, renderer)
    assert stats.dialogues == 40 and stats.label_tokens > 1000
    first_windows = {}
    for ex in examples:
        first_windows.setdefault(ex.source, ex)
    train = sorted(first_windows.values(), key=len)[:4]  # 4 dialogues, shortest first windows
    probe = train[:2]
    assert all(len(ex) <= 256 for ex in train)
    base_loss, base_logits = loss_and_logits(base, probe, tok.pad_token_id)

    torch.manual_seed(0)
    model = apply_lora(
        base, r=16, alpha=32, dropout=0.05, targets=target_modules_for("llama"), gradient_checkpointing=False
    )
    cfg = LoopConfig(max_steps=4, lr=2e-3, batch_size=2, grad_accum=1, warmup_ratio=0.0, device="cpu", precision="fp32")
    trainer = Trainer(model, train, [], tok.pad_token_id, cfg, tmp_path / "run", progress=False)
    metrics = trainer.train()
    print("SmolLM2 LoRA metrics:", metrics)
    assert metrics["steps"] == 4 and len(trainer.history) == 4

    out = save_adapter(
        tmp_path / "adapter",
        model,
        tok,
        trainer,
        base=identity,
        training={"r": 16, "alpha": 32},
        system_prompt=COUNSELLOR_SYSTEM_PROMPT_EN,
    )
    assert read_adapter_meta(out)["metrics"]["steps"] == 4
    assert (out / "loss_curve.png").is_file()

    clean = model.unload()  # the base again, LoRA layers removed
    assert not any("lora" in n for n, _ in clean.named_parameters())
    check_adapter_base(out, clean)
    reloaded = PeftModel.from_pretrained(clean, str(out))
    tuned_loss, tuned_logits = loss_and_logits(reloaded, probe, tok.pad_token_id)
    print(f"loss on trained dialogues: base {base_loss:.4f} -> adapter {tuned_loss:.4f}")
    assert tuned_loss < base_loss - 0.1  # the loss fell
    assert (tuned_logits - base_logits).abs().max() > 1e-2  # the adapter changes the output
    reloaded.unload()


def test_adapter_for_a_tiny_base_is_refused_by_smollm2(smol, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    tok, base = smol
    tiny = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=len(tok),
            pad_token_id=2,
        )
    )
    folder = tmp_path / "tiny-adapter"
    get_peft_model(tiny, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj"])).save_pretrained(folder)
    write_adapter_meta(folder, base=base_identity(tiny), training={"r": 16}, metrics={})
    with pytest.raises(AdapterMismatch) as err:
        check_adapter_base(folder, base)
    message = str(err.value)
    assert "hidden size 32 vs 576" in message and "num hidden layers 2 vs 30" in message
