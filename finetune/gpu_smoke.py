"""GPU smoke run of the LoRA pipeline: a few training steps, then tokens/s and peak memory.

    python -m finetune.gpu_smoke                       # packaged SmolLM2, bf16, on CUDA
    python -m finetune.gpu_smoke --base Qwen/Qwen2.5-7B-Instruct --data smile/data \\
        --max-length 2048 --batch-size 4 --steps 20 --gradient-checkpointing
    python -m finetune.gpu_smoke --allow-cpu --steps 2 --max-length 256   # code path on CPU

It trains on the longest dialogue windows (the worst case for memory), times the steps after
``--warmup`` untimed ones, checks that the loss fell and that the saved adapter reloads and
changes the logits, and prints one JSON line of results (also written to ``--json``).
Exit status 0 when all checks pass, 1 when one fails, 2 when it cannot run (no GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from finetune.datasets import load_dialogues
from finetune.lora import (
    apply_lora,
    load_base_model,
    load_tokenizer,
    resolve_base,
    resolve_precision,
    target_modules_for,
    trainable_parameters,
)
from finetune.masking import ChatRenderer, build_examples, collate
from finetune.persona import counsellor_system_prompt
from finetune.train_lora import SAMPLE_DATA, save_adapter
from finetune.trainer import LoopConfig, Trainer
from siliconfriend.backends.hf.adapter_meta import base_identity, check_adapter_base


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finetune.gpu_smoke", description=__doc__.split("\n")[0])
    p.add_argument("--base", default=None, help="HF id, folder or .gguf (default packaged SmolLM2)")
    p.add_argument("--data", nargs="+", default=[str(SAMPLE_DATA)])
    p.add_argument("--steps", type=int, default=12, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (kernels, allocator)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=1024)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--load-in-4bit", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-cpu", action="store_true", help="run on CPU when there is no GPU")
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def _longest_examples(tokenizer, data, max_length, count):
    dialogues, _ = load_dialogues(data)
    renderer = ChatRenderer(tokenizer, max_length=max_length, system_prompt=lambda d: counsellor_system_prompt(d.text))
    examples, _ = build_examples(dialogues, renderer)
    return sorted(examples, key=len, reverse=True)[:count]


def run(args: argparse.Namespace) -> tuple[dict, bool]:
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    precision = resolve_precision(args.precision, device)
    spec = resolve_base(args.base)
    t0 = time.perf_counter()
    tok = load_tokenizer(spec, trust_remote_code=args.trust_remote_code)
    model = load_base_model(
        spec,
        precision=precision,
        device=device,
        load_in_4bit=args.load_in_4bit,
        trust_remote_code=args.trust_remote_code,
    )
    load_s = time.perf_counter() - t0
    identity = base_identity(model)
    n_examples = args.batch_size * (args.steps + args.warmup)
    examples = _longest_examples(tok, args.data, args.max_length, n_examples)
    probe = examples[: min(2, len(examples))]
    model = apply_lora(
        model,
        r=args.r,
        alpha=2 * args.r,
        dropout=0.05,
        targets=target_modules_for(identity["model_type"]),
        gradient_checkpointing=args.gradient_checkpointing,
        quantized=args.load_in_4bit,
    )
    trainable, total = trainable_parameters(model)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LoopConfig(
            max_steps=args.warmup + args.steps,
            lr=args.lr,
            batch_size=args.batch_size,
            grad_accum=1,
            warmup_ratio=0.0,
            precision=precision,
            device=device,
        )
        trainer = Trainer(model, examples, probe, tok.pad_token_id, cfg, tmp, progress=False)
        trainer.train(until=args.warmup)  # the loss before, and untimed warm-up steps
        warm_tokens, warm_seconds = trainer.tokens_seen, trainer.elapsed
        if cuda:
            torch.cuda.synchronize()
        metrics = trainer.train()  # timed steps (peak memory is reset inside)
        if cuda:
            torch.cuda.synchronize()
        timed_s = trainer.elapsed - warm_seconds
        timed_tokens = trainer.tokens_seen - warm_tokens
        out = save_adapter(
            Path(tmp) / "adapter",
            model,
            tok,
            trainer,
            base=dict(identity, name_or_path=args.base or "smollm2"),
            training={"r": args.r, "smoke": True},
            system_prompt=None,
        )
        reload_ok, changed = _reload_changes_output(model, out, probe, tok.pad_token_id, device)
    evals = [e["loss"] for e in trainer.eval_history]
    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "base": spec.display,
        "precision": precision,
        "load_in_4bit": args.load_in_4bit,
        "gradient_checkpointing": args.gradient_checkpointing,
        "r": args.r,
        "trainable_parameters": trainable,
        "total_parameters": total,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "mean_example_tokens": round(sum(map(len, examples)) / len(examples), 1),
        "load_seconds": round(load_s, 1),
        "timed_steps": args.steps,
        "seconds_per_step": round(timed_s / max(args.steps, 1), 4),
        "tokens_per_second": round(timed_tokens / max(timed_s, 1e-9), 1),
        "peak_memory_gib": (round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None),
        "loss_before": evals[0] if evals else None,
        "loss_after": evals[-1] if evals else None,
        "train_loss_last": metrics["train_loss_last"],
        "reloaded_adapter_changes_logits": changed,
        "base_check_passed": reload_ok,
    }
    ok = bool(changed and reload_ok and evals and evals[-1] < evals[0])
    return result, ok


def _reload_changes_output(model, folder, probe, pad_id, device) -> tuple[bool, bool]:
    import torch
    from peft import PeftModel

    base = model.unload()
    check_adapter_base(folder, base)
    batch = {k: v.to(device) for k, v in collate(probe, pad_id).items()}
    base.eval()
    with torch.no_grad():
        before = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        tuned = PeftModel.from_pretrained(base, str(folder)).to(device)
        tuned.eval()
        after = tuned(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return True, bool((after.float() - before.float()).abs().max() > 1e-3)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            "no CUDA GPU here: run this on a GPU machine (or pass --allow-cpu to try the code path on CPU)",
            file=sys.stderr,
        )
        return 2
    result, ok = run(args)
    line = json.dumps(result)
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    print(
        f"{result['device']}: {result['tokens_per_second']} tokens/s, "
        f"{result['seconds_per_step']} s/step, peak memory {result['peak_memory_gib']} GiB, "
        f"loss {result['loss_before']:.4f} -> {result['loss_after']:.4f}: "
        f"{'OK' if ok else 'FAILED'}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
