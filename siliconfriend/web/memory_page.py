"""The memory page: browse and search every memory with S, R and state; pin, delete (after a
confirmation), restore an archived one; read and edit the daily and global summaries and the
personality profile; "summarise now" with its progress; a plot of retention over time.

``MemoryHandlers`` holds the handlers as named methods (tests call them without a browser); a
refused action (an unknown id, restoring an active memory) says why in the page's status line and
leaves the rest of the page as it was. ``build_memory`` lays out the components and wires them.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from memory.bank import UnknownMemory
from memory.records import Kind, State
from memory.shown import ShownMemory

from ..accounts.users import AccountError
from ..i18n import Translator, say, t, time_unit, why_words
from .chat import BREAK
from .common import guard, lang_of, notify
from .plot import retention_figure
from .service import WebService

COLUMNS = ["id", "day", "kind", "state", "pinned", "S", "R", "recalls", "text", "why", "importance", "status"]
ALL = "all"


def headers(lang: str) -> list[str]:
    return [t(f"col_{c}", lang) if c not in ("S", "R") else c for c in COLUMNS]


def kind_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("all", lang), ALL)] + [(t(f"kind_{k.value}", lang), k.value) for k in Kind]


def state_choices(lang: str) -> list[tuple[str, str]]:
    return [(t("all", lang), ALL)] + [(t(f"state_{s.value}", lang), s.value) for s in State]


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def table_value(rows: list[ShownMemory], lang: str) -> dict:
    """The table's value: translated headers, kinds and states; long texts cut."""
    data = [
        [
            r.id,
            r.day or "",
            t(f"kind_{r.kind}", lang),
            t(f"state_{r.state}", lang),
            t("yes", lang) if r.pinned else "",
            round(r.strength, 2),
            round(r.retention, 3),
            r.recall_count,
            _cut(BREAK.sub("\n", r.text), 400),  # a model's <br> is a line break, not text
            why_words(r.why, lang),
            round(r.importance, 2),
            say(r.status, lang),
        ]
        for r in rows
    ]
    return {"headers": headers(lang), "data": data}


def _filters(day_v, kind_v, state_v):
    return (
        None if day_v in (None, "", ALL) else day_v,
        None if kind_v in (None, "", ALL) else kind_v,
        None if state_v in (None, "", ALL) else state_v,
    )


def grounding_note(info: dict | None, lang: str) -> str:
    """The line under a summary that says what the grounding check did: the sentences it left out,
    the user's own words instead of the model's, no profile instead of a false one."""
    if not info or not info.get("path"):
        return ""
    if info["path"] == "extractive":
        return t("told_me_note", lang)
    if info["path"] == "none":
        return t("no_profile_note", lang)
    n = int(info.get("dropped") or 0)
    return "" if n == 0 else t("left_out_1", lang) if n == 1 else t("left_out_n", lang, n=n)


class MemoryHandlers:
    """The page's handlers. ``everything`` and the actions return values for ``PAGE`` (+ the
    status line and the selected id for the actions)."""

    PAGE = (
        "day",
        "table",
        "plot",
        "sum_day",
        "daily_events",
        "daily_personality",
        "global_events",
        "global_personality",
        "known",
    )
    REFUSALS = (UnknownMemory, AccountError, ValueError)

    def __init__(self, service: WebService):
        self.service = service

    def table(self, token_v, day_v=ALL, kind_v=ALL, state_v=ALL, query_v="", archived_v=True) -> dict:
        d, k, s = _filters(day_v, kind_v, state_v)
        rows = self.service.memory_page.memories(
            token_v, day=d, kind=k, state=s, query=query_v or "", include_archived=bool(archived_v)
        )
        return table_value(rows, lang_of(self.service, token_v))

    def summary_values(self, token_v, day_v=None) -> list:
        s = self.service.memory_page.summaries(token_v, day_v or None)
        lang = lang_of(self.service, token_v)

        def shown(key: str) -> Any:
            # the text, with what the grounding check left out said under its label
            return gr.update(value=s[key], info=grounding_note(s["grounding"].get(key), lang))

        return [
            gr.update(choices=s["summary_days"], value=s["day"] or None),
            shown("daily_events"),
            shown("daily_personality"),
            shown("global_events"),
            shown("global_personality"),
        ]

    def everything(self, token_v, day_v=ALL, kind_v=ALL, state_v=ALL, query_v="", archived_v=True) -> list:
        service = self.service
        lang = lang_of(service, token_v)
        days = service.memory_page.days(token_v)
        day_v = day_v if day_v in days else ALL
        table = self.table(token_v, day_v, kind_v, state_v, query_v, archived_v)
        return [
            gr.update(choices=[(t("all", lang), ALL)] + [(d, d) for d in days], value=day_v),
            table,
            retention_figure(service.memory_page.retention_curves(token_v), lang),
            *self.summary_values(token_v),
            service.memory_page.known(token_v, lang),
        ]

    def search(self, token_v, day_v, kind_v, state_v, query_v, archived_v) -> list:
        """The page for these filters, and the line under the search: a search shows only the
        memories that match it, and says "no memories match" when none does."""
        out = self.everything(token_v, day_v, kind_v, state_v, query_v, archived_v)
        none = (query_v or "").strip() and not out[1]["data"]
        return out + [t("no_match", lang_of(self.service, token_v)) if none else ""]

    def select(self, token_v, evt: gr.SelectData):
        self.service.account.user(token_v)
        row = evt.row_value or []
        return str(row[0]) if row else ""

    def _refused(self, token_v, exc: Exception, extra: int = 1) -> list:
        """The page left as it was; the status line says why."""
        lang = lang_of(self.service, token_v)
        message = say(str(exc.args[0]) if exc.args else type(exc).__name__, lang)
        notify(message, lang)
        return [gr.skip()] * len(self.PAGE) + [f"⚠️ {message}"] + [gr.skip()] * extra

    def _act(self, name: str, fn: Callable[[int], Any], token_v, memory_v, filters: tuple) -> list:
        lang = lang_of(self.service, token_v)
        self.service.account.user(token_v)
        if memory_v in (None, ""):
            return [gr.skip()] * len(self.PAGE) + [t("pick_memory", lang), gr.skip()]
        try:
            rec = fn(memory_v)
        except self.REFUSALS as exc:
            return self._refused(token_v, exc)
        number = getattr(rec, "id", None) or memory_v
        return self.everything(token_v, *filters) + [
            t(f"done_{name}", lang, id=number),
            "" if name == "delete" else str(number),
        ]

    def pin(self, token_v, memory_v, *filters) -> list:
        return self._act("pin", lambda i: self.service.memory_page.pin(token_v, i, True), token_v, memory_v, filters)

    def unpin(self, token_v, memory_v, *filters) -> list:
        return self._act("unpin", lambda i: self.service.memory_page.pin(token_v, i, False), token_v, memory_v, filters)

    def restore(self, token_v, memory_v, *filters) -> list:
        return self._act("restore", lambda i: self.service.memory_page.restore(token_v, i), token_v, memory_v, filters)

    def ask_delete(self, token_v, memory_v) -> list:
        """The first step of "delete for good": the memory is named and a confirmation asked
        for; nothing is deleted yet. Values for (status, confirm row, pending)."""
        lang = lang_of(self.service, token_v)
        user = self.service.account.user(token_v)
        if memory_v in (None, ""):
            return [t("pick_memory", lang), gr.update(visible=False), {}]
        try:
            rec = self.service.memory_page.memory(token_v, memory_v)
        except self.REFUSALS as exc:
            message = say(str(exc.args[0]) if exc.args else str(exc), lang)
            notify(message, lang)
            return [f"⚠️ {message}", gr.update(visible=False), {}]
        preview = html.escape(" ".join(rec.text.split())[:80], quote=False)
        return [
            t("confirm_delete", lang, id=rec.id, text=preview),
            gr.update(visible=True),
            {"user": user, "id": rec.id},
        ]

    def confirm_delete(self, token_v, pending_v, *filters) -> list:
        """The second step: delete the memory that was asked about. Values for PAGE, status,
        selected id, confirm row, pending."""
        lang = lang_of(self.service, token_v)
        user = self.service.account.user(token_v)
        pending = pending_v if isinstance(pending_v, dict) and pending_v.get("user") == user else {}
        if not pending.get("id"):
            return [gr.skip()] * len(self.PAGE) + [t("pick_memory", lang), gr.skip(), gr.update(visible=False), {}]
        out = self._act(
            "delete", lambda i: self.service.memory_page.delete_memories(token_v, [i]), token_v, pending["id"], filters
        )
        return out + [gr.update(visible=False), {}]

    def cancel_delete(self, token_v) -> list:
        lang = lang_of(self.service, token_v)
        self.service.account.user(token_v)
        return [t("delete_cancelled", lang), gr.update(visible=False), {}]

    def summary_of_day(self, token_v, day_v) -> list:
        return self.summary_values(token_v, day_v)[1:3]

    def save_daily(self, token_v, day_v, events_v, pers_v) -> str:
        lang = lang_of(self.service, token_v)
        try:
            saved = self.service.memory_page.save_summaries(
                token_v, day=day_v or None, daily_events=events_v, daily_personality=pers_v
            )
        except self.REFUSALS as exc:
            return f"⚠️ {say(str(exc), lang)}"
        return t("saved" if saved else "nothing_saved", lang)

    def save_global(self, token_v, events_v, pers_v) -> str:
        lang = lang_of(self.service, token_v)
        saved = self.service.memory_page.save_summaries(token_v, global_events=events_v, global_personality=pers_v)
        return t("saved" if saved else "nothing_saved", lang)

    def summarise(self, token_v, *args, tick: float = 1.0):
        """Summarise every finished day now (today too when the last of ``args`` is true; the
        others are the page's filters), one day at a time: a generator of values for PAGE + the
        status line. While it works only the status line changes, once a ``tick``, with the day,
        its place and the seconds spent; the page is redrawn at the end."""
        *filters_v, include_today_v = args if len(args) == 6 else (*args, False)
        lang = lang_of(self.service, token_v)
        self.service.account.user(token_v)
        where: dict[str, Any] = {}
        outcome: dict[str, Any] = {}

        def step(done: int, total: int, day) -> None:
            where.update(done=done, total=total, day=day)

        def work() -> None:
            try:
                outcome["days"] = self.service.memory_page.summarise_now(
                    token_v, include_today=bool(include_today_v), progress=step
                )
            except Exception as exc:  # said below, by the guard, as any refusal
                outcome["error"] = exc

        worker = threading.Thread(target=work, name="sf-summarise", daemon=True)
        started = time.monotonic()
        worker.start()
        while worker.is_alive():
            worker.join(tick)
            if worker.is_alive() and where:
                line = t(
                    "summarising",
                    lang,
                    day=where["day"].isoformat(),
                    i=where["done"] + 1,
                    n=where["total"],
                    s=int(time.monotonic() - started),
                )
                yield [gr.skip()] * len(self.PAGE) + [line]
        if "error" in outcome:
            raise outcome["error"]
        days = outcome["days"]
        note = (
            t("summarised", lang, days=", ".join(d.isoformat() for d in days))
            if days
            else t("nothing_summarised", lang)
        )
        yield self.everything(token_v, *filters_v) + [note]

    def refresh(self, token_v: str) -> list:
        return self.everything(token_v)

    @staticmethod
    def blank(lang: str = "en") -> list:
        return [
            gr.update(choices=[(t("all", lang), ALL)], value=ALL),
            {"headers": headers(lang), "data": []},
            None,
            gr.update(choices=[], value=None),
            "",
            "",
            "",
            "",
            "",
        ]


@dataclass
class MemoryParts:
    handlers: MemoryHandlers
    outputs: list

    def refresh(self, token: str) -> list:
        return self.handlers.refresh(token)

    def blank(self, lang: str = "en") -> list:
        return self.handlers.blank(lang)


def build_memory(
    service: WebService,
    tr: Translator,
    token: gr.BrowserState,
    gate: Callable[[Callable], Callable] = lambda trigger: trigger,
) -> MemoryParts:
    """``gate``: as for ``build_chat``."""
    guarded = guard(service)
    h = MemoryHandlers(service)
    # t's unit is the forgetting policy's (weeks by default): "S = 4.16, fades in 67 days" follows
    days = float(getattr(service.bank.policy, "unit_days", 1.0))

    def intro(lang: str) -> str:
        return t("mem_intro", lang, unit=time_unit(days, lang), days=days)

    tr(gr.Markdown(intro(tr.lang), elem_id="mem_intro"), value=intro)
    # what I know about you: the profile and the facts stated, at the top (each names its memory's id)
    known_md = gr.Markdown(elem_id="mem_known")
    with gr.Row():
        day = tr(
            gr.Dropdown([(tr.text("all"), ALL)], value=ALL, label=tr.text("mem_day"), elem_id="mem_day", scale=1),
            label="mem_day",
        )
        kind = tr(
            gr.Dropdown(kind_choices(tr.lang), value=ALL, label=tr.text("mem_kind"), elem_id="mem_kind", scale=1),
            label="mem_kind",
            choices=kind_choices,
        )
        state = tr(
            gr.Dropdown(state_choices(tr.lang), value=ALL, label=tr.text("mem_state"), elem_id="mem_state", scale=1),
            label="mem_state",
            choices=state_choices,
        )
        archived = tr(gr.Checkbox(True, label=tr.text("mem_archived"), scale=1), label="mem_archived")
    with gr.Row():
        query = tr(gr.Textbox(label=tr.text("mem_search"), elem_id="mem_query", scale=4), label="mem_search")
        search = tr(
            gr.Button(tr.text("mem_search_btn"), variant="primary", elem_id="mem_search", scale=1),
            value="mem_search_btn",
        )
    search_note = gr.Markdown(elem_id="mem_search_note")
    table = gr.Dataframe(
        headers=headers(tr.lang),
        value=None,
        show_label=False,
        interactive=False,
        wrap=True,
        elem_id="mem_table",
        max_height=420,
        # one width per column (12), S and R wide enough for "4.84" on one line, "pinned",
        # "recalls" and "importance" for their headers (which never break inside a word: app.CSS)
        column_widths=["4%", "8%", "8%", "6%", "6%", "5%", "5%", "6%", "21%", "11%", "8%", "12%"],
    )
    tr(gr.Markdown(tr.text("mem_table"), elem_classes=["sf-note"]), value="mem_table")
    with gr.Row():
        selected = tr(
            gr.Textbox(
                "", label=tr.text("mem_id"), placeholder=tr.text("mem_id_ph"), elem_id="mem_id", max_length=24, scale=1
            ),
            label="mem_id",
            placeholder="mem_id_ph",
        )
        pin = tr(gr.Button(tr.text("pin"), scale=1, elem_id="mem_pin"), value="pin")
        unpin = tr(gr.Button(tr.text("unpin"), scale=1, elem_id="mem_unpin"), value="unpin")
        restore = tr(gr.Button(tr.text("restore"), scale=1, elem_id="mem_restore"), value="restore")
        delete = tr(gr.Button(tr.text("delete"), variant="stop", scale=1, elem_id="mem_delete"), value="delete")
    with gr.Row(visible=False, elem_id="mem_confirm_row") as confirm_row:
        confirm = tr(gr.Button(tr.text("delete_yes"), variant="stop", elem_id="mem_delete_yes"), value="delete_yes")
        cancel = tr(gr.Button(tr.text("delete_no"), elem_id="mem_delete_no"), value="delete_no")
    status = gr.Markdown(elem_id="mem_status")
    pending = gr.State({})

    tr(gr.Markdown(f"### {tr.text('plot')}"), value="plot_h")
    plot = gr.Plot(show_label=False, elem_id="retention_plot")

    with tr(gr.Accordion(tr.text("summaries"), open=True), label="summaries"):
        with gr.Row():
            sum_day = tr(gr.Dropdown([], label=tr.text("sum_day"), allow_custom_value=False, scale=2), label="sum_day")
            summarise = tr(gr.Button(tr.text("summarise_now"), elem_id="summarise_now", scale=1), value="summarise_now")
            include_today = tr(
                gr.Checkbox(False, label=tr.text("summarise_today"), elem_id="summarise_today", scale=1),
                label="summarise_today",
            )
        with gr.Row():
            daily_events = tr(gr.Textbox(label=tr.text("daily_events"), lines=3), label="daily_events")
            daily_pers = tr(gr.Textbox(label=tr.text("daily_personality"), lines=3), label="daily_personality")
        save_daily = tr(gr.Button(tr.text("save_daily")), value="save_daily")
        with gr.Row():
            global_events = tr(
                gr.Textbox(label=tr.text("global_events"), lines=4, elem_id="global_events"), label="global_events"
            )
            global_pers = tr(
                gr.Textbox(label=tr.text("global_personality"), lines=4, elem_id="global_personality"),
                label="global_personality",
            )
        save_global = tr(gr.Button(tr.text("save_global")), value="save_global")
        sum_status = gr.Markdown(elem_id="sum_status")

    filters = [day, kind, state, query, archived]
    page = [day, table, plot, sum_day, daily_events, daily_pers, global_events, global_pers, known_md]
    for trigger, api in (
        (search.click, "memories"),
        (query.submit, None),
        (day.input, None),
        (kind.input, None),
        (state.input, None),
    ):
        kwargs = {"api_name": api} if api else {"api_visibility": "private"}
        gate(trigger)(guarded(h.search), [token, *filters], page + [search_note], **kwargs)
    table.select(guarded(h.select), [token], selected, api_visibility="private")
    for name, button in (("pin", pin), ("unpin", unpin), ("restore", restore)):
        gate(button.click)(
            guarded(getattr(h, name)), [token, selected, *filters], page + [status, selected], api_name=f"memory_{name}"
        )
    gate(delete.click)(
        guarded(h.ask_delete), [token, selected], [status, confirm_row, pending], api_name="memory_delete"
    )
    gate(confirm.click)(
        guarded(h.confirm_delete),
        [token, pending, *filters],
        page + [status, selected, confirm_row, pending],
        api_name="memory_delete_confirm",
    )
    cancel.click(guarded(h.cancel_delete), [token], [status, confirm_row, pending], api_visibility="private")

    sum_day.input(guarded(h.summary_of_day), [token, sum_day], [daily_events, daily_pers], api_name="summary_of_day")
    save_daily.click(
        guarded(h.save_daily), [token, sum_day, daily_events, daily_pers], sum_status, api_name="save_daily_summary"
    )
    save_global.click(
        guarded(h.save_global), [token, global_events, global_pers], sum_status, api_name="save_global_summary"
    )

    # the status line is the progress (one line that moves); nothing else on the page is covered
    # or held meanwhile: its own queue, one at a time
    gate(summarise.click)(
        guarded(h.summarise),
        [token, *filters, include_today],
        page + [sum_status],
        api_name="summarise_now",
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="summarise",
    )
    return MemoryParts(h, page)
