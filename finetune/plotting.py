"""The loss curve of a run as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def plot_loss(
    history: Sequence[dict], eval_history: Sequence[dict], path: str | Path, title: str = "LoRA fine-tuning"
) -> Path:
    """Train loss per optimizer step (and its moving average), eval loss as points."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        steps = [r["step"] for r in history]
        losses = [r["loss"] for r in history]
        if steps:
            ax.plot(steps, losses, color="tab:blue", alpha=0.35 if len(steps) > 20 else 1.0, label="train loss")
            window = max(1, len(losses) // 20)
            if window > 1:
                smooth = [
                    sum(losses[max(0, i - window + 1) : i + 1]) / len(losses[max(0, i - window + 1) : i + 1])
                    for i in range(len(losses))
                ]
                ax.plot(steps, smooth, color="tab:blue", label=f"train loss ({window}-step mean)")
        evals = [e for e in eval_history if e.get("loss") is not None]
        if evals:
            ax.plot([e["step"] for e in evals], [e["loss"] for e in evals], "o-", color="tab:orange", label="eval loss")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss per assistant token")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
