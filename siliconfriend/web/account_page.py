"""The settings and account tab: the companion's name, persona and model (one of those the
operator offers, by a friendly name); export all my data (a link for this session only, gone
after the download or within minutes); delete my account and every trace of it.

``AccountHandlers`` holds the handlers as named methods; ``build_account`` wires them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import gradio as gr

from ..accounts.users import AccountError
from ..i18n import Translator, say, t
from .account_service import TYPE_KEY_ID
from .common import guard, lang_of, notify
from .service import WebService

EXPORT_ROUTE = "/sf-export"  # + "/<ticket>": served by app.py, once, to the session that asked


class AccountHandlers:
    def __init__(self, service: WebService, cache_dirs: Callable[[], list[Path]] = lambda: []):
        self.service = service
        self.cache_dirs = cache_dirs

    def model_options(self, lang: str = "en") -> list[tuple[str, str]]:
        """(friendly name in ``lang``, "backend:model") of each model users may choose."""
        return [(say(label, lang), key) for key, label in self.service.models.labels.items()]

    def save(self, token_v, name_v, persona_v, model_v) -> str:
        lang = lang_of(self.service, token_v)
        backend, _, model = (model_v or "").partition(":")
        if not model:
            prefs = self.service.account.prefs(token_v)
            backend, model = prefs["backend"], prefs["model"]
        self.service.account.save_prefs(token_v, companion_name=name_v, persona=persona_v, backend=backend, model=model)
        return t("saved", lang)

    def export(self, token_v, request: gr.Request = None) -> str:
        """A one-time download link (relative to the app's root) for this session's export, good
        only in the browser that asked (its cookie, ``web/client.py``)."""
        from .client import browser_id

        lang = lang_of(self.service, token_v)
        ticket = self.service.exports.export_file(token_v, browser_id(request))
        return t(
            "export_link",
            lang,
            url=f"{EXPORT_ROUTE.lstrip('/')}/{ticket}",
            minutes=self.service.exports.export_seconds / 60,
        )

    def delete(self, token_v, password_v, request: gr.Request = None) -> list:
        from .client import request_client

        lang = lang_of(self.service, token_v)
        client = request_client(request, self.service.trusted_proxies)
        self.service.delete_account(token_v, password_v or "", extra_dirs=self.cache_dirs(), client=client)
        return ["", "", t("account_deleted", lang)]

    def create_key(self, token_v, label_v) -> list:
        """A new API key: the table, the secret shown once, the label box emptied. A refusal
        (too many keys) is said in the new-key box, which is left a plain message (no error badge)."""
        lang = lang_of(self.service, token_v)
        try:
            made = self.service.account.create_api_key(token_v, label_v or "")
        except AccountError as exc:
            return self._refused(exc, lang, 3)
        return [keys_markdown(self.service, token_v, lang), t("key_created", lang, secret=made.key), ""]

    def revoke_key(self, token_v, key_id_v) -> list:
        lang = lang_of(self.service, token_v)
        self.service.account.user(token_v)
        try:
            if not str(key_id_v or "").strip().isdigit():
                raise ValueError(TYPE_KEY_ID())
            info = self.service.account.revoke_api_key(token_v, int(str(key_id_v).strip()))
        except (AccountError, ValueError) as exc:
            return self._refused(exc, lang, 2)
        return [keys_markdown(self.service, token_v, lang), t("key_revoked", lang, id=info.id)]

    @staticmethod
    def _refused(exc: Exception, lang: str, outputs: int) -> list:
        """The keys table as it was; the new-key box says why (and a short toast)."""
        message = say(str(exc), lang)
        notify(message, lang)
        return [gr.skip(), f"⚠️ {message}"] + [gr.skip()] * (outputs - 2)

    def fill(self, token_v: str) -> list:
        """Values for the tab's outputs: settings, export link, password box, the API keys section."""
        p = self.service.account.prefs(token_v)
        lang = p.get("lang", "en")
        return [
            p["companion_name"],
            p["persona"],
            f"{p['backend']}:{p['model']}",
            "",
            "",
            t("keys_intro", lang, base="/v1"),
            keys_markdown(self.service, token_v, lang),
            "",
        ]

    def export_in(self, link_html: str | None, lang: str) -> str:
        """The export link already on the page (if any), said in ``lang``."""
        found = re.search(r'href="([^"]+)"', link_html or "")
        if not found:
            return link_html or ""
        return t("export_link", lang, url=found.group(1), minutes=self.service.exports.export_seconds / 60)

    def keys_section(self, token_v: str) -> list:
        """The API keys section's intro and table, in the user's language (after a switch)."""
        lang = lang_of(self.service, token_v)
        return [t("keys_intro", lang, base="/v1"), keys_markdown(self.service, token_v, lang)]

    @staticmethod
    def blank() -> list:
        return ["", "", gr.skip(), "", "", gr.skip(), "", ""]


@dataclass
class AccountParts:
    handlers: AccountHandlers
    outputs: list
    deleted: object  # the delete event, for the app to chain "show the login"
    keys_outputs: list  # the API keys section's intro and table (AccountHandlers.keys_section)
    export_status: object  # the export link's box

    def fill(self, token: str) -> list:
        return self.handlers.fill(token)

    def blank(self) -> list:
        return self.handlers.blank()


def build_account(
    service: WebService,
    tr: Translator,
    token: gr.BrowserState,
    notice: gr.Markdown,
    cache_dirs: Callable[[], list[Path]],
) -> AccountParts:
    """``notice``: the login box's message, where "your account was deleted" is said."""
    guarded = guard(service)
    h = AccountHandlers(service, cache_dirs)
    options = h.model_options(tr.lang)
    tr(gr.Markdown(tr.text("prefs_intro")), value="prefs_intro")
    with gr.Row():
        name = tr(
            gr.Textbox(label=tr.text("companion_name"), elem_id="companion_name", max_length=80), label="companion_name"
        )
        model = tr(
            gr.Dropdown(
                options,
                value=options[0][1] if options else None,
                label=tr.text("model"),
                allow_custom_value=False,
                elem_id="model",
            ),
            label="model",
            choices=h.model_options,
        )
    persona = tr(gr.Textbox(label=tr.text("persona"), lines=3, elem_id="persona", max_length=2000), label="persona")
    save = tr(gr.Button(tr.text("save_prefs"), variant="primary", elem_id="save_prefs"), value="save_prefs")
    prefs_status = gr.Markdown()

    tr(gr.Markdown(tr.text("data_intro")), value="data_intro")
    export = tr(gr.Button(tr.text("export"), elem_id="export"), value="export")
    export_status = gr.HTML(elem_id="export_link")

    keys_intro = gr.Markdown(tr.text("keys_intro", base="/v1"), elem_id="keys_intro")
    keys_table = gr.Markdown(elem_id="api_keys")
    with gr.Row():
        key_label = tr(
            gr.Textbox(label=tr.text("key_label"), elem_id="key_label", max_length=80, scale=3), label="key_label"
        )
        key_create = tr(gr.Button(tr.text("key_create"), elem_id="key_create", scale=1), value="key_create")
    new_key = gr.Markdown(elem_id="new_key")
    with gr.Row():
        # a text box, not gr.Number: a number box shows 0 before anything is typed
        key_id = tr(
            gr.Textbox("", label=tr.text("key_id"), placeholder="1", max_length=24, elem_id="key_id", scale=3),
            label="key_id",
        )
        key_revoke = tr(gr.Button(tr.text("key_revoke"), elem_id="key_revoke", scale=1), value="key_revoke")

    tr(gr.Markdown(tr.text("danger_intro")), value="danger_intro")
    with gr.Row():
        confirm = tr(
            gr.Textbox(label=tr.text("confirm_password"), type="password", elem_id="delete_password", scale=3),
            label="confirm_password",
        )
        delete = tr(
            gr.Button(tr.text("delete_account"), variant="stop", elem_id="delete_account", scale=2),
            value="delete_account",
        )

    key_create.click(
        guarded(h.create_key), [token, key_label], [keys_table, new_key, key_label], api_name="api_key_create"
    )
    key_revoke.click(guarded(h.revoke_key), [token, key_id], [keys_table, new_key], api_name="api_key_revoke")
    save.click(guarded(h.save), [token, name, persona, model], prefs_status, api_name="save_settings")
    export.click(guarded(h.export), [token], export_status, api_name="export")
    deleted = delete.click(guarded(h.delete), [token, confirm], [token, confirm, notice], api_name="delete_account")
    return AccountParts(
        h,
        [name, persona, model, export_status, confirm, keys_intro, keys_table, new_key],
        deleted,
        [keys_intro, keys_table],
        export_status,
    )


def keys_markdown(service: WebService, token: str, lang: str) -> str:
    """The user's API keys as a table (their first characters only)."""
    if service.account.api_keys is None:
        return ""
    keys = service.account.list_api_keys(token)
    if not keys:
        return t("no_keys", lang)

    def when(ts: float | None) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"

    rows = [
        f"| {k.id} | `{k.prefix}…` | {t('key_active' if k.active else 'key_is_revoked', lang)} | "
        f"{when(k.created_at)} | {when(k.last_used_at)} | {as_text(k.label)} |"
        for k in keys
    ]
    return "\n".join([t("keys_table", lang), *rows])


MARKUP = set("\\`*_{}[]()#+-.!|<>&~=:;\"'")


def as_text(text: str) -> str:
    """``text`` for a Markdown cell, shown as typed: every character Markdown or HTML could read
    as markup (``<b>``, ``<img>``, ``**``, ``|``...) becomes a character reference."""
    return "".join(f"&#{ord(c)};" if c in MARKUP else c for c in " ".join((text or "").split()))
