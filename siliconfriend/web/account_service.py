"""Accounts and keys for the web app: who holds a session token, their preferences (with the
models this server offers), and their API keys. Every other web service asks ``user`` first."""

from __future__ import annotations

from dataclasses import dataclass

from memory.message import Message as Text

from ..accounts.keys import ApiKeyInfo, ApiKeys, NewKey
from ..accounts.users import Accounts, Session
from ..config import Settings

LOG_IN = Text("account.log_in", en="please log in", zh="请先登录。")
BAD_LANGUAGE = Text("prefs.bad_language", en="language must be en or zh", zh="语言只能是 en 或 zh。")
NOT_OFFERED = Text(
    "prefs.model_not_offered",
    en="that model is not offered on this server; pick one from the list",
    zh="这个模型目前在本服务器上不可用；请换一个，或联系服务器管理员。",
)
NO_API = Text("keys.no_api", en="this server does not serve the API", zh="本服务器没有开放 API。")
TYPE_KEY_ID = Text("keys.type_id", en="type the id of the key to revoke", zh="请输入要吊销的密钥编号。")


class NotLoggedIn(PermissionError):
    """No valid session: the caller must log in (again)."""


@dataclass(frozen=True)
class ModelChoices:
    """The backends and models a user may pick (the default first: the companion's own) and the
    names users see for them ("backend:model" -> label)."""

    offered: dict[str, list[str]]
    labels: dict[str, str]

    @classmethod
    def of(
        cls, settings: Settings, offered: dict[str, list[str]] | None = None, labels: dict[str, str] | None = None
    ) -> ModelChoices:
        """Without ``offered`` (``factory.model_choices``) only the companion's own model."""
        offered = offered or {settings.default_backend: [settings.model] if settings.model else []}
        labels = labels or {f"{b}:{m}": m for b, models in offered.items() for m in models}
        return cls(offered, labels)

    @property
    def default(self) -> tuple[str, str]:
        """(backend, model) of the companion's own model."""
        backend = next(iter(self.offered))
        return backend, (self.offered[backend] or [""])[0]

    def offers(self, backend: str, model: str) -> bool:
        return model in self.offered.get(backend, [])


class AccountService:
    def __init__(self, settings: Settings, accounts: Accounts, models: ModelChoices, api_keys: ApiKeys | None = None):
        """``api_keys`` when the app serves the API (``app.api_routes`` sets it)."""
        self.settings = settings
        self.accounts = accounts
        self.models = models
        self.api_keys = api_keys

    # -- sessions -----------------------------------------------------------------------------
    def signup(self, name: str, password: str) -> Session:
        return self.accounts.signup(name, password)

    def login(self, name: str, password: str, *, client: str | None = None) -> Session:
        return self.accounts.login(name, password, client=client)

    def user(self, token: str | None) -> str:
        """The session's user, or NotLoggedIn. Every other method starts here."""
        user = self.accounts.user_for(token)
        if user is None:
            raise NotLoggedIn(LOG_IN())
        return user

    # -- preferences --------------------------------------------------------------------------
    def prefs(self, token: str | None) -> dict:
        user = self.user(token)
        saved = self.accounts.prefs(user)
        backend, model = self.models.default
        defaults = {
            "lang": self.settings.lang,
            "backend": backend,
            "model": model,
            "companion_name": self.settings.companion_name,
            "persona": self.settings.persona,
        }
        out = {**defaults, **{k: v for k, v in saved.items() if v not in (None, "")}}
        if not self.models.offers(out["backend"], out["model"]):  # no longer offered: the default
            out["backend"], out["model"] = backend, model
        return out

    def save_prefs(self, token: str, **prefs) -> dict:
        user = self.user(token)
        if "lang" in prefs and prefs["lang"] not in ("en", "zh"):
            raise ValueError(BAD_LANGUAGE())
        if "backend" in prefs and prefs["backend"] not in self.models.offered:
            raise ValueError(NOT_OFFERED())
        if prefs.get("model") is not None:
            backend = prefs.get("backend") or self.prefs(token)["backend"]
            if not self.models.offers(backend, str(prefs["model"]).strip()):
                raise ValueError(NOT_OFFERED())
        for key in ("companion_name", "persona", "model"):
            if key in prefs and prefs[key] is not None:
                prefs[key] = str(prefs[key]).strip()[:2000]
        self.accounts.set_prefs(user, **prefs)
        return self.prefs(token)

    # -- API keys (account page) --------------------------------------------------------------
    def _keys(self) -> ApiKeys:
        if self.api_keys is None:
            raise ValueError(NO_API())
        return self.api_keys

    def list_api_keys(self, token: str) -> list[ApiKeyInfo]:
        user = self.user(token)
        return self._keys().list(user)

    def create_api_key(self, token: str, label: str = "") -> NewKey:
        """A new key for this user: its text is in the result once and never again."""
        user = self.user(token)
        return self._keys().create(user, label)

    def revoke_api_key(self, token: str, key_id: int) -> ApiKeyInfo:
        user = self.user(token)
        return self._keys().revoke(user, int(key_id))
