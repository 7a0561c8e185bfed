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
    """The memory store the settings name: files under the home, or the PostgreSQL database of
    ``database_url``."""
    if progress is None:
        from tqdm import tqdm as progress
    parts = dict(policy=build_policy(settings), retrieval=RetrievalConfig(k=settings.retrieval_k), progress=progress)
    if settings.database_url:
        from memory.pg_store import PgMemoryBank
        return PgMemoryBank(settings.database_url, create_embedder(settings.embedder), **parts)
    return MemoryBank(settings.home, create_embedder(settings.embedder), **parts)


def build_backend(settings: Settings, **options):
    """The chat backend the settings name (openai when OPENAI_API_KEY is set, else the embedded model)."""
    from .backends.registry import create_backend
    return create_backend(settings.backend, model=settings.model, adapter=settings.adapter, **options)


def build_companion(settings: Settings, *, clock=None, backend=None, bank: MemoryBank | None = None,
                    progress=None, **options):
    """A Companion with everything it needs, built from ``settings``. ``clock`` (default: the real
    time), ``backend`` and ``bank`` may be given (tests, scripted sessions, one model for many)."""
    from datetime import datetime

    from .core.companion import Companion
    return Companion(bank or build_bank(settings, progress=progress), backend or build_backend(settings),
                     settings=settings, clock=clock or datetime.now, **options)
