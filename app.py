"""SiliconFriend's web app: ``python app.py [--host H] [--port P] [--share]``.

A thin Gradio Blocks layer: log in / sign up, then three tabs (chat, memory, settings & account).
The session token lives in the browser (``gr.BrowserState``, encrypted) and is the first input of
every handler, which turns it into the user on the server (``AccountService.user``); no handler takes
a user name from the client. Data lives under ``$SILICONFRIEND_HOME``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path

import gradio as gr
from fastapi import Request

from siliconfriend.accounts.keys import ApiKeys
from siliconfriend.accounts.users import AccountError
from siliconfriend.api.http_server import stop_on_sigterm, timed_servers
from siliconfriend.api.routes import mount
from siliconfriend.config import Settings
from siliconfriend.core.private_files import make_private
from siliconfriend.factory import build_api_service, build_web_service, demo_model_hint
from siliconfriend.i18n import LANGS, Translator, say, t
from siliconfriend.web.account_page import EXPORT_ROUTE, build_account
from siliconfriend.web.chat import build_chat
from siliconfriend.web.client import BrowserCookie, browser_id, request_client
from siliconfriend.web.common import guard
from siliconfriend.web.memory_page import build_memory
from siliconfriend.web.service import WebService

log = logging.getLogger("siliconfriend.web")

CSS = """
.sf-remembered { font-size: 0.9em; max-height: 560px; overflow-y: auto; }
#message_counter { text-align: right; margin-top: -0.4em; }
.sf-remembered blockquote { margin: 0.2em 0 0.6em 0; opacity: 0.85; }
.sf-note { font-size: 0.85em; opacity: 0.75; }
#sf-header { align-items: center; }
#mem_table th, #mem_table th * { word-break: keep-all !important; overflow-wrap: normal !important; hyphens: manual; }
"""


def toast_titles_js() -> str:
    """Gradio titles each group of toasts with its type in English ("Warning", "Info", "Error"),
    whatever title a toast was given: this puts the page's own word there, in the language the
    header's switch shows, as the toasts appear."""
    words = {
        lang: {"warning": t("warning_title", lang), "info": t("note_title", lang), "error": t("error_title", lang)}
        for lang in LANGS
    }
    return (
        "<script>(() => {const words = " + json.dumps(words, ensure_ascii=False) + ";"
        "const lang = () => {const c = document.querySelector('#lang input:checked');"
        " return c && words[c.value] ? c.value : document.documentElement.dataset.sfLang || 'en';};"
        "const fix = () => document.querySelectorAll('.toast-title').forEach((el) => {"
        " const type = Object.keys(words.en).find((k) => el.classList.contains(k));"
        " const node = [...el.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());"
        " const word = type && words[lang()][type];"
        " if (node && word && node.textContent.trim() !== word) node.textContent = word + ' ';});"
        "new MutationObserver(fix).observe(document.documentElement, {subtree: true, childList: true,"
        " characterData: true});})();</script>"
    )


def api_routes(service: WebService) -> list:
    """The OpenAI-compatible API and the memory API under /v1, served by the web app's own server
    with the same companion, bank, accounts and keys (the keys section of the account page shows
    the keys the API takes)."""
    if service.account.api_keys is None:
        service.account.api_keys = ApiKeys(service.accounts)
    api = build_api_service(
        service.settings,
        accounts=service.accounts,
        bank=service.bank,
        companion=lambda: service.companion,
        keys=service.account.api_keys,
        clock=service.clock,
    )
    return [mount(api)]


class AppHandlers:
    """Entering and leaving: the handlers of the header and the login box, as named methods."""

    def __init__(self, service: WebService, chat, memory, account):
        self.service, self.chat, self.memory, self.account = service, chat, memory, account

    def _lang(self, lang_v: str) -> str:
        return lang_v if lang_v in LANGS else self.service.settings.lang

    def enter(self, token_v: str, lang_v: str, owner_v: str = "") -> list:
        """The page for whoever holds ``token_v``: the login box, or their chat, memories and
        settings (today's conversation back on screen). ``owner_v``: whose draft the message box
        holds (the tab's last user): a draft is kept across a session end only for that same user,
        so the next person to log in on the tab never sees it. The last value is the new owner."""
        service = self.service
        user = service.accounts.user_for(token_v)
        hide = gr.update(visible=False)
        if user is None:
            return [
                hide,
                gr.update(visible=True),
                hide,
                hide,
                gr.skip(),
                gr.update(selected="chat"),
                *self.chat.blank(self._lang(lang_v)),
                *self.memory.blank(self._lang(lang_v)),
                *self.account.blank(),
                gr.skip(),
            ]
        prefs = service.account.prefs(token_v)
        chat = self.chat.restore(token_v)
        if owner_v and owner_v != user:  # another person's draft: not for this user's eyes
            chat[self.chat.outputs.index(self.chat.message)] = ""
        return [
            hide,
            hide,
            gr.update(visible=True),
            gr.update(visible=True),
            prefs["lang"],
            gr.update(selected="chat"),
            *chat,
            *self.memory.refresh(token_v),
            *self.account.fill(token_v),
            user,
        ]

    def in_lang(self, token_v: str, lang_v: str, text_v: str, export_v: str) -> list:
        """After a language switch: the counter, today's conversation (the titles above the replies
        and what each remembered), the API keys section and a pending export link, drawn in the
        new language."""
        lang = self._lang(lang_v)
        counter = self.chat.handlers.count(token_v, text_v, lang)
        if self.service.accounts.user_for(token_v) is None:
            return [counter] + [gr.skip()] * (len(self.chat.outputs) + 3)
        return [
            counter,
            *self.chat.restore(token_v),
            *self.account.handlers.keys_section(token_v),
            self.account.handlers.export_in(export_v, lang),
        ]

    def relabel(self, tr: Translator, token_v: str, lang_v: str) -> list:
        lang_v = self._lang(lang_v)
        user = self.service.accounts.user_for(token_v)
        return [*tr.updates(lang_v), t("welcome", lang_v, user=user) if user else ""]

    def require_session(self, token_v: str) -> None:
        """Before an action: refused (and nothing else runs) when the tab's session ended, in
        another tab or by expiry. It has no outputs, so nothing on the page turns into an error."""
        if self.service.accounts.user_for(token_v) is None:
            raise gr.Error(t("login_first", self.service.settings.lang), title="🔒", print_exception=False)

    def session_lost(self, token_v: str, lang_v: str) -> list:
        """After a refused action: the login box, with a note; what was typed stays in its box."""
        hide = gr.update(visible=False)
        return [hide, gr.update(visible=True), hide, hide, t("session_lost", self._lang(lang_v)), ""]

    def login(self, name: str, pw: str, lang_v: str, request: gr.Request = None):
        client = request_client(request, self.service.trusted_proxies)
        try:
            session = self.service.account.login(name, pw, client=client)
        except AccountError as exc:
            return "", "", f"⚠️ {say(str(exc), self._lang(lang_v))}"
        return session.token, "", ""

    def signup(self, name: str, pw: str, lang_v: str):
        try:
            session = self.service.account.signup(name, pw)
        except AccountError as exc:
            return "", gr.skip(), f"⚠️ {say(str(exc), self._lang(lang_v))}"
        if lang_v in LANGS:
            self.service.account.save_prefs(session.token, lang=lang_v)
        return session.token, "", ""

    def logout(self, token_v: str, lang_v: str):
        """Log out; the message box is emptied (the next person at this browser does not see it)."""
        self.service.logout(token_v)
        return "", t("logged_out", self._lang(lang_v)), ""

    def set_lang(self, token_v: str, lang_v: str) -> None:
        if self.service.accounts.user_for(token_v) is not None and lang_v in LANGS:
            self.service.account.save_prefs(token_v, lang=lang_v)

    def memory_in_lang(self, token_v: str, lang_v: str) -> list:
        """The memory page again after a language switch (its table and plot are drawn in it)."""
        if self.service.accounts.user_for(token_v) is None:
            return [gr.skip()] * len(self.memory.outputs)
        return self.memory.refresh(token_v)


def build_app(service: WebService) -> gr.Blocks:
    settings = service.settings
    tr = Translator(settings.lang)
    guarded = guard(service)
    with gr.Blocks(title="SiliconFriend", delete_cache=(900, 1800)) as demo:
        token = gr.BrowserState("", storage_key="siliconfriend_session", secret=service.accounts.browser_secret())
        with gr.Row(elem_id="sf-header"):
            with gr.Column(scale=4):
                tr(gr.Markdown(tr.text("title")), value="title")
                tr(gr.Markdown(tr.text("tagline")), value="tagline")
            whoami = gr.Markdown(elem_id="whoami")
            lang = tr(
                gr.Radio(
                    [(name, code) for code, name in LANGS.items()],
                    value=tr.lang,
                    label=tr.text("language"),
                    elem_id="lang",
                    scale=1,
                    min_width=230,
                ),
                label="language",
            )
            logout = tr(gr.Button(tr.text("logout"), visible=False, elem_id="logout", scale=0), value="logout")

        loading = tr(gr.Markdown(tr.text("loading")), value="loading")
        with gr.Column(visible=False) as login_box:
            tr(gr.Markdown(tr.text("login_intro")), value="login_intro")
            username = tr(gr.Textbox(label=tr.text("username"), elem_id="username", max_length=64), label="username")
            password = tr(
                gr.Textbox(label=tr.text("password"), type="password", elem_id="password", max_length=256),
                label="password",
            )
            with gr.Row():
                login = tr(gr.Button(tr.text("login"), variant="primary", elem_id="login"), value="login")
                signup = tr(
                    gr.Button(tr.text("signup"), elem_id="signup", visible=settings.signup_open), value="signup"
                )
            notice = gr.Markdown(elem_id="login_message")

        quiet = {"api_visibility": "private", "show_progress": "hidden"}
        gate_handlers = AppHandlers(service, None, None, None)
        lost_outputs = [loading, login_box, None, logout, notice, whoami]  # main_box: below

        def gate(trigger):
            """An action behind the session check: when the session ended elsewhere, the page goes
            to the login box (typed text kept) instead of turning its outputs into errors."""

            def on(fn, inputs, outputs, **kwargs):
                check = trigger(gate_handlers.require_session, [token], None, concurrency_limit=None, **quiet)
                check.failure(gate_handlers.session_lost, [token, lang], lost_outputs, **quiet)
                return check.success(fn, inputs, outputs, **kwargs)

            return on

        with gr.Column(visible=False) as main_box:
            lost_outputs[2] = main_box
            with gr.Tabs(selected="chat") as tabs:
                with tr(gr.Tab(tr.text("tab_chat"), id="chat", elem_id="tab_chat"), label="tab_chat"):
                    chat = build_chat(service, tr, token, gate, lang=lang)
                with tr(
                    gr.Tab(tr.text("tab_memory"), id="memory", elem_id="tab_memory"), label="tab_memory"
                ) as memory_tab:
                    memory = build_memory(service, tr, token, gate)
                with tr(gr.Tab(tr.text("tab_account"), id="account", elem_id="tab_account"), label="tab_account"):
                    account = build_account(service, tr, token, notice, cache_dirs=lambda: [Path(demo.GRADIO_CACHE)])

        h = AppHandlers(service, chat, memory, account)
        draft_owner = gr.State("")  # whose words the message box holds (see AppHandlers.enter)
        enter_outputs = [
            loading,
            login_box,
            main_box,
            logout,
            lang,
            tabs,
            *chat.outputs,
            *memory.outputs,
            *account.outputs,
            draft_owner,
        ]
        relabel_outputs = [*tr.components, whoami]

        def relabel(token_v: str, lang_v: str) -> list:
            return h.relabel(tr, token_v, lang_v)

        def chain(event):
            return (
                event.then(h.enter, [token, lang, draft_owner], enter_outputs, **quiet)
                .then(relabel, [token, lang], relabel_outputs, **quiet)
                .then(chat.handlers.count, [token, chat.message, lang], chat.counter, **quiet)
                .then(chat.handlers.intro, [token, lang], chat.chatbot, **quiet)
            )

        chain(demo.load(lambda: None, None, None, api_visibility="private"))
        chain(
            login.click(
                h.login, [username, password, lang], [token, password, notice], api_name="login", concurrency_limit=4
            )
        )
        chain(
            password.submit(
                h.login,
                [username, password, lang],
                [token, password, notice],
                api_visibility="private",
                concurrency_limit=4,
            )
        )
        chain(
            signup.click(
                h.signup, [username, password, lang], [token, password, notice], api_name="signup", concurrency_limit=4
            )
        )
        chain(logout.click(h.logout, [token, lang], [token, notice, chat.message], api_name="logout"))
        chain(account.deleted)
        lang.input(h.set_lang, [token, lang], None, api_visibility="private").then(
            relabel, [token, lang], relabel_outputs, **quiet
        ).then(h.memory_in_lang, [token, lang], memory.outputs, **quiet).then(
            h.in_lang,
            [token, lang, chat.message, account.export_status],
            [chat.counter, *chat.outputs, *account.keys_outputs, account.export_status],
            **quiet,
        ).then(chat.handlers.intro, [token, lang], chat.chatbot, **quiet)
        gate(memory_tab.select)(guarded(memory.refresh), [token], memory.outputs, api_visibility="private")

        @guarded
        def whoami_api(token_v: str) -> str:
            """The user name of a session token (refused without a valid one)."""
            return service.account.user(token_v)

        gr.api(whoami_api, api_name="whoami")
    demo.queue(default_concurrency_limit=2)
    demo.sf_service = service
    return demo


def serve_exports(app, service: WebService) -> None:
    """``GET /sf-export/<ticket>``: the export the ticket names, once, while its session lasts."""
    from fastapi.responses import PlainTextResponse, Response

    def download(ticket: str, request: Request):
        found = service.exports.take_export(ticket, browser_id(request))
        if found is None:
            return PlainTextResponse(
                "This download link has expired, was already used, or belongs to another browser or session: "
                "export again from the settings tab.",
                status_code=404,
            )
        name, body = found
        return Response(
            body,
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
        )

    app.add_api_route(EXPORT_ROUTE + "/{ticket}", download, methods=["GET"], include_in_schema=False)


def launch(
    demo: gr.Blocks,
    *,
    host: str,
    port: int,
    share: bool = False,
    routes: list | None = None,
    prevent_thread_lock: bool = False,
    **kwargs,
):
    """Start serving; ``share`` is the only way to get a public link (never by default).
    ``routes`` (e.g. ``api_routes(service)``) are added to Gradio's FastAPI app before its own.
    The server believes no proxy headers itself: the client's address is worked out per request
    from ``trusted_proxies`` (``web/client.py``)."""
    os.environ["FORWARDED_ALLOW_IPS"] = ""  # uvicorn would otherwise trust X-Forwarded-For from 127.0.0.1
    from starlette.middleware import Middleware

    # the browser cookie an export link is bound to (web/client.py)
    app_kwargs: dict = {"middleware": [Middleware(BrowserCookie)]}
    if routes:
        app_kwargs["routes"] = list(routes)
    with timed_servers():  # Gradio's server gets the connection limits (api/http_server.py)
        out = demo.launch(
            server_name=host,
            server_port=port,
            share=share,
            css=CSS,
            head=toast_titles_js(),
            show_error=True,
            footer_links=["api"],
            app_kwargs=app_kwargs,
            prevent_thread_lock=True,
            **kwargs,
        )
    service = getattr(demo, "sf_service", None)
    if service is not None:
        serve_exports(demo.server_app, service)
    if not prevent_thread_lock:
        demo.block_thread()
    return out


def _warm_up(service: WebService) -> None:
    """Build the companion (and load the model) in the background, so the first reply is quick."""
    try:
        service.companion  # noqa: B018 - the property builds it
    except Exception as exc:  # shown again, clearly, in the chat when someone writes
        log.warning("the companion could not be built yet: %s", exc)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="SiliconFriend web app")
    parser.add_argument("--host", help="address to listen on (default: $GRADIO_SERVER_NAME, settings.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: $GRADIO_SERVER_PORT, settings.port, 7860)")
    parser.add_argument("--home", help="data folder (default: $SILICONFRIEND_HOME or ~/.siliconfriend)")
    parser.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = Settings.load(home=args.home)
    make_private(settings.home)  # umask 077: the data home and everything in it 0700 / 0600
    host, port = settings.web_address
    host, port = args.host or host, args.port or port
    service = build_web_service(settings)
    service.exports.clear_exports()  # left by a previous run
    demo = build_app(service)
    threading.Thread(target=_warm_up, args=(service,), daemon=True).start()
    print(
        f"SiliconFriend: data in {settings.home}; open http://{host}:{port} "
        f"(OpenAI-compatible API: http://{host}:{port}/v1)",
        file=sys.stderr,
    )
    hint = demo_model_hint(settings)
    if hint:
        log.warning("%s", hint)
    # SIGTERM (a service manager's stop) ends the app as Ctrl-C does: Gradio's server stops, then
    # the stores are closed and their write-ahead logs emptied (otherwise the process just dies)
    stop_on_sigterm()
    try:
        launch(demo, host=host, port=port, share=args.share, routes=api_routes(service))
    finally:
        service.bank.close()
        service.accounts.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
