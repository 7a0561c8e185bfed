"""What the Gradio handlers share: turning refusals into messages the user reads."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

import gradio as gr

from memory.bank import UnknownMemory
from memory.stores.base import StoreUnavailable

from ..accounts.users import AccountError
from ..i18n import say, t
from .service import NotLoggedIn, WebService

log = logging.getLogger("siliconfriend.web")


def lang_of(service: WebService, token: str | None) -> str:
    try:
        return service.account.prefs(token)["lang"]
    except NotLoggedIn:
        return service.settings.lang


TOAST_SECONDS = 4  # short: a toast is drawn over the header's language switch while it is up


def notify(message: str, lang: str = "en", *, level: str = "warning") -> None:
    """A note that pops up in the page, in its language (a log line outside a request, e.g. in tests)."""
    try:
        if level == "info":
            gr.Info(say(message, lang), title=t("note_title", lang), duration=TOAST_SECONDS)
        else:
            gr.Warning(say(message, lang), title=t("warning_title", lang), duration=TOAST_SECONDS)
    except Exception:  # no request context
        log.info("%s", message)


def _refusal(service: WebService, token: Any, exc: Exception) -> gr.Error:
    lang = lang_of(service, token if isinstance(token, str) else None)
    if isinstance(exc, NotLoggedIn):
        return gr.Error(t("login_first", lang), title="🔒", print_exception=False)
    message = str(exc.args[0]) if isinstance(exc, UnknownMemory) and exc.args else str(exc)
    return gr.Error(say(message, lang), title=t("error_title", lang), print_exception=False)


def guard(service: WebService) -> Callable[[Callable], Callable]:
    """Decorate a handler whose first argument is the session token: NotLoggedIn, AccountError,
    ValueError and UnknownMemory become a gr.Error the user reads; anything else is logged and
    shown as a short message. Generator handlers stay generators; the signature is kept (Gradio
    reads it for gr.Request / gr.SelectData parameters)."""
    expected = (NotLoggedIn, AccountError, ValueError, UnknownMemory, StoreUnavailable)

    def as_gr_error(fn: Callable, args: tuple, exc: Exception) -> gr.Error:
        if isinstance(exc, expected):
            return _refusal(service, args[0] if args else None, exc)
        log.exception("handler %s failed", fn.__name__)
        lang = lang_of(service, args[0] if args and isinstance(args[0], str) else None)
        return gr.Error(t("server_error", lang, name=type(exc).__name__), title=t("error_title", lang))

    def decorate(fn: Callable) -> Callable:
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except gr.Error:
                    raise
                except Exception as exc:
                    raise as_gr_error(fn, args, exc) from None

            return gen_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:
                raise as_gr_error(fn, args, exc) from None

        return wrapper

    return decorate
