"""The chat tab: streamed replies, stop, regenerate / retry, clear the screen, and beside each
reply what the companion remembered (date, S, R and why for each memory it used, and the lines of
today's conversation that were in the prompt).

``ChatHandlers`` holds the handlers as named methods (tests call them without a browser);
``build_chat`` lays out the components and wires the events to them.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from memory.bank import TODAY
from memory.records import MemoryRecord
from memory.shown import NOT_FROM_MEMORY, UsedMemory, stored_used

from ..config import DEMO_MODEL
from ..core.companion import MAX_MESSAGE_CHARS, MEMORY_CHARS, ReplyStream, TurnResult
from ..i18n import Translator, say, t, why_words
from .common import guard, lang_of, notify
from .service import WebService

log = logging.getLogger("siliconfriend.web")

THINKING = "…"


def _clip(text: str, n: int = 280) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def shown(text: str) -> str:
    """A person's own words as the chat shows them: literally (``<img src=x>`` is text, not an image)."""
    return html.escape(text or "", quote=False)


# what a reply's markdown would make a link or an image of: markdown images and links, and bare
# addresses (the chat's markdown turns "https://..." and "www...." into links of their own)
BREAK = re.compile(r"<br\s*/?>", re.I)
_MD_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?[^)\n]*\)")
_MD_LINK = re.compile(r"\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?[^)\n]*\)")
_ADDRESS = re.compile(
    r"(?:(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://|(?<![a-z0-9.-])www\.|(?<![a-z0-9])mailto:)[^\s<>`()\"']*[^\s<>`()\"'.,;:!?。，；：！？）]",
    re.I,
)


def reply_shown(text: str) -> str:
    """A model's reply as the chat shows it: its markdown kept (lists, bold, code), but no link
    to click and nothing loaded from elsewhere. A small model invents addresses; a link or an
    image in a reply would send a person, or their browser, to one. So HTML is text, a markdown
    image or link becomes its words and its address, and every address is shown in a code
    span: visible, copyable, never a link, never fetched."""
    text = BREAK.sub("\n", text or "")  # a model's line break in HTML (in its tables) is a line break
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_IMAGE.sub(lambda m: f"{m[1]} ({m[2]})" if m[1].strip() else f"({m[2]})", text)
    text = _MD_LINK.sub(lambda m: f"{m[1]} ({m[2]})" if m[2] else m[1], text)
    return _ADDRESS.sub(lambda m: f"`{m[0]}`", text)


def remembered_markdown(items: list[UsedMemory], lang: str) -> str:
    """The "what I remembered" text for one reply: the memories retrieved, then the lines of
    today's conversation that were in the prompt."""
    memories = [it for it in items if it.retrieved]
    today = [it for it in items if it.kind == TODAY]
    made_up = [it for it in items if it.kind == NOT_FROM_MEMORY]
    lines = []
    for it in memories:
        day = it.day if not it.day.startswith("1970") else "—"
        why = why_words(it.why, lang) or "—"
        lines.append(
            f"- **{day}** · {t('kind_' + it.kind, lang)} · {t('tier_' + (it.tier or 'active'), lang)} · "
            f"S {it.strength:g} · R {it.retention:.2f} · #{it.id}  \n  _{html.escape(why)}_  \n"
            f"  > {reply_shown(_clip(it.text))}"
        )
    if not memories:
        lines.append(t("remembered_none_today" if today else "remembered_none", lang))
    if today:
        lines.append(f"\n**{t('today_lines_1' if len(today) == 1 else 'today_lines', lang, n=len(today))}**")
        lines += [f"- #{it.id} {reply_shown(_clip(it.text, 160))}" for it in today]
    for it in made_up:  # names the reply used as if remembered, found in none of the above
        lines.append(f"\n⚠️ {t('not_from_memory', lang, names=html.escape(_clip(it.text, 160)))}")
    return "\n".join(lines)


def remembered_title(items: list[UsedMemory], lang: str) -> str:
    memories = sum(1 for it in items if it.retrieved)
    today = sum(1 for it in items if it.kind == TODAY)
    title = f"🧠 {t('remembered', lang)} ({memories})"
    return f"{title} · {t('today_short', lang, n=today)}" if today else title


def turn_messages(query: str, reply: str, remembered: list[UsedMemory] | None, lang: str) -> list[dict]:
    out: list[dict[str, Any]] = [{"role": "user", "content": shown(query)}]
    if remembered is not None:
        out.append(
            {
                "role": "assistant",
                "content": remembered_markdown(remembered, lang),
                "metadata": {"title": remembered_title(remembered, lang), "status": "done"},
            }
        )
    out.append({"role": "assistant", "content": reply_shown(reply)})
    return out


def stored_remembered(turn: MemoryRecord) -> list[UsedMemory] | None:
    """The "what I remembered" entries a stored turn keeps, or None for a turn stored before they
    were kept."""
    return stored_used(turn.extra or {})


def counter_text(text: str | None, lang: str = "en") -> str:
    n = len(text or "")
    note = t("counter", lang, n=f"{n:,}", limit=f"{MAX_MESSAGE_CHARS:,}")
    return f"⚠️ {note}" if n > MAX_MESSAGE_CHARS else note


class ChatHandlers:
    """Every handler takes the session token first and yields / returns values for ``OUTPUTS``
    (chatbot, message box, remembered panel, failed-message state, screen state)."""

    OUTPUTS = ("chatbot", "message", "remembered", "failed", "view")

    def __init__(self, service: WebService):
        self.service = service

    # -- the server's copy of the screen, bound to its user -----------------------------------
    @staticmethod
    def mine(state: Any, user: str, key: str, empty: Any) -> Any:
        """A state that reaches another user's handler (same tab, same API client) is empty."""
        return state.get(key, empty) if isinstance(state, dict) and state.get("user") == user else empty

    def _run(self, token: str, user: str, start: Callable[[], ReplyStream], msgs: list, text: str) -> Iterator[tuple]:
        """Stream one reply into the last message of ``msgs``; on failure say why and keep ``text``."""
        service = self.service
        lang = lang_of(service, token)
        screen = {"user": user, "messages": msgs}
        stream: ReplyStream | None = None
        result: TurnResult | None = None
        reply = ""
        error = None
        try:
            stream = start()
            ahead = service.chat.ahead(token)
            if ahead:  # the model answers one reply at a time: say where this one stands
                msgs[-1] = {"role": "assistant", "content": t("waiting_model", lang, n=ahead)}
                yield msgs, gr.skip(), gr.skip(), gr.skip(), screen
            elif days := service.chat.days_to_summarise(token):  # the day's first message waits for them
                msgs[-1] = {"role": "assistant", "content": t("looking_back", lang, n=len(days))}
                yield msgs, gr.skip(), gr.skip(), gr.skip(), screen
            shown_panel = False
            for chunk in stream:
                reply += chunk
                msgs[-1] = {"role": "assistant", "content": reply_shown(reply) + " ▌"}
                panel = gr.skip()
                if not shown_panel and stream.messages:  # the prompt is built
                    panel = remembered_markdown(self._entries(stream), lang)
                    shown_panel = True
                yield msgs, gr.skip(), panel, gr.skip(), screen
            result = stream.result
            error = result.error if result is not None else None
        except GeneratorExit:  # the page went away mid-reply (a reload, a closed tab): stopped, as Stop does
            if stream is not None:
                stream.stop()
                chunks = iter(stream)
                if isinstance(chunks, Generator):
                    chunks.close()  # the turn is stored now, with what came so far, marked as stopped
            raise
        except (gr.Error, PermissionError):
            raise
        except Exception as exc:  # BackendError and friends: the user must read it
            log.warning("chat failed: %s", exc)
            error, result = str(exc) or type(exc).__name__, None
        finally:
            if stream is not None:
                service.chat.finished(token, stream)
        if error:
            msgs[-1] = {"role": "assistant", "content": t("llm_error", lang, error=say(error, lang))}
            yield msgs, text, gr.skip(), {"user": user, "text": text}, screen
            return
        final = (result.reply if result is not None else "") or reply
        if (result is not None and result.stopped) or (stream is not None and stream.stopped):
            final = f"{final} {t('stopped', lang)}".strip()
        used = self._entries(result) if result is not None else []
        asked = msgs[-2] if len(msgs) >= 2 else {"role": "user", "content": ""}  # already as shown
        msgs[-2:] = [asked, *turn_messages("", final, used, lang)[1:]]
        yield msgs, gr.skip(), remembered_markdown(used, lang), {}, screen

    def _entries(self, source: ReplyStream | TurnResult) -> list[UsedMemory]:
        """The panel's entries of a stream or a result: memories used, today's lines, and the
        names of the finished reply that were not from memory."""
        made_up = source.not_from_memory if isinstance(source, TurnResult) else []
        return [
            *([UsedMemory.not_from_memory(made_up)] if made_up else []),
            *self.service.chat.remembered(source.used),
            *(UsedMemory.of_today(r, MEMORY_CHARS) for r in source.today),
        ]

    @staticmethod
    def _ask(msgs: list, query: str) -> list:
        """``msgs`` up to (not including) the last user message, then ``query`` and a placeholder."""
        last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=None)
        if last_user is not None and msgs[last_user].get("content") == shown(query):
            msgs = msgs[:last_user]
        return msgs + [{"role": "user", "content": shown(query)}, {"role": "assistant", "content": THINKING}]

    # -- the handlers -------------------------------------------------------------------------
    def send(self, token_v: str, text: str, view_v: dict):
        """Send the message in the box. An empty or too long one is refused with a note, and
        stays in the box."""
        service = self.service
        user = service.account.user(token_v)
        try:
            text = service.chat.check_message(text)
        except ValueError as exc:
            notify(str(exc), lang_of(service, token_v))
            yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        msgs = list(self.mine(view_v, user, "messages", [])) + [
            {"role": "user", "content": shown(text)},
            {"role": "assistant", "content": THINKING},
        ]
        yield msgs, "", gr.skip(), {}, {"user": user, "messages": msgs}
        yield from self._run(token_v, user, lambda: service.chat.respond(token_v, text), msgs, text)

    def regenerate(self, token_v: str, view_v: dict, failed_v: dict):
        service = self.service
        user = service.account.user(token_v)
        lang = lang_of(service, token_v)
        msgs = list(self.mine(view_v, user, "messages", []))
        retry = self.mine(failed_v, user, "text", "")
        if retry:  # the last reply failed: send the kept message again
            msgs = self._ask(msgs, retry)
            yield msgs, "", gr.skip(), {}, {"user": user, "messages": msgs}
            yield from self._run(token_v, user, lambda: service.chat.respond(token_v, retry), msgs, retry)
            return
        turns = service.chat.today(token_v)
        if not turns:
            notify(t("nothing_to_regen", lang), lang, level="info")
            yield gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        msgs = self._ask(msgs, turns[-1].query)
        yield msgs, gr.skip(), gr.skip(), {}, {"user": user, "messages": msgs}
        yield from self._run(token_v, user, lambda: service.chat.regenerate(token_v), msgs, "")

    def stop(self, token_v: str) -> None:
        self.service.chat.stop(token_v)

    def clear(self, token_v: str) -> list:
        lang = lang_of(self.service, token_v)
        self.service.account.user(token_v)
        return [[], t("remembered_empty", lang), {}, {}]

    def count(self, token_v: str, text: str, lang_v: str | None = None) -> str:
        """The counter under the message box, in the page's language ``lang_v`` (no session
        needed: it only counts)."""
        return counter_text(text, lang_v if lang_v in ("en", "zh") else lang_of(self.service, token_v))

    def intro(self, token_v: str, lang_v: str | None = None) -> Any:
        """What the empty chat says before the first message: when the user's model is the
        packaged demo model, that it is one (plainly, in the chat's language), else nothing."""
        lang = lang_v if lang_v in ("en", "zh") else lang_of(self.service, token_v)
        try:
            prefs = self.service.account.prefs(token_v)
        except PermissionError:
            return gr.update(placeholder=None)
        demo = (prefs["backend"], prefs["model"]) == DEMO_MODEL
        return gr.update(placeholder=t("demo_model", lang) if demo else None)

    def restore(self, token_v: str) -> list:
        """Today's conversation, for a page load or a new login: values for ``OUTPUTS``. The
        message box is left as it is (a message typed before a re-login is kept)."""
        service = self.service
        lang = lang_of(service, token_v)
        user = service.account.user(token_v)
        msgs: list[dict] = []
        try:
            turns = service.chat.today(token_v)
        except PermissionError:
            raise
        except Exception as exc:  # no companion yet (model missing...): an empty screen, logged
            log.warning("could not restore today's conversation: %s", exc)
            turns = []
        for turn in turns:
            reply = turn.response
            if (turn.extra or {}).get("stopped"):
                reply = f"{reply} {t('stopped', lang)}".strip()
            msgs += turn_messages(turn.query, reply, stored_remembered(turn), lang)
        # the panel shows what the last reply remembered, as it did before the reload
        last = stored_remembered(turns[-1]) if turns else None
        panel = remembered_markdown(last, lang) if last is not None else t("remembered_empty", lang)
        return [msgs, gr.skip(), panel, {}, {"user": user, "messages": msgs}]

    @staticmethod
    def blank(lang: str) -> list:
        """Logged out: an empty screen; the message box keeps what was typed."""
        return [[], gr.skip(), t("remembered_empty", lang), {}, {}]


@dataclass
class ChatParts:
    handlers: ChatHandlers
    chatbot: gr.Chatbot
    message: gr.Textbox
    outputs: list
    counter: gr.Markdown

    def restore(self, token: str) -> list:
        return self.handlers.restore(token)

    def blank(self, lang: str) -> list:
        return self.handlers.blank(lang)


def ungated(trigger: Callable) -> Callable:
    return trigger


def build_chat(
    service: WebService,
    tr: Translator,
    token: gr.BrowserState,
    gate: Callable[[Callable], Callable] = ungated,
    lang: Any = None,
) -> ChatParts:
    """``lang``: the page's language switch (the counter follows it). ``gate(trigger)``: the
    trigger, behind a check that the tab's session still holds (see
    app.py: a lost one sends the page to the login box, the typed text kept)."""
    guarded = guard(service)
    handlers = ChatHandlers(service)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(
                show_label=False, height=480, elem_id="chatbot", buttons=["copy"], feedback_options=None
            )
            # lines=1 grows up to max_lines: Enter sends, Shift+Enter starts a new line
            message = tr(
                gr.Textbox(
                    label=tr.text("message"),
                    placeholder=tr.text("message_ph"),
                    lines=1,
                    max_lines=8,
                    elem_id="message",
                    submit_btn=False,
                ),
                label="message",
                placeholder="message_ph",
            )
            counter = gr.Markdown(counter_text("", tr.lang), elem_id="message_counter", elem_classes=["sf-note"])
            with gr.Row():
                send = tr(gr.Button(tr.text("send"), variant="primary", elem_id="send"), value="send")
                stop = tr(gr.Button(tr.text("stop"), variant="stop", elem_id="stop"), value="stop")
                regen = tr(gr.Button(tr.text("regenerate"), elem_id="regenerate"), value="regenerate")
                clear = tr(gr.Button(tr.text("clear"), elem_id="clear"), value="clear")
            tr(gr.Markdown(tr.text("clear_note"), elem_classes=["sf-note"]), value="clear_note")
        with gr.Column(scale=2, min_width=260):
            tr(gr.Markdown(f"### {tr.text('remembered')}"), value="remembered_h")
            # not relabelled on its own: the page (restore, blank, a language switch's restore)
            # fills it in the page's language, the last reply's "what I remembered" included
            remembered = gr.Markdown(tr.text("remembered_empty"), elem_id="remembered", elem_classes=["sf-remembered"])
    view = gr.State({})
    failed = gr.State({})

    outputs = [chatbot, message, remembered, failed, view]
    send_fn, regen_fn = guarded(handlers.send), guarded(handlers.regenerate)
    # a message sent while a reply streams is sent once it ends ("always_last": Gradio's default
    # ignored it without a word); it waits in the box meanwhile
    sending = {"concurrency_limit": 4, "concurrency_id": "chat", "trigger_mode": "always_last"}
    gate(send.click)(send_fn, [token, message, view], outputs, api_name="chat", **sending)
    gate(message.submit)(send_fn, [token, message, view], outputs, api_visibility="private", **sending)
    gate(regen.click)(
        regen_fn, [token, view, failed], outputs, api_name="regenerate", concurrency_limit=4, concurrency_id="chat"
    )
    gate(chatbot.retry)(
        regen_fn, [token, view, failed], outputs, api_visibility="private", concurrency_limit=4, concurrency_id="chat"
    )
    clear_fn = guarded(handlers.clear)
    chatbot.clear(clear_fn, [token], [chatbot, remembered, failed, view], api_visibility="private")
    stop.click(guarded(handlers.stop), [token], None, api_name="stop", concurrency_limit=None)
    clear.click(clear_fn, [token], [chatbot, remembered, failed, view], api_name="clear_screen", concurrency_limit=None)
    message.change(
        handlers.count,
        [token, message, *([lang] if lang is not None else [])],
        counter,
        api_visibility="private",
        show_progress="hidden",
        queue=False,
    )
    return ChatParts(handlers, chatbot, message, outputs, counter)
