"""Figures for sweep and tune results (matplotlib, Agg backend): they take tables, recompute nothing.

* ``heatmap``: error for every method x setting, missing cells hatched grey, failed ones hatched red;
* ``setting_grids``: per method, the paper's 6 domain settings x 4 class settings grid;
* ``factor_lines``: tune results, error against each searched factor (paper figure 3), with 95 % error bars;
* ``layer_bars``: tune results, error per BDN domain-prediction layer (paper figure 5);
* ``per_domain_heatmap``: error for every method x domain (corruption), over the panel's settings and seeds.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from analysis.common import SETTING_CAPTION, half_notation  # noqa: E402
from analysis.stats import uncertainty  # noqa: E402
from analysis.tables import PaperTable  # noqa: E402
from unitta.streams.settings import CLASS_HALVES, DOMAIN_HALVES  # noqa: E402

__all__ = ["heatmap", "setting_grids", "grid_figure", "factor_lines", "layer_bars", "per_domain_heatmap",
           "FACTOR_LABELS"]

CMAP = "YlOrRd"  # sequential: light = low error, dark red = high error
_MISSING = dict(facecolor="#e8e8e8", hatch="///", edgecolor="#9a9a9a")
_FAILED = dict(facecolor="#f4d0d0", hatch="xxx", edgecolor="#c03030")
FACTOR_LABELS = {
    "domain_alpha": r"domain correlation factor $\alpha_1$",
    "domain_beta": r"domain imbalance factor $\beta$",
    "class_alpha": r"class correlation factor $\alpha_1$",
    "class_beta": r"class imbalance factor $\beta$",
}


def _scale(values) -> tuple[float, float]:
    got = [v for v in values if v is not None and not math.isnan(v)]
    if not got:
        return 0.0, 100.0
    lo, hi = min(got), max(got)
    if hi - lo < 1.0:
        lo, hi = lo - 0.5, hi + 0.5
    return max(0.0, lo), hi


def _mark(ax, x: float, y: float, status: str, fontsize: float) -> None:
    style = _MISSING if status == "missing" else _FAILED
    ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, linewidth=0, **style))
    ax.text(x, y, status, ha="center", va="center", fontsize=fontsize,
            color="#555555" if status == "missing" else "#a01010",
            bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.85))


def _legend_handles() -> list[Patch]:
    return [Patch(label="missing (no result)", **_MISSING), Patch(label="failed", **_FAILED)]


def wrap_to_width(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (an average glyph is
    about 0.55 em wide), so that a footnote follows the figure's width instead of setting it."""
    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return textwrap.fill(text, chars)


def _legend_below(fig, ax, caption: str, width_in: float | None = None) -> None:
    """The missing/failed legend and the caption, just under the x-axis label, wrapped to the axes' width
    (or ``width_in``)."""
    fig.canvas.draw()
    box = ax.xaxis.label.get_window_extent()
    _, y = ax.transAxes.inverted().transform((box.x0, box.y0))
    legend = ax.legend(handles=_legend_handles(), loc="upper left", bbox_to_anchor=(0, y), ncol=2, fontsize=7,
                       frameon=False, borderaxespad=0.2)
    width = width_in or ax.get_window_extent().width / fig.dpi
    ax.annotate(wrap_to_width(caption, width, 6.5), xy=(0, 0), xycoords=legend, xytext=(2, -2),
                textcoords="offset points", va="top", fontsize=6.5)


def _annotate(ax, x, y, v, norm, cmap, fontsize, suffix="", halfwidth: float | None = None,
              seeds: bool = False) -> None:
    """The value, and under it '±h' (95 % t-interval over seeds) when the table has seed intervals."""
    rgba = cmap(norm(v))
    light = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] > 0.55
    text = f"{v:.1f}{suffix}"
    if seeds:
        text += "\n±" + ("?" if halfwidth is None else f"{halfwidth:.1f}")
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color="black" if light else "white",
            linespacing=0.9)


# Heatmap geometry: values at VALUE_PT points in cells CELL_IN inches wide, at most MAX_COLUMNS settings per
# row of panels, so that a heatmap is at most about 9 inches wide: at DPI 150 about 1,350 pixels, shown at
# ~1,250 in the HTML report (max-width 1,300 px), where a value's font is ~15 px and its digits >= 9 px tall.
VALUE_PT, DPI, MAX_COLUMNS = 8.0, 150, 12
CELL_IN = {False: 0.5, True: 0.55}  # without / with the "± h" line under each value
CELL_H_IN = {False: 0.36, True: 0.5}


def _chunks(settings: list[str]) -> list[list[str]]:
    """The settings split into rows of at most MAX_COLUMNS (even sizes), in order."""
    k = math.ceil(len(settings) / MAX_COLUMNS) or 1
    size = math.ceil(len(settings) / k)
    return [settings[i : i + size] for i in range(0, len(settings), size)] or [[]]


def heatmap(t: PaperTable, path: Path, title: str, label: str = "Error (%)") -> Path:
    """Methods (rows) x settings (columns) heatmap of error; missing and failed cells hatched and labelled.

    Its size follows the cell count (``CELL_IN`` per setting, ``CELL_H_IN`` per method); more than
    ``MAX_COLUMNS`` settings wrap into rows of panels; the footnote wraps to the figure's width."""
    methods = t.methods
    data = {m: {s: (np.nan if t.values[m].get(s) is None else t.values[m][s]) for s in t.settings} for m in methods}
    lo, hi = _scale([v for row in data.values() for v in row.values()])
    cmap = plt.get_cmap(CMAP)
    norm = matplotlib.colors.Normalize(lo, hi)
    chunks = _chunks(t.settings)
    cols = max(len(c) for c in chunks)
    width = max(5.0, CELL_IN[t.has_seeds] * cols + 2.6)
    panel_h = CELL_H_IN[t.has_seeds] * len(methods) + 1.0
    fig, axes = plt.subplots(len(chunks), 1, figsize=(width, panel_h * len(chunks) + 0.9), squeeze=False)
    for ax, settings in zip(axes[:, 0], chunks):
        grid = np.array([[data[m][s] for s in settings] for m in methods], dtype=float).reshape(len(methods), -1)
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
        for i, m in enumerate(methods):
            for j, s in enumerate(settings):
                st = t.status[m].get(s, "missing")
                if st in ("missing", "failed"):
                    _mark(ax, j, i, st, VALUE_PT - 1.5)
                else:
                    _annotate(ax, j, i, grid[i, j], norm, cmap, VALUE_PT, "*" if st == "partial" else "",
                              t.ci.get(m, {}).get(s), t.has_seeds)
        ax.set_xticks(range(len(settings)), settings, rotation=90, fontsize=8, family="monospace")
        ax.set_yticks(range(len(methods)), methods, fontsize=8)
        ax.set_xlim(-0.5, cols - 0.5)  # every row of panels on the same cell width
    last = axes[-1, 0]
    last.set_xlabel("setting (class corr, class imb, domain corr, domain imb)", fontsize=8)
    axes[0, 0].set_title(textwrap.fill(title, int(width * 72 / (0.55 * 9))), fontsize=9)
    fig.tight_layout()
    cbar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[:, 0]), fraction=0.03,
                        pad=0.02)
    cbar.set_label(label, fontsize=8)
    seeds_note = (" Under each value: ± half-width of the 95 % t-interval over seeds (? = one seed)."
                  if t.has_seeds else "")
    _legend_below(fig, last, SETTING_CAPTION + " * = some seeds failed." + seeds_note, width_in=width - 0.6)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def grid_halves(settings: list[str]) -> tuple[list[str], list[str]]:
    """(domain halves, class halves) of the grid: those of the settings present, in the paper's order; a run of
    4 settings gets a grid of its own halves, not 20 'missing' cells of the 6 x 4 one."""
    domains = [d for d in DOMAIN_HALVES if any(s[2:] == d for s in settings)]
    classes = [c for c in CLASS_HALVES if any(s[:2] == c for s in settings)]
    extra_d = sorted({s[2:] for s in settings} - set(DOMAIN_HALVES))
    extra_c = sorted({s[:2] for s in settings} - set(CLASS_HALVES))
    return domains + extra_d, classes + extra_c


def _avg_title(t: PaperTable, m: str) -> str:
    """'(avg 12.3 ± 0.8)' as in the table: with the seeds' interval where the table has one, † if partial."""
    avg = t.avg[m]
    if avg is None:
        return "(avg —)"
    text = f"{avg:.1f}"
    if t.has_seeds:
        ci = t.avg_ci.get(m)
        text += " ± " + ("?" if ci is None else f"{ci:.1f}")
    return f"(avg {text}{'' if t.avg_n[m] == len(t.settings) else '†'})"


def _panel_title(method: str, average: str, width: int) -> str:
    """A grid panel's title: the method label broken after its overrides' commas (``tent{lr=...,steps=2}``),
    never inside a word, then its average on a line of its own."""
    base, brace, rest = method.partition("{")
    parts = [base + brace + p for p in [rest.split(",")[0]]] + rest.split(",")[1:] if brace else [method]
    lines, line = [], ""
    for i, part in enumerate(parts):
        piece = part + ("," if brace and i < len(parts) - 1 else "")
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    return "\n".join([*lines, line, average])


def setting_grids(t: PaperTable, path: Path, title: str, label: str = "Error (%)") -> Path:
    """Per method, a grid: domain setting (rows) x class setting (columns) over the halves present (the
    paper's 6 x 4 for the full grid), one colour scale; each panel's average as the table prints it."""
    fig = grid_figure(t, title, label)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def grid_figure(t: PaperTable, title: str, label: str = "Error (%)"):
    """The figure of ``setting_grids`` (returned open, so that its layout can be inspected)."""
    n = len(t.methods)
    domains, classes = grid_halves(t.settings)
    cell_w, cell_h = (0.62, 0.42) if t.has_seeds else (0.52, 0.34)
    panel_w, panel_h = cell_w * len(classes) + 0.9, cell_h * len(domains) + 1.1
    cols = max(1, min(n, int(9.0 // panel_w)))  # at most ~9 inches wide: legible when shown 1,300 px wide
    rows = math.ceil(n / cols)
    chars = int(panel_w * 72 / (0.55 * 8.5))  # a title line's characters at 8.5 pt
    titles = {m: _panel_title(m, _avg_title(t, m), chars) for m in t.methods}
    title_h = 0.16 * max(title.count("\n") for title in titles.values())  # long override labels: more lines
    lo, hi = _scale([v for m in t.methods for v in t.values[m].values()])
    cmap = plt.get_cmap(CMAP)
    norm = matplotlib.colors.Normalize(lo, hi)
    # constrained layout keeps titles, tick labels, the suptitle and the colour bar apart
    fig, axes = plt.subplots(rows, cols, figsize=(panel_w * cols + 0.9, (panel_h + title_h) * rows + 0.9),
                             squeeze=False, sharey=True, layout="constrained")
    for k, m in enumerate(t.methods):
        ax = axes[k // cols][k % cols]
        grid = np.full((len(domains), len(classes)), np.nan)
        for i, d in enumerate(domains):
            for j, c in enumerate(classes):
                v = t.values[m].get(c + d)
                grid[i, j] = np.nan if v is None else v
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
        for i, d in enumerate(domains):
            for j, c in enumerate(classes):
                st = t.status[m].get(c + d, "missing")
                if st in ("missing", "failed"):
                    _mark(ax, j, i, st, 6.5)
                else:
                    _annotate(ax, j, i, grid[i, j], norm, cmap, VALUE_PT, "*" if st == "partial" else "",
                              t.ci.get(m, {}).get(c + d), t.has_seeds)
        ax.set_xticks(range(len(classes)), [half_notation(c) for c in classes], fontsize=7.5)
        ax.set_yticks(range(len(domains)), [half_notation(d) for d in domains], fontsize=7.5)
        ax.set_title(titles[m], fontsize=8.5)
        if k % cols == 0:
            ax.set_ylabel("domain setting", fontsize=8)
        if k // cols == rows - 1 or k + cols >= n:
            ax.set_xlabel("class setting", fontsize=8)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(wrap_to_width(title, panel_w * cols, 9.5), fontsize=9.5)
    cbar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, fraction=0.025, pad=0.01)
    cbar.set_label(label, fontsize=8)
    shown = f"{len(domains)} domain x {len(classes)} class settings present" + (
        "" if (len(domains), len(classes)) == (len(DOMAIN_HALVES), len(CLASS_HALVES)) else
        f" (of the paper's {len(DOMAIN_HALVES)} x {len(CLASS_HALVES)})")
    seeds = " Under each value and in the average: ± 95 % t-interval over seeds." if t.has_seeds else ""
    note = (f"{shown}. (corr, imb): corr i = i.i.d., n = non-i.i.d., 1 = continual; imb 1 = balanced, "
            f"u = imbalanced. Hatched grey: no result; hatched red: failed; † average over fewer settings.{seeds}")
    fig.text(0.01, -0.01, wrap_to_width(note, panel_w * cols, 7), fontsize=7, va="top")
    return fig


def _mode(series: pl.Series):
    s = series.drop_nulls()
    return None if s.len() == 0 else s.mode().sort()[0]


def factor_lines(rows: pl.DataFrame, factors: list[str], path: Path, title: str) -> Path:
    """Error against each searched factor, one line per method (paper figure 3).

    For factor f the plotted rows are those whose other factors sit at their most common value (the
    base point of a one-at-a-time search); infeasible and failed points are drawn as red crosses on
    the x axis; the base value is a dashed vertical line. Optuna searches are drawn as points over
    all trials; for a 'gap' objective the gap itself is plotted (one point per trial, best starred).
    """
    from matplotlib.transforms import blended_transform_factory

    ncols = len(factors)
    fig, axes = plt.subplots(1, ncols, figsize=(3.6 * ncols + 0.6, 3.5), squeeze=False)
    optuna = "tune_algorithm" in rows.columns and (rows["tune_algorithm"] == "optuna").any()
    objective = rows["tune_objective"].drop_nulls().first() if "tune_objective" in rows.columns else None
    gap = bool(objective and objective.startswith("gap"))
    if gap:  # one row per trial, its objective as the value
        rows = rows.unique(subset="trial_id", keep="first", maintain_order=True).with_columns(
            pl.col("tune_objective_value").alias("error"),
            pl.when(pl.col("tune_objective_value").is_nan()).then(pl.lit("failed")).otherwise(pl.lit("ok")).alias("status"),
            pl.lit(objective).alias("method"),
        )
    methods = sorted(rows["method"].unique().to_list())
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    markers = {m: "osD^vP*X"[i % 8] for i, m in enumerate(methods)}  # overlapping lines stay visible
    for ax, f in zip(axes[0], factors):
        sub = rows
        if not optuna:
            for g in (g for g in FACTOR_LABELS if g != f and g in rows.columns):
                base = _mode(rows[g])
                if base is not None:
                    sub = sub.filter((pl.col(g) - base).abs() < 1e-9)
        for m in methods:
            pts = sub.filter((pl.col("method") == m) & (pl.col("status") == "ok")).sort(f)
            if pts.height:
                label = "test (source model)" if m == "test" else m
                style = dict(marker=markers[m], ms=5, mfc="none", mew=1.2, color=colours[m], label=label, alpha=0.9)
                if optuna or gap:
                    ax.plot(pts[f].to_list(), pts["error"].to_list(), linestyle="none" if optuna else "-", **style)
                else:
                    x, y, hw = factor_points(pts, f)
                    ax.errorbar(x, y, yerr=hw, capsize=2.5, elinewidth=0.9, linestyle="-", **style)
        if gap:
            ok = sub.filter(pl.col("status") == "ok")
            if ok.height:
                best = ok.sort("error", descending=True).row(0, named=True)
                ax.plot([best[f]], [best["error"]], "*", color="black", ms=11, label="best trial")
            ax.axhline(0, color="black", linewidth=0.8)
        bad = sub.filter(pl.col("status") != "ok")
        if bad.height:  # on the x axis whatever the y range
            ax.plot(bad[f].to_list(), [0.0] * bad.height, "x", color="#c01010", ms=7, mew=2, clip_on=False,
                    transform=blended_transform_factory(ax.transData, ax.transAxes), label="infeasible / failed")
        base = _mode(rows[f]) if not optuna else None
        if base is not None and rows.filter(pl.col(f) != base).height:
            ax.axvline(base, color="grey", linestyle="--", linewidth=1, label="default")
        ax.set_xlabel(FACTOR_LABELS[f], fontsize=8.5)
        ax.set_ylabel(f"{objective} (pp)" if gap else "error (%)", fontsize=8.5)
        if not gap:
            ax.set_ylim(bottom=0)
        if f.endswith("beta") and rows[f].drop_nulls().max() / max(rows[f].drop_nulls().min(), 1e-9) > 20:
            log_axis(ax, rows[f].drop_nulls().to_list())
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7.5)
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(6, len(handles)), fontsize=7.5,
               frameon=False)
    width = 3.6 * ncols + 0.6
    if not (optuna or gap):
        fig.text(0.5, 0.005, wrap_to_width("Error bars: 95 % interval, over seeds where a point has several, else one "
                                           "stream's binomial interval (a lower bound).", width, 7),
                 ha="center", va="bottom", fontsize=7)
    fig.suptitle(wrap_to_width(title, width, 9.5), fontsize=9.5)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def factor_points(pts: pl.DataFrame, factor: str) -> tuple[list[float], list[float], list[float]]:
    """Per value of ``factor``: (values, mean error, 95 % half-width), the half-width from the seeds (t-interval)
    where a point has several, else one stream's binomial interval (analysis.stats.uncertainty); 0 if none."""
    n_samples = pl.col("n_samples") if "n_samples" in pts.columns else pl.lit(None, dtype=pl.Int64)
    grouped = pts.group_by(factor).agg(pl.col("error"), n_samples.alias("n")).sort(factor)
    xs, ys, hws = [], [], []
    for value, errors, ns in grouped.rows():
        hw, _ = uncertainty(errors, ns)
        xs.append(value)
        ys.append(sum(errors) / len(errors))
        hws.append(hw or 0.0)
    return xs, ys, hws


def layer_bars(rows: pl.DataFrame, path: Path, title: str) -> Path:
    """Error per BDN domain-prediction layer (paper figure 5), grouped bars per method.

    Layers in module order; the model's default prediction layer is marked; failed cells are a
    hatched red bar of full height labelled 'failed'.
    """
    order_col = "param_layer_index" if "param_layer_index" in rows.columns else "param_layer"
    layers = rows.select("param_layer", order_col).unique().sort(order_col, nulls_last=True)["param_layer"].to_list()
    methods = sorted(rows["method"].unique().to_list())
    default = _mode(rows["tune_default_layer"]) if "tune_default_layer" in rows.columns else None
    ok = rows.filter(pl.col("status") == "ok")
    top = ok["error"].max() if ok.height else 100.0
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6.0, (0.3 + 0.12 * len(methods)) * len(layers) + 2), 4.2))
    for k, m in enumerate(methods):
        xs = np.arange(len(layers)) + (k - (len(methods) - 1) / 2) * width
        colour = plt.get_cmap("tab10")(k % 10)
        for x, layer in zip(xs, layers):
            cell = rows.filter((pl.col("method") == m) & (pl.col("param_layer") == layer))
            good = cell.filter(pl.col("status") == "ok")
            if good.height:
                ax.bar(x, good["error"].mean(), width, color=colour, label=m)
            elif cell.height:
                ax.bar(x, top, width, label="failed", **_FAILED)
                ax.text(x, top / 2, "failed", rotation=90, ha="center", va="center", fontsize=6.5, color="#a01010")
            else:
                ax.bar(x, top, width, label="missing", **_MISSING)
    labels = [f"{layer} (default)" if layer == default else str(layer) for layer in layers]
    ax.set_xticks(range(len(layers)), labels, rotation=60, ha="right", fontsize=7.5, family="monospace")
    for tick, layer in zip(ax.get_xticklabels(), layers):
        if layer == default:
            tick.set_fontweight("bold")
    ax.set_xlabel("BDN domain-prediction layer (BatchNorm layers in module order)", fontsize=8.5)
    ax.set_ylabel("error (%)", fontsize=8.5)
    ok_err = ok["error"].to_list()
    if ok_err:
        lo, hi = min(ok_err), max(ok_err)
        pad = max(1.0, 0.15 * (hi - lo))
        bottom = max(0.0, lo - 3 * pad)  # the differences between layers are small: zoom in
        ax.set_ylim(bottom, hi + pad)
        if bottom > 0:
            ax.set_ylabel(f"error (%)  [axis starts at {bottom:.0f}]", fontsize=8.5)
    ax.grid(axis="y", alpha=0.3)
    handles = {}
    for h, lab in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(lab, h)
    ax.legend(handles.values(), handles.keys(), fontsize=7.5, loc="upper center", ncol=len(handles), framealpha=0.9)
    ax.set_title(title, fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


# Mantissas of log-axis ticks, sparse to dense: the first set that puts at least LOG_TICKS_MIN ticks in the range.
_LOG_MANTISSAS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0), (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0,
                                                                          7.0, 8.0))
LOG_TICKS_MIN = 3


def log_ticks(low: float, high: float) -> list[float]:
    """Labelled ticks of a log axis over [low, high] (> 0): round values (1, 2, 5, 10 ... or denser), at least
    ``LOG_TICKS_MIN`` of them where the densest set allows, so that a range like 0.9 .. 2.6 reads 1, 1.5, 2
    rather than a lone 1 and 2."""
    low, high = min(low, high), max(low, high)
    decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
    ticks: list[float] = []
    for mantissas in _LOG_MANTISSAS:
        ticks = [float(f"{m * 10.0**e:.6g}") for e in decades for m in mantissas if low <= m * 10.0**e <= high]
        if len(ticks) >= LOG_TICKS_MIN:
            return ticks
    return ticks


def log_axis(ax, values: list[float]) -> None:
    """A log x axis labelled at ``log_ticks`` of the values' range (padded by 10 % each side)."""
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    ax.set_xscale("log")
    if not values:
        return
    low, high = min(values) / 1.1, max(values) * 1.1
    ax.set_xlim(low, high)
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(log_ticks(low, high)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def error_vs_cost(rows: pl.DataFrame, path: Path, title: str) -> Path:
    """Per method: mean error over the panel's settings (y) against time per image relative to TEST on the same
    settings (x, log scale): what a method's accuracy costs. Without TEST rows, x is milliseconds per image."""
    ok = rows.filter((pl.col("status") == "ok") & pl.col("error").is_not_null() & (pl.col("n_samples") > 0))
    ok = ok.with_columns((pl.col("adapt_time_s") / pl.col("n_samples")).alias("_spi"))
    test = ok.filter(pl.col("method") == "test").group_by("setting").agg(pl.col("_spi").mean().alias("_test"))
    label = "method_label" if "method_label" in ok.columns else "method"  # a modified method is its own point
    relative = test.height > 0
    if relative:
        ok = ok.join(test, on="setting", how="inner").with_columns((pl.col("_spi") / pl.col("_test")).alias("_x"))
    else:
        ok = ok.with_columns((1000 * pl.col("_spi")).alias("_x"))
    points = ok.group_by(pl.col(label).alias("method")).agg(pl.col("_x").mean(), pl.col("error").mean(),
                                                           pl.len().alias("n"))
    points = points.sort("_x", "method")
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ax.scatter(points["_x"].to_list(), points["error"].to_list(), s=22, color="#1f5f8b", zorder=3)
    for r in points.iter_rows(named=True):
        ax.annotate(r["method"], (r["_x"], r["error"]), textcoords="offset points", xytext=(4, 3), fontsize=7.5)
    log_axis(ax, points["_x"].to_list())
    ax.set_xlabel("time per image relative to TEST (log)" if relative else "ms per image (log; no TEST rows)",
                  fontsize=8.5)
    ax.set_ylabel("mean error over settings (%)", fontsize=8.5)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def per_domain_heatmap(table: pl.DataFrame, path: Path, title: str) -> Path:
    """Methods (rows) x domains (columns) heatmap of ``analysis.tables.per_domain_errors``; the best per domain
    outlined, so that a method that wins on average but loses on one corruption stands out."""
    methods = table["method_label"].unique(maintain_order=True).to_list()
    domains = table["domain"].unique(maintain_order=True).to_list()
    values = {(m, d): e for m, d, e in table.select("method_label", "domain", "error").iter_rows()}
    grid = np.array([[values.get((m, d), np.nan) for d in domains] for m in methods], dtype=float)
    lo, hi = _scale(grid[~np.isnan(grid)].tolist())
    cmap, norm = plt.get_cmap(CMAP), matplotlib.colors.Normalize(lo, hi)
    width = max(5.0, 0.62 * len(domains) + 2.6)
    fig, ax = plt.subplots(figsize=(width, 0.32 * len(methods) + 1.9))
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
    for j in range(len(domains)):
        column = grid[:, j]
        best = np.nanmin(column) if not np.isnan(column).all() else np.nan
        for i in range(len(methods)):
            if np.isnan(grid[i, j]):
                _mark(ax, j, i, "missing", VALUE_PT - 2)
                continue
            _annotate(ax, j, i, grid[i, j], norm, cmap, VALUE_PT - 1)
            if grid[i, j] == best:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.4))
    ax.set_xticks(range(len(domains)), [d.replace("_", " ") for d in domains], rotation=60, ha="right", fontsize=7.5)
    ax.set_yticks(range(len(methods)), methods, fontsize=8)
    ax.set_title(textwrap.fill(title, int(width * 72 / (0.55 * 9))), fontsize=9)
    cbar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.03, pad=0.02)
    cbar.set_label("Error (%)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path
