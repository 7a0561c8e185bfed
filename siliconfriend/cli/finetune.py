"""``siliconfriend finetune ...``: the LoRA training command of ``finetune/train_lora.py``."""

from __future__ import annotations

import argparse


def cmd_finetune(args) -> int:
    from finetune.train_lora import main

    return main(getattr(args, "extra_args", []))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune", add_help=False, help="train a LoRA adapter on counselling dialogue (see finetune --help)"
    )
    p.set_defaults(func=cmd_finetune, passes_options_on=True)
