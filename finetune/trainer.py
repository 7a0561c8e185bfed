"""The training loop: masked causal-LM loss, gradient accumulation, mixed precision, evaluation,
checkpoints that can be resumed, a tqdm progress bar, and the metrics of the run.

The data order is a pure function of (seed, epoch), so a resumed run continues with exactly the
micro-batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from finetune.masking import IGNORE_INDEX, Example, collate

if TYPE_CHECKING:
    import torch

CHECKPOINT_DIR = "checkpoints"
STATE_FILE = "trainer_state.pt"


class CheckpointMismatch(ValueError):
    """The checkpoint to resume was made with other settings (base, LoRA shape, data order)."""


@dataclass
class LoopConfig:
    epochs: float = 3.0
    max_steps: int | None = None  # optimizer steps; overrides epochs when given
    lr: float = 2e-4
    batch_size: int = 4
    grad_accum: int = 4
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    eval_every: int = 0  # optimizer steps between evaluations (0: start and end only)
    save_every: int = 0  # optimizer steps between checkpoints (0: none but the last)
    save_total_limit: int = 2
    seed: int = 0
    precision: str = "fp32"  # resolved: bf16 | fp16 | fp32
    device: str = "cpu"


LOSS_CHUNK_TOKENS = 1024  # label positions whose logits exist at one time


def masked_loss_sum(model, batch: dict, *, chunk_tokens: int = LOSS_CHUNK_TOKENS) -> tuple[torch.Tensor, int]:
    """(sum of next-token cross-entropy over label tokens, number of label tokens).

    Logits are computed only at the positions that predict a label token (the counsellor's),
    ``chunk_tokens`` positions at a time, each chunk's float32 logits recomputed in the backward
    pass instead of kept: the vocabulary projection is the costliest layer of small models, and
    full-vocabulary logits for every position take gigabytes. Models whose logits are more than
    the output projection of the last hidden state (soft-capped, scaled) get the plain path."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    target = batch["labels"][:, 1:]
    wanted = target != IGNORE_INDEX
    count = int(wanted.sum())
    parts = _decoder_and_head(model)
    if parts is None:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        logits = out.logits[:, :-1, :].float()
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        return loss, count
    decoder, head = parts
    hidden = decoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    states, labels = hidden[:, :-1][wanted], target[wanted]
    loss = states[:0].float().sum()  # 0, on the graph even when there is no label
    for start in range(0, len(labels), chunk_tokens):
        piece = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            loss = loss + checkpoint(_chunk_loss, head, states[piece], labels[piece], use_reentrant=False)
        else:
            loss = loss + _chunk_loss(head, states[piece], labels[piece])
    return loss, count


def _chunk_loss(head, states, labels):
    import torch.nn.functional as F

    return F.cross_entropy(head(states).float(), labels, reduction="sum")


def _decoder_and_head(model):
    """(the model without its output layer, the output layer), or None where the logits are not
    simply ``head(last hidden state)``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if config is None or getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    get_decoder, get_head = getattr(inner, "get_decoder", None), getattr(inner, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    try:
        decoder, head = get_decoder(), get_head()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or head is None or decoder is inner:
        return None
    return decoder, head


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    folder = Path(out_dir) / CHECKPOINT_DIR
    found = sorted(p for p in folder.glob("step-*") if (p / STATE_FILE).is_file())
    return found[-1] if found else None


class Trainer:
    def __init__(
        self,
        model,
        train: Sequence[Example],
        evaluation: Sequence[Example],
        pad_token_id: int,
        cfg: LoopConfig,
        out_dir: str | Path,
        *,
        progress: bool = True,
        log: Callable[[str], None] = print,
        run_config: dict | None = None,
    ):
        import torch

        if not train:
            raise ValueError("no training example")
        self.model, self.train_set, self.eval_set = model, list(train), list(evaluation)
        self.pad, self.cfg, self.out = pad_token_id, cfg, Path(out_dir)
        self.progress, self.log, self.run_config = progress, log, run_config or {}
        self.micro_per_epoch = math.ceil(len(self.train_set) / cfg.batch_size)
        steps_per_epoch = max(1, math.ceil(self.micro_per_epoch / cfg.grad_accum))
        self.total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        from transformers import get_cosine_schedule_with_warmup

        self.scheduler = get_cosine_schedule_with_warmup(
            self.optimizer, int(cfg.warmup_ratio * self.total_steps), self.total_steps
        )
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "fp16")
        self.step = 0
        self.history: list[dict] = []  # one row per optimizer step
        self.eval_history: list[dict] = []  # {"step", "loss"}
        self.tokens_seen = self.label_tokens = 0
        self.elapsed = 0.0

    # ------------------------------------------------------------------ data
    def _micro_batches(self, start: int) -> Iterator[tuple[int, list[Example]]]:
        """(epoch, batch) from micro-batch number ``start`` on, forever."""
        bs, n = self.cfg.batch_size, len(self.train_set)
        pos = start
        while True:
            epoch, index = divmod(pos, self.micro_per_epoch)
            order = list(range(n))
            random.Random(self.cfg.seed * 100003 + epoch).shuffle(order)
            chunk = order[index * bs : (index + 1) * bs]
            yield epoch, [self.train_set[i] for i in chunk]
            pos += 1

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.cfg.device) for k, v in batch.items()}

    def _autocast(self):
        import torch

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.precision)
        device_type = self.cfg.device.split(":")[0]
        return torch.autocast(device_type=device_type, dtype=dtype or torch.float32, enabled=dtype is not None)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, examples: Sequence[Example] | None = None) -> float | None:
        """Mean loss per label token over ``examples`` (default: the eval set)."""
        import torch

        examples = self.eval_set if examples is None else list(examples)
        if not examples:
            return None
        was_training = self.model.training
        self.model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), self._autocast():
            for i in range(0, len(examples), self.cfg.batch_size):
                batch = self._to_device(collate(examples[i : i + self.cfg.batch_size], self.pad))
                loss, n = masked_loss_sum(self.model, batch)
                total, count = total + float(loss), count + n
        self.model.train(was_training)
        return total / max(count, 1)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        import torch

        folder = self.out / CHECKPOINT_DIR / f"step-{self.step:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder, save_embedding_layers=False)
        state = {
            "step": self.step,
            "history": self.history,
            "eval_history": self.eval_history,
            "tokens_seen": self.tokens_seen,
            "label_tokens": self.label_tokens,
            "elapsed": self.elapsed,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "loop": asdict(self.cfg),
            "run_config": self.run_config,
        }
        torch.save(state, folder / STATE_FILE)
        done = sorted((self.out / CHECKPOINT_DIR).glob("step-*"))
        for old in done[: max(0, len(done) - max(1, self.cfg.save_total_limit))]:
            shutil.rmtree(old, ignore_errors=True)
        return folder

    def load_checkpoint(self, folder: str | Path) -> None:
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        folder = Path(folder)
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=False)
        mine, theirs = self.run_config.get("identity"), state["run_config"].get("identity")
        if mine and theirs and mine != theirs:
            changed = {k: (theirs.get(k), v) for k, v in mine.items() if theirs.get(k) != v}
            raise CheckpointMismatch(f"checkpoint {folder} was made with other settings: {changed}")
        set_peft_model_state_dict(
            self.model, load_file(str(folder / "adapter_model.safetensors"), device=str(self.cfg.device))
        )
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.step, self.history = state["step"], state["history"]
        self.eval_history = state["eval_history"]
        self.tokens_seen, self.label_tokens = state["tokens_seen"], state["label_tokens"]
        self.elapsed = state["elapsed"]

    # ------------------------------------------------------------------ the loop
    def train(self, until: int | None = None) -> dict:
        """Train to the last step (or only up to step ``until``); returns the metrics."""
        import torch

        cfg = self.cfg
        if self.step == 0 and not self.eval_history and self.eval_set:
            self.eval_history.append({"step": 0, "loss": self.evaluate()})
        self.model.train()
        stream = self._micro_batches(self.step * cfg.grad_accum)
        bar = _progress(self.total_steps, self.step, enabled=self.progress)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if cfg.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter() - self.elapsed
        try:
            stop = self.total_steps if until is None else min(self.total_steps, until)
            while self.step < stop:
                group = [next(stream) for _ in range(cfg.grad_accum)]
                batches = [collate(b, self.pad) for _, b in group]
                n_learn = sum(int((b["labels"][:, 1:] != IGNORE_INDEX).sum()) for b in batches)
                step_loss = 0.0
                for batch in batches:
                    batch = self._to_device(batch)
                    with self._autocast():
                        loss, _ = masked_loss_sum(self.model, batch)
                    self.scaler.scale(loss / max(n_learn, 1)).backward()
                    step_loss += float(loss.detach())
                    self.tokens_seen += int(batch["attention_mask"].sum())
                self.label_tokens += n_learn
                self.scaler.unscale_(self.optimizer)
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                self.elapsed = time.perf_counter() - start
                row = {
                    "step": self.step,
                    "epoch": round(group[-1][0] + 1e-9, 3),
                    "loss": step_loss / max(n_learn, 1),
                    "lr": self.scheduler.get_last_lr()[0],
                    "grad_norm": float(grad_norm),
                    "seconds": round(self.elapsed, 3),
                }
                self.history.append(row)
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{row['lr']:.2e}")
                if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < self.total_steps:
                    self.eval_history.append({"step": self.step, "loss": self.evaluate()})
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save_checkpoint()
        except KeyboardInterrupt:
            bar.close()
            self.log(f"interrupted: checkpoint saved in {self.save_checkpoint()}; rerun with --resume auto to continue")
            raise
        bar.close()
        if self.eval_set and self.step >= self.total_steps:
            self.eval_history.append({"step": self.step, "loss": self.evaluate()})
        return self.metrics()

    def metrics(self) -> dict:
        import torch

        losses = [r["loss"] for r in self.history]
        tail = losses[-min(5, len(losses)) :] if losses else []
        evals = [e["loss"] for e in self.eval_history]
        peak = None
        if self.cfg.device.startswith("cuda"):
            peak = torch.cuda.max_memory_allocated() / 2**20
        return {
            "steps": self.step,
            "total_steps": self.total_steps,
            "epochs": round(self.step * self.cfg.grad_accum / self.micro_per_epoch, 3),
            "train_examples": len(self.train_set),
            "eval_examples": len(self.eval_set),
            "train_loss_first": losses[0] if losses else None,
            "train_loss_last": sum(tail) / len(tail) if tail else None,
            "eval_loss_before": evals[0] if evals else None,
            "eval_loss_after": evals[-1] if len(evals) > 1 else None,
            "seconds": round(self.elapsed, 2),
            "seconds_per_step": round(self.elapsed / max(self.step, 1), 3),
            "tokens_seen": self.tokens_seen,
            "label_tokens": self.label_tokens,
            "tokens_per_second": round(self.tokens_seen / max(self.elapsed, 1e-9), 1),
            "peak_gpu_memory_mib": round(peak, 1) if peak is not None else None,
        }

    def write_history(self, folder: str | Path) -> Path:
        path = Path(folder) / "loss_history.json"
        path.write_text(json.dumps({"train": self.history, "eval": self.eval_history}, indent=1))
        return path


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc="LoRA", unit="step", dynamic_ncols=True)
