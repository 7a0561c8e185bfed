"""The one place that builds things from settings; everything else receives its parts."""
from __future__ import annotations

from memory.bank import MemoryBank
from memory.embedders import create_embedder
from memory.forgetting import EbbinghausPolicy
from memory.retrieval import RetrievalConfig

from .config import Settings


def build_policy(settings: Settings) -> EbbinghausPolicy:
    return EbbinghausPolicy(threshold=settings.forgetting_threshold, mode=settings.forgetting_mode,
                            unit_days=settings.forgetting_unit_days, step=settings.strength_step,
                            growth=settings.strength_growth)


def build_bank(settings: Settings, *, progress=None) -> MemoryBank:
    if progress is None:
        from tqdm import tqdm as progress
    return MemoryBank(settings.home, create_embedder(settings.embedder), policy=build_policy(settings),
                      retrieval=RetrievalConfig(k=settings.retrieval_k), progress=progress)
