"""The settings and account tab: the companion's name, persona, backend and model; export all
my data; delete my account and every trace of it."""
from __future__ import annotations

from dataclasses import dataclass
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

    backend.input(on_backend, [token, backend], model, api_visibility="private")
    save.click(on_save, [token, name, persona, backend, model], prefs_status, api_name="save_settings")
    export.click(on_export, [token], [download, export_status], api_name="export")
    deleted = delete.click(on_delete, [token, confirm], [token, confirm, notice], api_name="delete_account")

    def fill(token_v: str) -> list:
        p = service.prefs(token_v)
        models = service.choices.get(p["backend"], [])
        if p["model"] and p["model"] not in models:
            models = [p["model"], *models]
        return [p["companion_name"], p["persona"], p["backend"], gr.update(choices=models, value=p["model"] or None),
                gr.update(visible=False, value=None), "", ""]

    def blank() -> list:
        return ["", "", gr.skip(), gr.skip(), gr.update(visible=False, value=None), "", ""]

    return AccountParts(fill, blank, [name, persona, backend, model, download, export_status, confirm], deleted)
