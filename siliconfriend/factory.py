"""The one place that builds things from settings; everything else receives its parts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from tqdm import tqdm

from memory.bank import MemoryBank
from memory.embedders import Embedder, LazyEmbedder, create_embedder, lazy_embedder
from memory.forgetting import EbbinghausPolicy
from memory.lexical import Tokenizer
from memory.message import Message
from memory.retrieval import RetrievalConfig

from .accounts.keys import ApiKeys
from .accounts.users import Accounts, open_accounts
from .backends.openai_chat import DEFAULT_MODEL as OPENAI_DEFAULT_MODEL
from .backends.registry import create_backend
from .config import DEMO_MODEL, Settings
from .core.companion import Companion

if TYPE_CHECKING:  # the web's modules load only for the web app (serve-api never imports them)
    from .api.service import ApiService
    from .web.service import WebService


def build_policy(settings: Settings) -> EbbinghausPolicy:
    return EbbinghausPolicy(
        threshold=settings.forgetting_threshold,
        mode=settings.forgetting_mode,
        unit_days=settings.forgetting_unit_days,
        step=settings.strength_step,
        growth=settings.strength_growth,
        importance_weight=settings.importance_weight,
        reactivate=settings.forgetting_reactivate,
        validation_factor=settings.validation_factor,
        competitor_loss=settings.retrieval_induced_forgetting,
        spacing_days=settings.forgetting_spacing_days,
        decay=parse_paces(settings.forgetting_paces),
    )


def parse_paces(items: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """``forgetting_paces`` ("people=0.25", ...) as the policy's ``decay``."""
    paces = []
    for item in items:
        name, _, value = item.partition("=")
        try:
            paces.append((name.strip(), float(value)))
        except ValueError:
            raise ValueError(f"setting forgetting_paces: {item!r} is not sort=pace (e.g. people=0.25)") from None
    return tuple(paces)


_lexical_workers: ThreadPoolExecutor | None = None
_workers_lock = threading.Lock()


def lexical_workers() -> ThreadPoolExecutor:
    """The threads every bank built here runs its lexical searches on (beside the query's
    embedding): one pool per process, made on first use."""
    global _lexical_workers
    with _workers_lock:
        if _lexical_workers is None:
            _lexical_workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sf-lexical")
        return _lexical_workers


_tokenizer: Tokenizer | None = None


def tokenizer() -> Tokenizer:
    """The lexical tokenizer every bank built here indexes and searches with (its jieba cuts
    remembered across them), and what the app's other readers of tokens are handed (the
    grounding check, consolidation, the benchmarks): one per process, made on first use."""
    global _tokenizer
    with _workers_lock:
        if _tokenizer is None:
            _tokenizer = Tokenizer()
        return _tokenizer


class Embedders:
    """The embedders the banks built here share, one per spec, each made on first use (a model
    loads once per process; an embedder is read-only once loaded)."""

    def __init__(self) -> None:
        self._made: dict[str, Embedder] = {}
        self._lock = threading.Lock()

    def get(self, spec: str, *, lazy: bool = False) -> Embedder:
        """The embedder of ``spec``; ``lazy``: its model loads only when something is embedded
        (where its id and dimension are known without it), else now."""
        with self._lock:
            found = self._made.get(spec)
            if found is None:
                found = self._made[spec] = lazy_embedder(spec) if lazy else create_embedder(spec)
        if not lazy and isinstance(found, LazyEmbedder):
            found.load()
        return found


_embedders = Embedders()


def embedders() -> Embedders:
    """This process's embedders (see ``lexical_workers``)."""
    return _embedders


def build_bank(settings: Settings, *, progress=None, lazy: bool = False) -> MemoryBank:
    """The memory store the settings name: files under the home, or the PostgreSQL database of
    ``database_url``. ``lazy``: the embedder loads only if something is embedded (commands that
    list, export or forget)."""
    parts = dict(
        policy=build_policy(settings),
        retrieval=RetrievalConfig(k=settings.retrieval_k),
        progress=progress or tqdm,
        workers=lexical_workers(),
        compress=settings.compress_before_archiving,
    )
    embedder = embedders().get(settings.embedder, lazy=lazy)
    if settings.second_reader:
        parts["second"] = embedders().get(settings.second_reader, lazy=lazy)
    if settings.database_url:
        from memory.stores.postgres import PostgresStores

        stores = PostgresStores(
            settings.database_url, tokenizer=tokenizer(), wait_for_flush=settings.database_wait_for_flush
        )
        return MemoryBank(stores, embedder, **parts)
    from memory.stores.sqlite import SqliteStores

    return MemoryBank(SqliteStores(settings.home, tokenizer=tokenizer()), embedder, **parts)


def backend_options(settings: Settings, name: str) -> dict[str, Any]:
    """What a backend named ``name`` takes from the settings (the OpenAI server and key)."""
    if name != "openai":
        return {}
    options = {"api_key": settings.openai_api_key, "base_url": settings.openai_base_url}
    return {key: value for key, value in options.items() if value}


def build_backend(settings: Settings, *, lazy: bool = False, **options):
    """The chat backend the settings name (openai when an API key is set, else the embedded model).
    ``lazy``: built on first use, so that commands with nothing to generate start fast."""
    if lazy:
        return LazyBackend(lambda: build_backend(settings, **options))
    name = settings.default_backend
    model = settings.model or (settings.openai_model if name == "openai" else None)
    return create_backend(name, model=model, adapter=settings.adapter, **backend_options(settings, name), **options)


class LazyBackend:
    """A backend built by ``build`` on first use."""

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._backend = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._backend is None:
                self._backend = self._build()
            return self._backend

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def drop_prefix(self, cache_key: str) -> None:
        """A backend never built keeps no prompt to drop (and is not built for this)."""
        if self._backend is not None:
            drop = getattr(self._backend, "drop_prefix", None)
            if drop is not None:
                drop(cache_key)

    def stream(self, messages, *, max_tokens=None, **options):
        # options: what the built backend's stream takes besides (cache_key where it keeps_prefix)
        return self._get().stream(messages, max_tokens=max_tokens, **options)


def build_companion(
    settings: Settings, *, clock=None, backend=None, bank: MemoryBank | None = None, progress=None, **options
) -> Companion:
    """A Companion with everything it needs, built from ``settings``. ``clock`` (default: the real
    time), ``backend`` and ``bank`` may be given (tests, scripted sessions, one model for many)."""
    return Companion(
        bank or build_bank(settings, progress=progress),
        backend or build_backend(settings),
        settings=settings,
        clock=clock or datetime.now,
        **options,
    )


# the names users see for the local presets (an operator may give any model its own in web_models);
# a product's name is the same in every language, a description is words
FRIENDLY_MODEL_NAMES: dict[str, str] = {
    "smollm2": Message(
        "model.smollm2", en="SmolLM2 135M (built in, tiny, English)", zh="SmolLM2 135M（内置，很小，只会英文）"
    )(),
    "qwen": "Qwen2.5 7B",
    "chatglm": "GLM-4 9B",
    "belle": "BELLE 13B",
}


def default_model(settings: Settings) -> tuple[str, str]:
    """(backend, model) of the companion's own model, the one every user gets unless they pick
    another: the configured model, else the backend's default ("" when it has none)."""
    backend = settings.default_backend
    if settings.model:
        return backend, settings.model
    if backend == "hf":
        return backend, DEMO_MODEL[1]
    if backend == "openai":
        return backend, settings.openai_model or OPENAI_DEFAULT_MODEL
    return backend, ""


def demo_model_hint(settings: Settings) -> str | None:
    """For the operator, when the packaged demo model is what answers by default: the one
    setting that connects a real model (None when another model is configured)."""
    if default_model(settings) != DEMO_MODEL:
        return None
    return (
        "the companion answers with the built-in demo model SmolLM2-135M (tiny, English only; its "
        "replies are often off). To connect a real model set OPENAI_API_KEY (OpenAI), or "
        "OPENAI_BASE_URL (with any OPENAI_API_KEY) and OPENAI_MODEL for any OpenAI-compatible server: "
        "Ollama http://localhost:11434/v1, llama.cpp's server http://localhost:8080/v1, "
        "vLLM http://localhost:8000/v1"
    )


def prepare_local_model(model: str) -> tuple[str, Any, bool]:
    """A local model made ready before its first load (``siliconfriend prepare-model``): its name
    as a user gives it, its de-quantized folder (None: nothing to prepare) and whether it was made
    now. Raises ``BackendError`` for a model that is not there."""
    from .backends.hf.loader import prepare_model

    return prepare_model(model)


def model_choices(settings: Settings) -> dict[str, list[str]]:
    """The backends and models users may pick: the configured default first, then what the
    operator lists in ``web_models`` ("backend:model" entries, e.g. "hf:qwen", "openai:gpt-4o").
    Nothing else: which models a server downloads and loads is the operator's decision."""
    backend, model = default_model(settings)
    choices: dict[str, list[str]] = {backend: [model] if model else []}
    for entry in settings.web_models:
        backend, _, model = entry.partition("=")[0].strip().partition(":")
        if not model.strip():
            raise ValueError(f"web_models: {entry!r} is not backend:model (e.g. hf:qwen)")
        models = choices.setdefault(backend.strip(), [])
        if model.strip() not in models:
            models.append(model.strip())
    return choices


def model_labels(settings: Settings) -> dict[str, str]:
    """ "backend:model" -> the name users see (``web_models`` may give one after "=")."""
    labels = {}
    for backend, models in model_choices(settings).items():
        for model in models:
            labels[f"{backend}:{model}"] = FRIENDLY_MODEL_NAMES.get(model, model)
    for entry in settings.web_models:
        key, _, label = entry.partition("=")
        if label.strip():
            labels[key.strip()] = label.strip()
    return labels


def backend_builder(settings: Settings) -> Callable[..., Any]:
    """How a backend a user picks besides the companion's own is built (the web app keeps the
    ones built: ``BackendPool``)."""

    def build(name: str, *, model: str | None = None, **options):
        return create_backend(name, model=model, **backend_options(settings, name), **options)

    return build


def build_web_service(
    settings: Settings,
    *,
    clock: Callable[[], datetime] | None = None,
    companion: Companion | None = None,
    bank: MemoryBank | None = None,
    accounts: Accounts | None = None,
) -> WebService:
    """Accounts, the memory bank and (lazily, on the first chat) the companion, from settings.
    ``companion``/``bank``/``accounts`` may be given (tests, one model for many)."""
    from .web.service import WebService

    if bank is None:
        bank = companion.bank if companion is not None else build_bank(settings)

    def companion_factory():  # the same bank: one index cache, one writer per user
        return build_companion(settings, clock=clock, bank=bank)

    if accounts is None:
        accounts = open_accounts(settings)
    return WebService(
        settings,
        accounts,
        bank,
        companion=companion,
        companion_factory=None if companion is not None else companion_factory,
        clock=clock,
        build_backend=backend_builder(settings),
        choices=model_choices(settings),
        labels=model_labels(settings),
    )


def build_api_service(
    settings: Settings,
    *,
    accounts: Accounts | None = None,
    bank: MemoryBank | None = None,
    companion: Callable[[], Companion] | None = None,
    keys: ApiKeys | None = None,
    clock: Callable[[], datetime] | None = None,
) -> ApiService:
    """The API's service (``siliconfriend.api``). Alone (``serve-api``): its own accounts and
    bank from the settings, the companion built on the first chat. Beside the web app
    (``app.api_routes``): the web's accounts, bank, companion, keys and clock, given."""
    from .api.service import ApiService

    if accounts is None:
        accounts = open_accounts(settings)
    if bank is None:
        bank = build_bank(settings)
    if companion is None:
        companion = first_use(lambda: build_companion(settings, clock=clock, bank=bank))
    return ApiService(
        settings,
        accounts,
        bank,
        companion=companion,
        keys=keys or ApiKeys(accounts),
        clock=clock or datetime.now,
    )


def first_use(build: Callable[[], Companion]) -> Callable[[], Companion]:
    """``build``, called once on the first call (under a lock: two first requests build one)."""
    made: list[Companion] = []
    lock = threading.Lock()

    def get() -> Companion:
        with lock:
            if not made:
                made.append(build())
            return made[0]

    return get
