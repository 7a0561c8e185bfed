"""The settings and account tab: the companion's name, persona, backend and model; export all
my data; delete my account and every trace of it."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import gradio as gr

from .common import guard, lang_of
from .i18n import Translator, t
from .service import WebService


@dataclass
class AccountParts:
    fill: Callable[[str], list]          # token -> values for ``outputs``
    blank: Callable[[], list]
    outputs: list
    deleted: object                      # the delete event, for the app to chain "show the login"


def build_account(service: WebService, tr: Translator, token: gr.BrowserState, notice: gr.Markdown,
                  cache_dirs: Callable[[], list[Path]]) -> AccountParts:
    """``notice``: the login box's message, where "your account was deleted" is said."""
    guarded = guard(service)
    backends = list(service.choices)
    tr(gr.Markdown(tr.text("prefs_intro")), value="prefs_intro")
    with gr.Row():
        name = tr(gr.Textbox(label=tr.text("companion_name"), elem_id="companion_name", max_length=80),
                  label="companion_name")
        backend = tr(gr.Dropdown(backends, value=backends[0], label=tr.text("backend"), elem_id="backend"),
                     label="backend")
        model = tr(gr.Dropdown(service.choices[backends[0]], value=(service.choices[backends[0]] or [None])[0],
                               label=tr.text("model"), allow_custom_value=False, elem_id="model"), label="model")
    persona = tr(gr.Textbox(label=tr.text("persona"), lines=3, elem_id="persona", max_length=2000), label="persona")
    save = tr(gr.Button(tr.text("save_prefs"), variant="primary", elem_id="save_prefs"), value="save_prefs")
    prefs_status = gr.Markdown()

    tr(gr.Markdown(tr.text("data_intro")), value="data_intro")
    with gr.Row():
        export = tr(gr.Button(tr.text("export"), elem_id="export"), value="export")
        download = tr(gr.DownloadButton(tr.text("download"), visible=False, variant="primary", elem_id="download"),
                      label="download")
    export_status = gr.Markdown()

    keys_intro = gr.Markdown(tr.text("keys_intro", base="/v1"))
    keys_table = gr.Markdown(elem_id="api_keys")
    with gr.Row():
        key_label = tr(gr.Textbox(label=tr.text("key_label"), elem_id="key_label", max_length=80, scale=3),
                       label="key_label")
        key_create = tr(gr.Button(tr.text("key_create"), elem_id="key_create", scale=1), value="key_create")
    new_key = gr.Markdown(elem_id="new_key")
    with gr.Row():
        key_id = tr(gr.Number(label=tr.text("key_id"), precision=0, elem_id="key_id", scale=3), label="key_id")
        key_revoke = tr(gr.Button(tr.text("key_revoke"), elem_id="key_revoke", scale=1), value="key_revoke")

    tr(gr.Markdown(tr.text("danger_intro")), value="danger_intro")
    with gr.Row():
        confirm = tr(gr.Textbox(label=tr.text("confirm_password"), type="password", elem_id="delete_password",
                                scale=3), label="confirm_password")
        delete = tr(gr.Button(tr.text("delete_account"), variant="stop", elem_id="delete_account", scale=2),
                    value="delete_account")

    @guarded
    def on_backend(token_v, backend_v):
        service.user(token_v)
        models = service.choices.get(backend_v, [])
        return gr.update(choices=models, value=models[0] if models else None)

    @guarded
    def on_save(token_v, name_v, persona_v, backend_v, model_v):
        lang = lang_of(service, token_v)
        service.save_prefs(token_v, companion_name=name_v, persona=persona_v, backend=backend_v, model=model_v)
        return t("saved", lang)

    @guarded
    def on_export(token_v):
        lang = lang_of(service, token_v)
        path = service.export_file(token_v)
        return gr.update(value=str(path), visible=True), t("export_ready", lang)

    @guarded
    def on_delete(token_v, password_v):
        lang = lang_of(service, token_v)
        service.delete_account(token_v, password_v or "", extra_dirs=cache_dirs())
        return "", "", t("account_deleted", lang)

    @guarded
    def on_key_create(token_v, label_v):
        lang = lang_of(service, token_v)
        made = service.create_api_key(token_v, label_v or "")
        return keys_markdown(service, token_v, lang), t("key_created", lang, secret=made.key), ""

    @guarded
    def on_key_revoke(token_v, key_id_v):
        lang = lang_of(service, token_v)
        if key_id_v is None:
            raise ValueError("type the id of the key to revoke")
        info = service.revoke_api_key(token_v, int(key_id_v))
        return keys_markdown(service, token_v, lang), t("key_revoked", lang, id=info.id)

    key_create.click(on_key_create, [token, key_label], [keys_table, new_key, key_label], api_name="api_key_create")
    key_revoke.click(on_key_revoke, [token, key_id], [keys_table, new_key], api_name="api_key_revoke")
    backend.input(on_backend, [token, backend], model, api_visibility="private")
    save.click(on_save, [token, name, persona, backend, model], prefs_status, api_name="save_settings")
    export.click(on_export, [token], [download, export_status], api_name="export")
    deleted = delete.click(on_delete, [token, confirm], [token, confirm, notice], api_name="delete_account")

    def fill(token_v: str) -> list:
        p = service.prefs(token_v)
        models = service.choices.get(p["backend"], [])
        if p["model"] and p["model"] not in models:
            models = [p["model"], *models]
        lang = p.get("lang", "en")
        return [p["companion_name"], p["persona"], p["backend"], gr.update(choices=models, value=p["model"] or None),
                gr.update(visible=False, value=None), "", "", t("keys_intro", lang, base="/v1"),
                keys_markdown(service, token_v, lang), ""]

    def blank() -> list:
        return ["", "", gr.skip(), gr.skip(), gr.update(visible=False, value=None), "", "", gr.skip(), "", ""]

    return AccountParts(fill, blank, [name, persona, backend, model, download, export_status, confirm, keys_intro,
                                      keys_table, new_key], deleted)


def keys_markdown(service: WebService, token: str, lang: str) -> str:
    """The user's API keys as a table (their first characters only)."""
    if service.api_keys is None:
        return ""
    keys = service.list_api_keys(token)
    if not keys:
        return t("no_keys", lang)

    def when(ts: float | None) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"

    rows = [f"| {k.id} | `{k.prefix}…` | {t('key_active' if k.active else 'key_is_revoked', lang)} | "
            f"{when(k.created_at)} | {when(k.last_used_at)} | {k.label.replace('|', '/')} |" for k in keys]
    return "\n".join([t("keys_table", lang), *rows])
