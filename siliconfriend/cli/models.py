"""``siliconfriend prepare-model``: a local model made ready before its first load."""

from __future__ import annotations

import argparse
import sys
import time


def cmd_prepare_model(args) -> int:
    from ..backends.base import BackendError
    from ..backends.hf.loader import gguf_plain_folder, model_spec, prepare_model

    try:
        spec = model_spec(args.model)
        ready = gguf_plain_folder(spec)
        if ready is not None and (ready / "config.json").is_file():
            print(f"{spec.display}: ready in {ready}")
            return 0
        start = time.perf_counter()
        folder = prepare_model(args.model)
    except BackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if folder is None:
        print(f"{spec.display}: nothing to prepare (not a small GGUF file, or its cache is not writable)")
        return 0
    print(f"{spec.display}: de-quantized into {folder} in {time.perf_counter() - start:.1f} s")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare-model",
        help="make a local model ready before its first load (a GGUF file is de-quantized once)",
    )
    p.add_argument("model", nargs="?", default="smollm2", help="a preset, a .gguf file or a folder (default: smollm2)")
    p.set_defaults(func=cmd_prepare_model)
