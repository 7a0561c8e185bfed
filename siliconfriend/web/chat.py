"""The chat tab: streamed replies, stop, regenerate / retry, clear the screen, and beside each
reply what the companion remembered (date, S, R and why for each memory it used)."""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from .common import guard, lang_of
from .i18n import Translator, t
from .service import WebService

log = logging.getLogger("siliconfriend.web")

THINKING = "…"


@dataclass
class ChatParts:
    chatbot: gr.Chatbot
    message: gr.Textbox
    remembered: gr.Markdown
    view: gr.State          # the messages on screen (the server's copy)
    failed: gr.State        # the text of a message whose reply failed, for retry
    restore: Callable[[str], list]   # token -> values for ``outputs``
    outputs: list

    def blank(self, lang: str) -> list:
        return [[], "", t("remembered_empty", lang), {}, {}]


def _clip(text: str, n: int = 280) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def remembered_markdown(items: list[dict], lang: str) -> str:
    """The "what I remembered" text for one reply: one entry per memory used."""
    if not items:
        return t("remembered_none", lang)
    lines = []
    for it in items:
        day = it["day"] if not it["day"].startswith("1970") else "—"
        why = it["why"] or "—"
        lines.append(f"- **{day}** · {it['kind']} · S {it['strength']:g} · R {it['retention']:.2f} · "
                     f"#{it['id']}  \n  _{html.escape(why)}_  \n  > {html.escape(_clip(it['text']))}")
    return "\n".join(lines)


def turn_messages(query: str, reply: str, remembered: list[dict] | None, lang: str) -> list[dict]:
    out = [{"role": "user", "content": query}]
    if remembered is not None:
        out.append({"role": "assistant", "content": remembered_markdown(remembered, lang),
                    "metadata": {"title": f"🧠 {t('remembered', lang)} ({len(remembered)})", "status": "done"}})
    out.append({"role": "assistant", "content": reply})
    return out


def _used_of(turn: Any) -> list[dict] | None:
    """What a stored turn says it used, when the companion keeps that with the turn."""
    extra = getattr(turn, "extra", None) or {}
    used = extra.get("used") or extra.get("remembered")
    if isinstance(used, list) and all(isinstance(u, dict) for u in used):
        keys = {"id", "kind", "day", "strength", "retention", "why", "text"}
        return [{k: u.get(k, "" if k in ("why", "text", "kind", "day") else 0) for k in keys} for u in used]
    return None


def build_chat(service: WebService, tr: Translator, token: gr.BrowserState) -> ChatParts:
    guarded = guard(service)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            chatbot = tr(gr.Chatbot(label=tr.text("chat"), height=480, elem_id="chatbot",
                                    buttons=["copy"], feedback_options=None), label="chat")
            message = tr(gr.Textbox(label=tr.text("message"), placeholder=tr.text("message_ph"), lines=2,
                                    max_lines=8, elem_id="message", submit_btn=False), label="message",
                         placeholder="message_ph")
            with gr.Row():
                send = tr(gr.Button(tr.text("send"), variant="primary", elem_id="send"), value="send")
                stop = tr(gr.Button(tr.text("stop"), variant="stop", elem_id="stop"), value="stop")
                regen = tr(gr.Button(tr.text("regenerate"), elem_id="regenerate"), value="regenerate")
                clear = tr(gr.Button(tr.text("clear"), elem_id="clear"), value="clear")
            tr(gr.Markdown(tr.text("clear_note"), elem_classes=["sf-note"]), value="clear_note")
        with gr.Column(scale=2, min_width=260):
            tr(gr.Markdown(f"### {tr.text('remembered')}"), value="remembered")
            remembered = gr.Markdown(tr.text("remembered_empty"), elem_id="remembered",
                                     elem_classes=["sf-remembered"])
    # the server's copy of the screen and of a message to retry, each bound to the user it belongs
    # to: a state that reaches another user's handler (same browser tab, same API client) is empty
    view = gr.State({})
    failed = gr.State({})

    def mine(state: Any, user: str, key: str, empty: Any) -> Any:
        return state.get(key, empty) if isinstance(state, dict) and state.get("user") == user else empty

    def _run(token_v: str, user: str, start: Callable[[], Any], msgs: list, text: str) -> Iterator[tuple]:
        """Stream one reply into the last message of ``msgs``; on failure say why and keep ``text``."""
        lang = lang_of(service, token_v)
        screen = {"user": user, "messages": msgs}
        stream = None
        reply = ""
        error = None
        try:
            stream = start()
            shown = False
            for chunk in stream:
                reply += chunk
                msgs[-1] = {"role": "assistant", "content": reply + " ▌"}
                panel = gr.skip()
                if not shown and getattr(stream, "messages", None):   # the prompt is built: show what it used
                    panel, shown = remembered_markdown(service.remembered(stream.used), lang), True
                yield msgs, gr.skip(), panel, gr.skip(), screen
            result = stream.result
            error = getattr(result, "error", None)
        except (gr.Error, PermissionError):
            raise
        except Exception as exc:   # BackendError and friends: the user must read it
            log.warning("chat failed: %s", exc)
            error, result = str(exc) or type(exc).__name__, None
        finally:
            if stream is not None:
                service.finished(token_v, stream)
        if error:
            msgs[-1] = {"role": "assistant", "content": t("llm_error", lang, error=error)}
            yield msgs, text, gr.skip(), {"user": user, "text": text}, screen
            return
        final = getattr(result, "reply", None) or reply
        if getattr(result, "stopped", False) or getattr(stream, "stopped", False):
            final = f"{final} {t('stopped', lang)}".strip()
        used = service.remembered(getattr(result, "used", None) or [])
        query = msgs[-2]["content"] if len(msgs) >= 2 else ""
        msgs[-2:] = turn_messages(query, final, used, lang)
        yield msgs, gr.skip(), remembered_markdown(used, lang), {}, screen

    def _ask(msgs: list, query: str) -> list:
        """``msgs`` up to (not including) the last user message, then ``query`` and a placeholder."""
        last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=None)
        if last_user is not None and msgs[last_user].get("content") == query:
            msgs = msgs[:last_user]
        return msgs + [{"role": "user", "content": query}, {"role": "assistant", "content": THINKING}]

    @guarded
    def on_send(token_v: str, text: str, view_v: dict):
        user = service.user(token_v)
        text = (text or "").strip()
        if not text:
            yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        msgs = list(mine(view_v, user, "messages", [])) + [{"role": "user", "content": text},
                                                           {"role": "assistant", "content": THINKING}]
        yield msgs, "", gr.skip(), {}, {"user": user, "messages": msgs}
        yield from _run(token_v, user, lambda: service.respond(token_v, text), msgs, text)

    @guarded
    def on_regenerate(token_v: str, view_v: dict, failed_v: dict):
        user = service.user(token_v)
        lang = lang_of(service, token_v)
        msgs = list(mine(view_v, user, "messages", []))
        retry = mine(failed_v, user, "text", "")
        if retry:   # the last reply failed: send the kept message again
            msgs = _ask(msgs, retry)
            yield msgs, "", gr.skip(), {}, {"user": user, "messages": msgs}
            yield from _run(token_v, user, lambda: service.respond(token_v, retry), msgs, retry)
            return
        turns = service.today(token_v)
        if not turns:
            gr.Info(t("nothing_to_regen", lang))
            yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        msgs = _ask(msgs, turns[-1].query)
        yield msgs, gr.skip(), gr.skip(), {}, {"user": user, "messages": msgs}
        yield from _run(token_v, user, lambda: service.regenerate(token_v), msgs, "")

    @guarded
    def on_stop(token_v: str):
        service.stop(token_v)

    @guarded
    def on_clear(token_v: str):
        lang = lang_of(service, token_v)
        service.user(token_v)
        return [], t("remembered_empty", lang), {}, {}

    outputs = [chatbot, message, remembered, failed, view]
    send.click(on_send, [token, message, view], outputs, api_name="chat", concurrency_limit=4,
               concurrency_id="chat")
    message.submit(on_send, [token, message, view], outputs, api_visibility="private", concurrency_limit=4,
                   concurrency_id="chat")
    regen.click(on_regenerate, [token, view, failed], outputs, api_name="regenerate",
                concurrency_limit=4, concurrency_id="chat")
    chatbot.retry(on_regenerate, [token, view, failed], outputs, api_visibility="private",
                  concurrency_limit=4, concurrency_id="chat")
    chatbot.clear(on_clear, [token], [chatbot, remembered, failed, view], api_visibility="private")
    stop.click(on_stop, [token], None, api_name="stop", concurrency_limit=None)
    clear.click(on_clear, [token], [chatbot, remembered, failed, view], api_name="clear_screen",
                concurrency_limit=None)

    def restore(token_v: str) -> list:
        """Today's conversation, for a page load or a new login: values for ``outputs``."""
        lang = lang_of(service, token_v)
        user = service.user(token_v)
        msgs: list[dict] = []
        try:
            turns = service.today(token_v)
        except PermissionError:
            raise
        except Exception as exc:   # no companion yet (model missing...): an empty screen, logged
            log.warning("could not restore today's conversation: %s", exc)
            turns = []
        for turn in turns:
            msgs += turn_messages(turn.query, turn.response, _used_of(turn), lang)
        return [msgs, gr.skip(), t("remembered_empty", lang), {}, {"user": user, "messages": msgs}]

    return ChatParts(chatbot, message, remembered, view, failed, restore, outputs)
