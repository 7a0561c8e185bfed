"""``siliconfriend prepare-model``: a local model made ready before its first load."""

from __future__ import annotations

import argparse
import sys
import time


def cmd_prepare_model(args) -> int:
    from ..backends.base import BackendError
    from ..factory import prepare_local_model

    start = time.perf_counter()
    try:
        name, folder, made = prepare_local_model(args.model)
    except BackendError as exc:
        print(f"siliconfriend: error: {exc}", file=sys.stderr)
        return 2
    if folder is None:
        print(f"{name}: nothing to prepare (not a small GGUF file, or its cache is not writable)")
    elif made:
        print(f"{name}: de-quantized into {folder} in {time.perf_counter() - start:.1f} s")
    else:
        print(f"{name}: ready in {folder}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare-model",
        help="make a local model ready before its first load (a GGUF file is de-quantized once)",
    )
    p.add_argument("model", nargs="?", default="smollm2", help="a preset, a .gguf file or a folder (default: smollm2)")
    p.set_defaults(func=cmd_prepare_model)
