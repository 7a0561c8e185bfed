"""The memory page: browse and search every memory with S, R and state; pin, delete, restore;
read and edit the daily and global summaries and the personality profile; "summarise now"; a
plot of retention over time."""
from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Callable

import gradio as gr

from memory.records import Kind, State

from .common import guard, lang_of
from .i18n import Translator, t
from .service import MemoryRow, WebService

HEADERS = ["id", "day", "kind", "state", "pinned", "S", "R", "recalls", "text", "why", "importance", "status"]
ALL = "all"


@dataclass
class MemoryParts:
    refresh: Callable[[str], list]   # token -> values for ``outputs``
    outputs: list

    @staticmethod
    def blank() -> list:
        return [gr.update(choices=[ALL], value=ALL), [], None, gr.update(choices=[], value=None), "", "", "", ""]


def rows_value(rows: list[MemoryRow]) -> list[list]:
    out = []
    for r in rows:
        row = list(astuple(r))
        row[4] = "yes" if r.pinned else ""
        row[8] = r.text if len(r.text) <= 400 else r.text[:399] + "…"
        out.append(row)
    return out


def retention_figure(data: dict, lang: str):
    """A matplotlib figure: R(t) of the most recent memories, the threshold and now."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    if not data["curves"]:
        ax.text(0.5, 0.5, t("plot_empty", lang), ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    for curve in data["curves"]:
        ax.plot(curve["times"], curve["values"], linewidth=1.4, label=curve["label"])
    ax.axhline(data["threshold"], color="grey", linestyle="--", linewidth=1,
               label=f"{t('plot_threshold', lang)} ({data['threshold']:g})")
    ax.axvline(data["now"], color="black", linestyle=":", linewidth=1, label=t("plot_now", lang))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("R = e^(-t/S)")
    ax.legend(fontsize=7, loc="upper right", ncols=2)
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return fig


def build_memory(service: WebService, tr: Translator, token: gr.BrowserState) -> MemoryParts:
    guarded = guard(service)
    tr(gr.Markdown(tr.text("mem_intro")), value="mem_intro")
    with gr.Row():
        day = tr(gr.Dropdown([ALL], value=ALL, label=tr.text("mem_day"), elem_id="mem_day", scale=1), label="mem_day")
        kind = tr(gr.Dropdown([ALL] + [k.value for k in Kind], value=ALL, label=tr.text("mem_kind"), scale=1),
                  label="mem_kind")
        state = tr(gr.Dropdown([ALL] + [s.value for s in State], value=ALL, label=tr.text("mem_state"), scale=1),
                   label="mem_state")
        archived = tr(gr.Checkbox(True, label=tr.text("mem_archived"), scale=1), label="mem_archived")
    with gr.Row():
        query = tr(gr.Textbox(label=tr.text("mem_search"), elem_id="mem_query", scale=4), label="mem_search")
        search = tr(gr.Button(tr.text("mem_search_btn"), variant="primary", elem_id="mem_search", scale=1),
                    value="mem_search_btn")
    table = tr(gr.Dataframe(headers=HEADERS, value=[], label=tr.text("mem_table"), interactive=False, wrap=True,
                            elem_id="mem_table", max_height=420,
                            column_widths=["4%", "9%", "13%", "7%", "6%", "4%", "5%", "7%", "30%", "15%"]),
               label="mem_table")
    with gr.Row():
        selected = tr(gr.Number(None, label=tr.text("mem_id"), precision=0, elem_id="mem_id", scale=1), label="mem_id")
        pin = tr(gr.Button(tr.text("pin"), scale=1), value="pin")
        unpin = tr(gr.Button(tr.text("unpin"), scale=1), value="unpin")
        restore = tr(gr.Button(tr.text("restore"), scale=1), value="restore")
        delete = tr(gr.Button(tr.text("delete"), variant="stop", scale=1, elem_id="mem_delete"), value="delete")
    status = gr.Markdown(elem_id="mem_status")

    tr(gr.Markdown(f"### {tr.text('plot')}"), value="plot")
    plot = gr.Plot(show_label=False, elem_id="retention_plot")

    with tr(gr.Accordion(tr.text("summaries"), open=True), label="summaries"):
        with gr.Row():
            sum_day = tr(gr.Dropdown([], label=tr.text("sum_day"), allow_custom_value=False, scale=2), label="sum_day")
            summarise = tr(gr.Button(tr.text("summarise_now"), elem_id="summarise_now", scale=1), value="summarise_now")
        with gr.Row():
            daily_events = tr(gr.Textbox(label=tr.text("daily_events"), lines=3), label="daily_events")
            daily_pers = tr(gr.Textbox(label=tr.text("daily_personality"), lines=3), label="daily_personality")
        save_daily = tr(gr.Button(tr.text("save_daily")), value="save_daily")
        with gr.Row():
            global_events = tr(gr.Textbox(label=tr.text("global_events"), lines=4, elem_id="global_events"),
                               label="global_events")
            global_pers = tr(gr.Textbox(label=tr.text("global_personality"), lines=4, elem_id="global_personality"),
                             label="global_personality")
        save_global = tr(gr.Button(tr.text("save_global")), value="save_global")
        sum_status = gr.Markdown()

    def _filters(day_v, kind_v, state_v):
        return (None if day_v in (None, "", ALL) else day_v, None if kind_v in (None, "", ALL) else kind_v,
                None if state_v in (None, "", ALL) else state_v)

    def _table(token_v, day_v, kind_v, state_v, query_v, archived_v):
        d, k, s = _filters(day_v, kind_v, state_v)
        rows = service.memories(token_v, day=d, kind=k, state=s, query=query_v or "",
                                include_archived=bool(archived_v))
        return rows_value(rows)

    def _summary_values(token_v, day_v=None):
        s = service.summaries(token_v, day_v or None)
        return [gr.update(choices=s["summary_days"], value=s["day"] or None), s["daily_events"],
                s["daily_personality"], s["global_events"], s["global_personality"]]

    def _everything(token_v, day_v=ALL, kind_v=ALL, state_v=ALL, query_v="", archived_v=True):
        lang = lang_of(service, token_v)
        days = service.days(token_v)
        day_v = day_v if day_v in days else ALL
        return [gr.update(choices=[ALL] + days, value=day_v),
                _table(token_v, day_v, kind_v, state_v, query_v, archived_v),
                retention_figure(service.retention_curves(token_v), lang), *_summary_values(token_v)]

    filters = [day, kind, state, query, archived]
    everything_out = [day, table, plot, sum_day, daily_events, daily_pers, global_events, global_pers]

    @guarded
    def on_search(token_v, day_v, kind_v, state_v, query_v, archived_v):
        return _everything(token_v, day_v, kind_v, state_v, query_v, archived_v)

    @guarded
    def on_select(token_v, evt: gr.SelectData):
        service.user(token_v)
        row = evt.row_value or []
        return int(row[0]) if row else None

    def _action(name: str, fn: Callable[[str, int], object]):
        @guarded
        def handler(token_v, memory_id, day_v, kind_v, state_v, query_v, archived_v):
            lang = lang_of(service, token_v)
            service.user(token_v)
            if not memory_id:
                return [gr.skip()] * len(everything_out) + [t("pick_memory", lang), gr.skip()]
            fn(token_v, int(memory_id))
            new_id = None if name == "delete" else memory_id
            return _everything(token_v, day_v, kind_v, state_v, query_v, archived_v) + \
                [t(f"done_{name}", lang, id=int(memory_id)), new_id]
        handler.__name__ = f"on_{name}"
        return handler

    actions = {"pin": (pin, lambda tk, i: service.pin(tk, i, True)),
               "unpin": (unpin, lambda tk, i: service.pin(tk, i, False)),
               "restore": (restore, service.restore),
               "delete": (delete, lambda tk, i: service.delete_memories(tk, [i]))}
    for name, (button, fn) in actions.items():
        button.click(_action(name, fn), [token, selected, *filters], everything_out + [status, selected],
                     api_name=f"memory_{name}")

    @guarded
    def on_sum_day(token_v, day_v):
        return _summary_values(token_v, day_v)[1:3]

    @guarded
    def on_save_daily(token_v, day_v, events_v, pers_v):
        lang = lang_of(service, token_v)
        saved = service.save_summaries(token_v, day=day_v or None, daily_events=events_v, daily_personality=pers_v)
        return t("saved" if saved else "nothing_saved", lang)

    @guarded
    def on_save_global(token_v, events_v, pers_v):
        lang = lang_of(service, token_v)
        saved = service.save_summaries(token_v, global_events=events_v, global_personality=pers_v)
        return t("saved" if saved else "nothing_saved", lang)

    @guarded
    def on_summarise(token_v, *filters_v):
        lang = lang_of(service, token_v)
        days = service.summarise_now(token_v)
        note = t("summarised", lang, days=", ".join(d.isoformat() for d in days)) if days \
            else t("nothing_summarised", lang)
        return _everything(token_v, *filters_v) + [note]

    search.click(on_search, [token, *filters], everything_out, api_name="memories")
    query.submit(on_search, [token, *filters], everything_out, api_visibility="private")
    for dropdown in (day, kind, state):
        dropdown.input(on_search, [token, *filters], everything_out, api_visibility="private")
    table.select(on_select, [token], selected, api_visibility="private")
    sum_day.input(on_sum_day, [token, sum_day], [daily_events, daily_pers], api_name="summary_of_day")
    save_daily.click(on_save_daily, [token, sum_day, daily_events, daily_pers], sum_status,
                     api_name="save_daily_summary")
    save_global.click(on_save_global, [token, global_events, global_pers], sum_status,
                      api_name="save_global_summary")
    summarise.click(on_summarise, [token, *filters], everything_out + [sum_status], api_name="summarise_now")

    def refresh(token_v: str) -> list:
        return _everything(token_v)

    return MemoryParts(refresh, everything_out)
