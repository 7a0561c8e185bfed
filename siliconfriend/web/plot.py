"""The memory page's plot: retention R(t) of the most recent memories, the forgetting threshold
and now; drawn with a font that has the page's language's glyphs (a CJK font for Chinese, found
at run time: Debian's fonts-wqy-microhei, Noto CJK, or the system's own)."""

from __future__ import annotations

import functools

from ..i18n import t

CJK_FONTS = (
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Droid Sans Fallback",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
    "Arial Unicode MS",
)


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The name of an installed font with Chinese glyphs, or None (then the plot's Chinese words
    would be empty boxes: install fonts-wqy-microhei)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    found = next((name for name in CJK_FONTS if name in installed), None)
    if found is None:  # a font installed after matplotlib built its cache: added to the font manager
        # in use (replacing the manager would not do: matplotlib's findfont stays bound to the old one)
        for path in font_manager.findSystemFonts():
            try:
                name = font_manager.FontProperties(fname=path).get_name()
            except (OSError, RuntimeError, ValueError):
                continue
            if name in CJK_FONTS:
                font_manager.fontManager.addfont(path)
        installed = {f.name for f in font_manager.fontManager.ttflist}
        found = next((name for name in CJK_FONTS if name in installed), None)
    return found


def font_family(lang: str) -> list[str]:
    font = cjk_font() if lang == "zh" else None
    return [font, "DejaVu Sans"] if font else ["DejaVu Sans"]


def retention_figure(data: dict, lang: str):
    """A matplotlib figure of ``WebService.retention_curves``."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"font.family": font_family(lang)}):
        fig = Figure(figsize=(9.5, 3.6), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        if not data["curves"]:
            ax.text(0.5, 0.5, t("plot_empty", lang), ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return fig
        for curve in data["curves"]:
            ax.plot(
                curve["times"],
                curve["values"],
                linewidth=1.4,
                label=f"#{curve['id']} {t('kind_' + curve['kind'], lang)} {curve['day']}",
            )
        ax.axhline(
            data["threshold"],
            color="grey",
            linestyle="--",
            linewidth=1,
            label=f"{t('plot_threshold', lang)} ({data['threshold']:g})",
        )
        ax.axvline(data["now"], color="black", linestyle=":", linewidth=1, label=t("plot_now", lang))
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(t("plot_axis", lang))
        # beside the axes, not over the curves (they start at the top left, at R = 1)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1, borderaxespad=0)
        ax.grid(alpha=0.3)
        fig.autofmt_xdate()
    return fig
