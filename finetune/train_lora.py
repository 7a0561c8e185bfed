"""LoRA fine-tuning on psychological-support dialogue: ``python -m finetune.train_lora``.

    python -m finetune.train_lora --data ../shared/data/psych/ --out adapters/smol-psych
    python -m finetune.train_lora --base Qwen/Qwen2.5-7B-Instruct --data smile/data \\
        --out adapters/qwen7b-psych --max-length 2048 --batch-size 4 --grad-accum 4

The output folder holds the PEFT adapter, the tokenizer (with its chat template),
``siliconfriend_adapter.json`` (training config, base identity, metrics, system prompt),
``loss_history.json`` and ``loss_curve.png``; ``--adapter FOLDER`` in the app loads it.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

from finetune.datasets import NoUsableData, load_dialogues, split_eval
from finetune.lora import (
    SetupError,
    apply_lora,
    load_base_model,
    load_tokenizer,
    resolve_base,
    resolve_device,
    resolve_precision,
    target_modules_for,
    trainable_parameters,
)
from finetune.masking import ChatRenderer, TemplateError, build_examples
from finetune.persona import COUNSELLOR_SYSTEM_PROMPTS, counsellor_system_prompt
from finetune.trainer import CheckpointMismatch, LoopConfig, Trainer, latest_checkpoint
from siliconfriend.backends.hf.adapter_meta import META_FILE, AdapterMismatch, base_identity, write_adapter_meta

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "data" / "psych_sample.jsonl"
# (batch size, gradient accumulation, max length) when not given: a GPU step sees 16 windows of
# up to 1024 tokens; on a CPU that is minutes per step, so a CPU step sees 4 windows of 512
GPU_SHAPE = (4, 4, 1024)
CPU_SHAPE = (2, 2, 512)
MAX_BAD_SHOWN = 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m finetune.train_lora",
        description="Train a LoRA adapter on counselling dialogues (SmileChat, input/output pairs, "
        "or chat messages JSONL), loss on the counsellor's tokens only.",
    )
    p.add_argument(
        "--base",
        default=None,
        help="Hugging Face id, model folder, .gguf file, or an app preset (smollm2, "
        "chatglm, belle, qwen); default: the packaged SmolLM2-135M-Instruct, offline",
    )
    p.add_argument(
        "--preset",
        default=None,
        help="use this app preset's chat template with another --base (e.g. a local "
        "BELLE folder: --preset belle), as the app's --preset does at inference",
    )
    p.add_argument(
        "--data",
        nargs="+",
        default=None,
        metavar="PATH",
        help="data files or folders (.jsonl/.json); default: data/psych_sample.jsonl",
    )
    p.add_argument("--out", required=True, help="output folder for the adapter")
    p.add_argument("--overwrite", action="store_true", help="replace an adapter already in --out")
    g = p.add_argument_group("LoRA")
    g.add_argument("--r", type=int, default=16, help="LoRA rank (default 16)")
    g.add_argument("--alpha", type=float, default=32, help="LoRA alpha (default 32)")
    g.add_argument("--dropout", type=float, default=0.05, help="LoRA dropout (default 0.05)")
    g.add_argument(
        "--target-modules",
        nargs="+",
        default=None,
        metavar="NAME",
        help="module names to adapt (default per architecture: ChatGLM query_key_value;"
        " LLaMA/BELLE/Qwen attention and MLP projections)",
    )
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=float, default=3.0)
    g.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    g.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (cosine schedule)")
    g.add_argument("--warmup-ratio", type=float, default=0.03)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument(
        "--batch-size", type=int, default=None, help="dialogue windows per micro-batch (default 4 on a GPU, 2 on CPU)"
    )
    g.add_argument(
        "--grad-accum", type=int, default=None, help="micro-batches per optimizer step (default 4 on a GPU, 2 on CPU)"
    )
    g.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per example; longer dialogues are split at turn boundaries (default 1024 on a GPU, 512 on CPU)",
    )
    g.add_argument(
        "--eval-split",
        type=float,
        default=0.05,
        help="held-out dialogues: a fraction (<1) or a count (>=1); 0 for none",
    )
    g.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: start/end)")
    g.add_argument("--save-every", type=int, default=200, help="checkpoint every N steps (0: off)")
    g.add_argument("--save-total-limit", type=int, default=2, help="checkpoints kept")
    g.add_argument(
        "--resume",
        nargs="?",
        const="auto",
        default=None,
        metavar="CHECKPOINT",
        help="resume from a checkpoint folder, or the latest in --out (no value/auto)",
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-dialogues", type=int, default=None, help="use only the first N dialogues")
    g.add_argument(
        "--system-prompt",
        default="auto",
        help="'auto' (the SiliconFriend counsellor persona in the data's language), "
        "'en', 'zh', 'none', or the prompt text itself",
    )
    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps")
    g.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "bf16", "fp16", "fp32"],
        help="auto: bf16 on GPUs that have it, else fp16 on CUDA, fp32 on CPU",
    )
    g.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trade compute for memory (default: on with CUDA)",
    )
    g.add_argument(
        "--load-in-4bit", action="store_true", help="QLoRA: NF4 4-bit base weights (CUDA + bitsandbytes only)"
    )
    g.add_argument(
        "--trust-remote-code", action="store_true", help="allow the model's own code (original ChatGLM-6B/ChatGLM3)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def apply_shape_defaults(args: argparse.Namespace, device: str, log: Callable[[str], None]) -> None:
    """Fill in --batch-size, --grad-accum and --max-length left unset, by device; say so on CPU."""
    shape = GPU_SHAPE if device.startswith("cuda") else CPU_SHAPE
    unset = [name for name in ("batch_size", "grad_accum", "max_length") if getattr(args, name) is None]
    for name, value in zip(("batch_size", "grad_accum", "max_length"), shape):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if unset and not device.startswith("cuda"):
        log(
            f"on {device}: {args.batch_size} x {args.grad_accum} windows of up to {args.max_length} tokens per "
            f"step (a GPU's default is {GPU_SHAPE[0]} x {GPU_SHAPE[1]} x {GPU_SHAPE[2]}, 8 times the tokens); "
            "each step takes about as long as the model needs for that many tokens forward and backward, "
            "so set --batch-size/--grad-accum/--max-length to trade speed for larger steps"
        )


def system_prompt_choice(choice: str) -> Callable | str | None:
    if choice == "auto":
        return lambda d: counsellor_system_prompt(d.text)
    if choice == "none":
        return None
    return COUNSELLOR_SYSTEM_PROMPTS.get(choice, choice)


def _versions() -> dict:
    import peft
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def run(args: argparse.Namespace, log: Callable[[str], None] | None = None) -> dict:
    """Train as ``args`` say; returns the metrics. Raises NoUsableData, SetupError, TemplateError."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    out = Path(args.out).expanduser()
    if (out / META_FILE).exists() and not (args.overwrite or args.resume):
        raise SetupError(
            f"{out} already holds an adapter: choose another --out, or pass "
            "--overwrite (or --resume to continue its training)"
        )
    data = args.data or [str(SAMPLE_DATA)]
    bad_seen = []

    def on_bad(msg: str) -> None:
        bad_seen.append(msg)
        if len(bad_seen) <= MAX_BAD_SHOWN:
            log(f"skipped {msg}")

    dialogues, report = load_dialogues(data, on_bad=on_bad)
    if args.max_dialogues:
        dialogues = dialogues[: args.max_dialogues]
    if len(bad_seen) > MAX_BAD_SHOWN:
        log(f"... and {len(bad_seen) - MAX_BAD_SHOWN} more bad records")
    log(f"data: {report.summary()}")
    train_d, eval_d = split_eval(dialogues, args.eval_split, seed=args.seed)

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    apply_shape_defaults(args, device, log)
    spec = resolve_base(args.base, args.preset)
    log(f"base {spec.display} on {device} ({precision}{', 4-bit' if args.load_in_4bit else ''})")
    tokenizer = load_tokenizer(spec, trust_remote_code=args.trust_remote_code)
    system_prompt = system_prompt_choice(args.system_prompt)
    renderer = ChatRenderer(tokenizer, max_length=args.max_length, system_prompt=system_prompt)
    train_x, stats = build_examples(train_d, renderer, on_bad=on_bad)
    eval_x, _ = build_examples(eval_d, renderer, on_bad=on_bad)
    if not train_x:
        raise NoUsableData(f"no training example left after rendering ({stats.summary()}); raise --max-length?")
    log(f"train: {stats.summary()}; eval: {len(eval_x)} examples")
    prompts_used = Counter(
        renderer.with_system(d)[0]["content"] for d in train_d if renderer.with_system(d)[0]["role"] == "system"
    )

    model = load_base_model(
        spec,
        precision=precision,
        device=device,
        load_in_4bit=args.load_in_4bit,
        trust_remote_code=args.trust_remote_code,
    )
    identity = base_identity(model)
    # what to pass to --base (or the app's model setting) to get this base again: portable,
    # unlike the resolved path ("smollm2" is the packaged GGUF); the resolved file for reference
    identity.update(name_or_path=args.base or "smollm2", resolved_path=spec.display, preset=spec.preset)
    targets = target_modules_for(identity["model_type"], args.target_modules)
    checkpointing = device.startswith("cuda") if args.gradient_checkpointing is None else args.gradient_checkpointing
    model = apply_lora(
        model,
        r=args.r,
        alpha=args.alpha,
        dropout=args.dropout,
        targets=targets,
        gradient_checkpointing=checkpointing,
        quantized=args.load_in_4bit,
    )
    trainable, total = trainable_parameters(model)
    log(f"LoRA r={args.r} alpha={args.alpha} on {targets}: {trainable:,} trainable of {total:,}")

    loop = LoopConfig(
        epochs=args.epochs,
        max_steps=args.max_steps,
        lr=args.lr,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        warmup_ratio=args.warmup_ratio,
        weight_decay=args.weight_decay,
        eval_every=args.eval_every,
        save_every=args.save_every,
        save_total_limit=args.save_total_limit,
        seed=args.seed,
        precision=precision,
        device=device,
    )
    resume_identity = {k: identity[k] for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")}
    resume_identity.update(
        r=args.r,
        alpha=args.alpha,
        targets=targets,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        seed=args.seed,
    )
    trainer = Trainer(
        model,
        train_x,
        eval_x,
        tokenizer.pad_token_id,
        loop,
        out,
        progress=not args.no_progress,
        log=log,
        run_config={"identity": resume_identity},
    )
    if args.resume:
        ckpt = latest_checkpoint(out) if args.resume == "auto" else Path(args.resume)
        if ckpt is None:
            log(f"no checkpoint in {out}; starting from the beginning")
        else:
            trainer.load_checkpoint(ckpt)
            log(f"resumed from {ckpt} at step {trainer.step}")
    metrics = trainer.train()

    training = {k: v for k, v in vars(args).items()}
    training.update(
        data=[str(Path(d).expanduser()) for d in data],
        device=device,
        precision=precision,
        target_modules=targets,
        gradient_checkpointing=checkpointing,
        trainable_parameters=trainable,
        total_parameters=total,
        data_report={
            "files": report.files,
            "records": report.records,
            "bad": len(report.bad),
            "dialogues": len(dialogues),
            "train_dialogues": len(train_d),
            "eval_dialogues": len(eval_d),
        },
        examples=stats.summary(),
        system_prompts_used=dict(prompts_used),
    )
    main_prompt = prompts_used.most_common(1)[0][0] if prompts_used else None
    save_adapter(out, model, tokenizer, trainer, base=identity, training=training, system_prompt=main_prompt)
    return metrics


def save_adapter(
    out: str | Path, model, tokenizer, trainer: Trainer, *, base: dict, training: dict, system_prompt: str | None
) -> Path:
    """Write the adapter folder: PEFT weights + config, tokenizer (chat template), metadata,
    loss history and the loss curve PNG."""
    from finetune.plotting import plot_loss

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, save_embedding_layers=False)
    tokenizer.save_pretrained(out)
    trainer.write_history(out)
    plot_loss(
        trainer.history,
        trainer.eval_history,
        out / "loss_curve.png",
        title=f"LoRA r={training.get('r')} on {Path(str(base.get('name_or_path'))).name}",
    )
    training = dict(
        training,
        chat_template_sha1=hashlib.sha1(str(tokenizer.chat_template).encode()).hexdigest(),
        versions=_versions(),
    )
    write_adapter_meta(out, base=base, training=training, metrics=trainer.metrics(), system_prompt=system_prompt)
    return out


def _fmt(x) -> str:
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        metrics = run(args)
    except (NoUsableData, SetupError, TemplateError, AdapterMismatch, CheckpointMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(
        f"adapter saved in {args.out}: {metrics['steps']} steps in {metrics['seconds']} s "
        f"({metrics['seconds_per_step']} s/step, {metrics['tokens_per_second']} tokens/s); "
        f"train loss {_fmt(metrics['train_loss_first'])} -> {_fmt(metrics['train_loss_last'])}; "
        f"eval loss {_fmt(metrics['eval_loss_before'])} -> {_fmt(metrics['eval_loss_after'])}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
