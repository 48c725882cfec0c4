"""Our results side by side with the UniTTA paper's published tables.

Examples::

    python analysis/compare_paper.py results/cifar10                      # CIFAR-10-C run vs the paper's CIFAR-10-C
    python analysis/compare_paper.py results/quick --paper-dataset cifar10-c   # Fashion-MNIST-C vs CIFAR-10-C
    python analysis/compare_paper.py results/a results/b --out figures/ --tolerance 1.0

Per panel of sweep rows (a dataset, split further when the configuration varies; analysis/common.py) it writes
into ``--out`` (default ``<first dir>/analysis``), ``<stem>`` = ``<panel>_vs_<paper dataset>``:

* ``compare_<stem>.md`` / ``.tex`` / ``.csv``: ours vs paper per (method, setting), the difference, and whether
  it exceeds our run's own 95 % uncertainty (the t-interval over seeds, or one stream's binomial interval) plus
  ``--tolerance`` points (not assessed in a proxy comparison, where data and model differ); the per-method
  mean difference; then per setting the methods ranked by ours and by the paper's error side by side;
* ``scatter_<stem>.png``: ours (y) vs paper (x), one colour per method, each point labelled with its setting,
  the y = x line;
* ``ranks_<stem>.png``: each method's rank by mean error, ours (y) vs the paper's (x);

and prints, per panel, its warnings (profile, proxy) first, then ``spearman_rho=<value>`` (the Spearman rank
correlation of the methods' mean errors over the settings both have), ``rho_p=<value>`` (its exact or
permutation p-value), ``rho_ci=[<low>, <high>]`` (a bootstrap interval over methods and settings;
analysis/rank_stats.py), the per-method mean differences, and ``spearman_rho[<setting>]=<value>`` per
setting. Cells without a value on either side are named in the table, never dropped. The paper's values
come from unitta.paper (its appendix tables); the run's ``profile`` column (absent = 'default') is reported,
with a warning when it is not 'reference'.
docs/analysis.md ("Comparing with the paper") says how to read the outputs.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from scipy.stats import rankdata

from analysis import mariodoebler_tables
from analysis.common import (
    AnalysisError,
    Panel,
    add_sweep_argument,
    check_dirs,
    load_dirs,
    method_order,
    run_analysis,
    split_rows,
    sweep_panels,
)
from analysis.rank_stats import N_BOOTSTRAP, bootstrap_rho_interval, p_kind_text, spearman_p
from analysis.stats import binomial_halfwidth, complete_block
from analysis.tables import cell_status
from analysis.tables import tex_escape as _tex
from unitta.paper import PAPER_DATASETS, load_paper_table
from unitta.streams.settings import setting_order

__all__ = [
    "DEFAULT_TOLERANCE", "Comparison", "compare_panel", "spearman", "with_uncertainty", "method_deltas",
    "warnings_of", "print_comparison", "compare", "main",
]

#: Points of error added to the run's own uncertainty before a difference is highlighted: the paper's runs
#: differ from ours in hardware and library versions, which move a cell by a fraction of a point.
DEFAULT_TOLERANCE = 2.0


@dataclass
class Comparison:
    """One panel compared with one paper table.

    cells: one row per (method, setting) of the panel (columns method, setting, ours, uncertainty, basis,
    n_seeds, ours_status, paper, diff, beyond, note; beyond is null in a proxy comparison); rho: Spearman over
    the methods' mean errors on the common settings (nan if undefined); rho_methods / rho_settings: what it was
    computed over; rho_p / rho_p_kind: its p-value and how it was computed ('exact', 'permutation');
    rho_ci: its bootstrap 95 % interval over methods and settings; rho_per_setting: setting -> rho over the
    methods with both values there; deltas: per method the mean of ours - paper (``method_deltas``).
    """

    name: str
    dataset: str
    paper_dataset: str
    caption: str
    profiles: list[str]
    tolerance: float
    cells: pl.DataFrame
    rho: float
    rho_methods: list[str]
    rho_settings: list[str]
    rho_per_setting: dict[str, float]
    paper_only_methods: list[str]
    paper_only_settings: list[str]
    paths: list[Path] = field(default_factory=list)
    rho_p: float = math.nan
    rho_p_kind: str = "none"
    rho_ci: tuple[float, float] = (math.nan, math.nan)
    deltas: pl.DataFrame | None = None

    @property
    def stem(self) -> str:
        return f"{self.name}_vs_{self.paper_dataset}"

    @property
    def proxy(self) -> bool:
        return self.dataset != self.paper_dataset


def _profiles(rows: pl.DataFrame) -> list[str]:
    if "profile" not in rows.columns:
        return ["default"]
    return sorted({p or "default" for p in rows["profile"].to_list()})


def compare_panel(panel: Panel, paper_dataset: str, tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    """Compare one panel of our rows with the paper's table of ``paper_dataset``."""
    paper = load_paper_table(paper_dataset).select("method", "setting", pl.col("error").alias("paper"))
    proxy = panel.rows["dataset"][0] != paper_dataset  # absolute errors are not comparable: no "beyond" marks
    cells = cell_status(panel.rows)
    out = []
    for r in cells.iter_rows(named=True):
        m, s = r["method_label"], r["setting"]
        hit = paper.filter((pl.col("method") == m) & (pl.col("setting") == s))["paper"]
        p = hit[0] if hit.len() else None
        ours = r["error"]
        if r["n_ok"] >= 2:
            unc, basis = r["ci"], "seeds"
        elif ours is not None and r["n_samples"]:
            unc, basis = binomial_halfwidth(ours, int(round(r["n_samples"]))), "binomial"
        else:
            unc, basis = None, "none"
        diff = ours - p if ours is not None and p is not None else None
        beyond = None if proxy else diff is not None and abs(diff) > (unc or 0.0) + tolerance
        notes = []
        if r["status"] in ("failed", "missing"):
            notes.append(f"ours {r['status']}")
        elif r["status"] == "partial":
            notes.append(f"ours partial ({r['n_failed']} seed(s) failed)")
        if p is None:
            notes.append("no paper value" if m in paper["method"].to_list() else "method not in the paper")
        out.append(dict(method=m, setting=s, ours=ours, uncertainty=unc, basis=basis, n_seeds=r["n_ok"],
                        ours_status=r["status"], paper=p, diff=diff, beyond=beyond, note="; ".join(notes)))
    schema = dict(method=pl.String, setting=pl.String, ours=pl.Float64, uncertainty=pl.Float64, basis=pl.String,
                  n_seeds=pl.Int64, ours_status=pl.String, paper=pl.Float64, diff=pl.Float64, beyond=pl.Boolean,
                  note=pl.String)
    table = pl.DataFrame(out, schema=schema)
    rho, rho_methods, rho_settings = spearman(table)
    per_setting = {}
    for s in setting_order(table["setting"].to_list()):
        both = table.filter((pl.col("setting") == s) & pl.col("diff").is_not_null())
        per_setting[s] = _rho(both["ours"].to_list(), both["paper"].to_list())
    ours_methods = set(table["method"].to_list())
    paper_only_m = method_order(set(paper["method"].to_list()) - ours_methods)
    paper_only_s = setting_order(set(paper["setting"].to_list()) - set(table["setting"].to_list()))
    c = Comparison(panel.name, panel.rows["dataset"][0], paper_dataset, panel.caption, _profiles(panel.rows),
                   tolerance, table, rho, rho_methods, rho_settings, per_setting, paper_only_m, paper_only_s)
    return with_uncertainty(c)


def _block(table: pl.DataFrame, methods: list[str], settings: list[str]) -> tuple[list[list[float]], ...]:
    """(ours, paper) as methods x settings matrices over a complete block."""
    value = {(m, s): (o, p) for m, s, o, p in table.select("method", "setting", "ours", "paper").rows()}
    ours = [[value[(m, s)][0] for s in settings] for m in methods]
    paper = [[value[(m, s)][1] for s in settings] for m in methods]
    return ours, paper


def with_uncertainty(c: Comparison) -> Comparison:
    """``c`` with rho's p-value, its bootstrap interval over methods and settings, and the per-method deltas."""
    c.deltas = method_deltas(c.cells, c.rho_methods, c.rho_settings)
    if len(c.rho_methods) < 3 or not c.rho_settings:
        return c
    ours, paper = _block(c.cells, c.rho_methods, c.rho_settings)
    means = [(sum(o) / len(o), sum(p) / len(p)) for o, p in zip(ours, paper)]
    c.rho_p, c.rho_p_kind = spearman_p([a for a, _ in means], [b for _, b in means])
    lo, hi, _ = bootstrap_rho_interval(ours, paper)
    c.rho_ci = (lo, hi)
    return c


def method_deltas(table: pl.DataFrame, methods: list[str], settings: list[str]) -> pl.DataFrame:
    """Per method with both values somewhere: the settings it has, mean and sd of ours - paper, mean |ours -
    paper|, and for the methods of rho's block (``methods`` x ``settings``) the rank of the method's mean error
    there, ours and the paper's (1 = lowest error, ties averaged)."""
    both = table.filter(pl.col("diff").is_not_null())
    ranks: dict[str, tuple[float, float]] = {}
    if methods and settings:
        ours, paper = _block(both, methods, settings)
        mean_o, mean_p = ([sum(r) / len(r) for r in side] for side in (ours, paper))
        ranks = dict(zip(methods, zip(rankdata(mean_o).tolist(), rankdata(mean_p).tolist())))
    rows = []
    for m in method_order(both["method"].unique().to_list()):
        d = both.filter(pl.col("method") == m)["diff"]
        rank_o, rank_p = ranks.get(m, (None, None))
        rows.append(dict(method=m, n_settings=d.len(), mean_diff=d.mean(), sd_diff=d.std(),
                         mean_abs_diff=d.abs().mean(), rank_ours=rank_o, rank_paper=rank_p))
    schema = dict(method=pl.String, n_settings=pl.Int64, mean_diff=pl.Float64, sd_diff=pl.Float64,
                  mean_abs_diff=pl.Float64, rank_ours=pl.Float64, rank_paper=pl.Float64)
    return pl.DataFrame(rows, schema=schema)


def _rho(a: list[float], b: list[float]) -> float:
    """Spearman's rho of two paired lists; nan for fewer than 3 pairs or a constant side."""
    from scipy.stats import spearmanr

    if len(a) < 3:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant input: scipy warns and returns nan, which we report as such
        return float(spearmanr(a, b).statistic)


def _rho_text(rho: float, n_methods: int | None = None) -> str:
    """rho with 3 decimals, or why it is undefined (never 'nan')."""
    if not math.isnan(rho):
        return f"{rho:.3f}"
    if n_methods is not None and n_methods < 3:
        return f"undefined ({n_methods} methods with both values; a rank correlation needs 3 or more)"
    return "undefined (fewer than 3 methods with both values, or one side's errors all equal)"


def spearman(table: pl.DataFrame) -> tuple[float, list[str], list[str]]:
    """Spearman's rho between our and the paper's mean error per method: (rho, methods, settings).

    Every mean is over the same settings: the methods and settings are the largest complete block of cells
    with both values (analysis.stats.complete_block); the caller names the methods left out.
    """
    both = table.filter(pl.col("diff").is_not_null())
    if both.height == 0:
        return math.nan, [], []
    have: dict[str, set[str]] = {}
    for m, setting in both.select("method", "setting").rows():
        have.setdefault(m, set()).add(setting)
    methods, settings = complete_block(have)
    methods, settings = method_order(methods), setting_order(settings)
    if not settings:
        return math.nan, methods, settings
    means = both.filter(pl.col("method").is_in(methods) & pl.col("setting").is_in(settings))
    means = means.group_by("method").agg(pl.col("ours").mean(), pl.col("paper").mean()).sort("method")
    return _rho(means["ours"].to_list(), means["paper"].to_list()), methods, settings


def _ranks_by(table: pl.DataFrame, setting: str, col: str) -> list[tuple[str, float]]:
    sub = table.filter((pl.col("setting") == setting) & pl.col("diff").is_not_null()).sort([col, "method"])
    return list(zip(sub["method"].to_list(), sub[col].to_list()))


def _fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def warnings_of(c: Comparison) -> list[str]:
    """What limits the comparison, to read before its numbers: a run without the reference profile, a proxy."""
    out = []
    if any(p != "reference" for p in c.profiles):
        out.append(f"profile {', '.join(c.profiles)}, not 'reference': methods ran with the project's default "
                   "hyper-parameters rather than the reference implementation's; differences can come from that alone")
    if c.proxy:
        out.append(f"proxy comparison: our {c.dataset} against the paper's {c.paper_dataset}; different data and "
                   "model, so absolute errors are not expected to agree (no cell is marked beyond the paper): compare "
                   "the methods' order (Spearman's rho, its p-value and interval, the rankings)")
    return out


def rho_text(c: Comparison) -> str:
    """'spearman_rho=0.600 rho_p=0.350 (exact) rho_ci=[-0.10, 1.00]' style summary of rho's uncertainty."""
    lo, hi = c.rho_ci
    ci = f"[{_fmt(lo, 2)}, {_fmt(hi, 2)}]"
    return (f"spearman_rho={_rho_text(c.rho, len(c.rho_methods))}, "
            f"rho_p={_fmt(c.rho_p, 3)} ({p_kind_text(c.rho_p_kind)}, two-sided), "
            f"rho_ci={ci} (95 % bootstrap over methods and settings, {N_BOOTSTRAP} resamples)")


def _summary(c: Comparison) -> list[str]:
    n_both = c.cells.filter(pl.col("diff").is_not_null()).height
    mad = c.cells["diff"].abs().mean()
    model = PAPER_DATASETS[c.paper_dataset]
    lines = [f"**Warning: {w[:1].upper()}{w[1:]}.**" for w in warnings_of(c)]
    lines += [f"Ours: {c.caption}.", f"Paper: {c.paper_dataset}, model {model} (UniTTA paper, appendix tables).",
              f"Profile of our run: {', '.join(c.profiles)}."]
    if c.proxy:
        lines.append(f"{n_both} cells with both values; mean |ours - paper| = {_fmt(mad, 2)} points (not assessed "
                     "cell by cell: a proxy).")
    else:
        n_beyond = int(c.cells["beyond"].sum())
        lines.append(f"{n_both} cells with both values; mean |ours - paper| = {_fmt(mad, 2)} points; {n_beyond} "
                     f"beyond our 95 % uncertainty + {c.tolerance:g} points (in bold).")
    lines.append(f"{rho_text(c)}; over the mean errors of {len(c.rho_methods)} methods "
                 f"({', '.join(c.rho_methods) or 'none'}) on {len(c.rho_settings)} common settings "
                 f"({', '.join(c.rho_settings) or 'none'}).")
    left_out = method_order(set(c.cells.filter(pl.col("diff").is_not_null())["method"].to_list()) - set(c.rho_methods))
    if left_out:
        lines.append("Left out of spearman_rho (keeping them would cost more settings than they add): "
                     f"{', '.join(left_out)}.")
    if c.paper_only_methods:
        lines.append(f"Paper methods not in this run: {', '.join(c.paper_only_methods)}.")
    if c.paper_only_settings:
        lines.append(f"Paper settings not in this run ({len(c.paper_only_settings)}): "
                     f"{', '.join(c.paper_only_settings)}.")
    return lines


def delta_rows(c: Comparison) -> list[str]:
    """The per-method mean differences as aligned text lines (a header, then one line per method)."""
    lines = [f"{'method':<16} {'settings':>8} {'mean ours-paper':>15} {'sd':>6} {'mean |diff|':>11} "
             f"{'rank ours':>9} {'rank paper':>10}"]
    for r in (c.deltas.iter_rows(named=True) if c.deltas is not None else []):
        lines.append(f"{r['method']:<16} {r['n_settings']:>8} {_signed(r['mean_diff']):>15} {_fmt(r['sd_diff']):>6} "
                     f"{_fmt(r['mean_abs_diff']):>11} {_fmt(r['rank_ours']):>9} {_fmt(r['rank_paper']):>10}")
    return lines


def _signed(v: float | None) -> str:
    text = _fmt(v)
    return "+" + text if v is not None and not math.isnan(v) and v >= 0 else text


def to_markdown(c: Comparison) -> str:
    """The comparison table, the summary above it and the rankings below it, as Markdown."""
    lines = [f"# {c.name} vs the paper's {c.paper_dataset}", ""] + [f"{x}  " for x in _summary(c)]
    lines += ["", "## Per method (mean over the settings with both values)", "",
              "| method | settings | mean ours - paper | sd | mean \\|diff\\| | rank ours | rank paper |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in (c.deltas.iter_rows(named=True) if c.deltas is not None else []):
        lines.append(f"| {r['method']} | {r['n_settings']} | {_signed(r['mean_diff'])} | {_fmt(r['sd_diff'])} | "
                     f"{_fmt(r['mean_abs_diff'])} | {_fmt(r['rank_ours'])} | {_fmt(r['rank_paper'])} |")
    lines += ["", "Ranks: of the method's mean error over rho's common settings (1 = lowest error), ours and the "
              "paper's; blank for a method outside rho's block.", "", "## Cells", ""]
    beyond_head = "beyond?" if not c.proxy else "beyond? (not assessed: proxy)"
    lines += [f"| method | setting | ours | ± (95 %) | basis | paper | ours - paper | {beyond_head} | note |",
              "|---|---|---:|---:|---|---:|---:|---|---|"]
    for r in c.cells.iter_rows(named=True):
        diff = _signed(r["diff"])
        if r["beyond"]:
            diff = f"**{diff}**"
        lines.append(f"| {r['method']} | {r['setting']} | {_fmt(r['ours'])} | {_fmt(r['uncertainty'])} | {r['basis']} "
                     f"| {_fmt(r['paper'], 2)} | {diff} | {'yes' if r['beyond'] else ''} | {r['note'] or ''} |")
    beyond_note = (f"beyond? = |ours - paper| > ± + {c.tolerance:g} points." if not c.proxy else
                   "beyond? is not assessed in a proxy comparison: different data and model.")
    lines += ["", "± (95 %): the half-width of our 95 % interval, from the seeds (t-interval) or, with one seed, "
              f"the stream's binomial interval (a lower bound: stream images are correlated). {beyond_note}",
              "", "## Rankings per setting (best first)", "",
              "| setting | ours | paper | spearman_rho |", "|---|---|---|---:|"]
    for s, rho in c.rho_per_setting.items():
        ours = " < ".join(f"{m} ({v:.1f})" for m, v in _ranks_by(c.cells, s, "ours")) or "—"
        paper = " < ".join(f"{m} ({v:.1f})" for m, v in _ranks_by(c.cells, s, "paper")) or "—"
        lines.append(f"| {s} | {ours} | {paper} | {_fmt(rho, 2)} |")
    lines += ["", "Only the methods with both values in a setting are ranked; rho needs at least 3."]
    return "\n".join(lines) + "\n"


def to_latex(c: Comparison) -> str:
    """The comparison table and the rank correlations as LaTeX (booktabs)."""
    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", r"\begin{tabular}{llrrrrl}", r"\toprule",
             r"Method & Setting & Ours & $\pm$ & Paper & Ours$-$Paper & Note \\", r"\midrule"]
    for r in c.cells.iter_rows(named=True):
        diff = _fmt(r["diff"])
        if r["diff"] is not None and r["diff"] >= 0:
            diff = "+" + diff
        diff = r"\textbf{" + diff + "}" if r["beyond"] else _tex(diff)
        lines.append(" & ".join([_tex(r["method"]), r["setting"], _tex(_fmt(r["ours"])), _tex(_fmt(r["uncertainty"])),
                                 _tex(_fmt(r["paper"], 2)), diff, _tex(r["note"] or "")]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    marks = ("a proxy comparison (different data and model): no difference is marked" if c.proxy else
             f"bold where the difference exceeds it by more than {c.tolerance:g} points")
    cap = (f"Ours ({c.dataset}) vs the UniTTA paper ({c.paper_dataset}): error (%), our 95 % half-width, "
           f"{marks}. Spearman's rho of the methods' mean errors = {_fmt(c.rho, 3)} (p = {_fmt(c.rho_p, 3)}, "
           f"{p_kind_text(c.rho_p_kind)}; 95 % bootstrap interval [{_fmt(c.rho_ci[0], 2)}, {_fmt(c.rho_ci[1], 2)}]; "
           f"{len(c.rho_methods)} methods, {len(c.rho_settings)} settings). Profile: {', '.join(c.profiles)}.")
    lines += [rf"\caption{{{_tex(cap)}}}", r"\end{table}", "",
              r"\begin{tabular}{lr}", r"\toprule", r"Setting & Spearman $\rho$ \\", r"\midrule"]
    lines += [f"{s} & {_tex(_fmt(rho, 2))} " + r"\\" for s, rho in c.rho_per_setting.items()]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def scatter(c: Comparison, path: Path) -> Path:
    """Ours (y) vs paper (x), one colour per method, error bars = our 95 % half-width, the y = x line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    both = c.cells.filter(pl.col("diff").is_not_null())
    fig, ax = plt.subplots(figsize=(6.8, 5.2))
    methods = method_order(both["method"].unique().to_list())
    cmap = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
    for i, m in enumerate(methods):
        sub = both.filter(pl.col("method") == m)
        ax.errorbar(sub["paper"].to_list(), sub["ours"].to_list(), yerr=sub["uncertainty"].fill_null(0).to_list(),
                    fmt="osD^vP*Xh<>p"[i % 12], ms=5, mfc="none", mew=1.2, color=cmap(i % cmap.N), capsize=2,
                    elinewidth=0.8, linestyle="none", label=m)
        for x, y, code in zip(sub["paper"].to_list(), sub["ours"].to_list(), sub["setting"].to_list()):
            ax.annotate(code, (x, y), xytext=(3, 2), textcoords="offset points", fontsize=5,
                        color=cmap(i % cmap.N))
    vals = both["ours"].to_list() + both["paper"].to_list()
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 100.0)
    pad = max(2.0, 0.05 * (hi - lo))
    lo, hi = max(0.0, lo - pad), hi + pad
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, linestyle="--", label="y = x")
    if not c.proxy:  # a tolerance on absolute errors means nothing when data and model differ
        ax.fill_between([lo, hi], [lo - c.tolerance, hi - c.tolerance], [lo + c.tolerance, hi + c.tolerance],
                        color="grey", alpha=0.15, linewidth=0, label=f"± {c.tolerance:g} points")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(f"paper: {c.paper_dataset}, {PAPER_DATASETS[c.paper_dataset]} — error (%)", fontsize=8.5)
    ax.set_ylabel(f"ours: {c.dataset} — error (%)", fontsize=8.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    proxy = " (proxy)" if c.proxy else ""
    ax.set_title(f"Ours vs paper{proxy}: Spearman ρ of method means = {_fmt(c.rho, 2)}\n"
                 f"(p = {_fmt(c.rho_p, 3)}, 95 % CI [{_fmt(c.rho_ci[0], 2)}, {_fmt(c.rho_ci[1], 2)}]; "
                 f"{len(c.rho_methods)} methods, {len(c.rho_settings)} settings)", fontsize=9)
    note = (f"{len(both)} cells, labelled with their setting; error bars: our 95 % interval; profile "
            f"{', '.join(c.profiles)}. {c.caption}")
    ax.text(0.0, -0.12, textwrap.fill(note, 95), transform=ax.transAxes, fontsize=6.5, va="top")
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def rank_plot(c: Comparison, path: Path) -> Path:
    """Each method of rho's block at (the paper's rank, our rank) of its mean error, labelled; the diagonal is
    perfect agreement. Ranks, not errors: what a proxy comparison can be read for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = c.deltas.filter(pl.col("rank_ours").is_not_null()) if c.deltas is not None else pl.DataFrame()
    n = max(d.height, 2)
    side = min(3.0 + 0.25 * n, 8.0)
    fig, ax = plt.subplots(figsize=(side, side))
    ax.plot([1, n], [1, n], color="grey", linestyle="--", linewidth=1)
    for m, x, y in d.select("method", "rank_paper", "rank_ours").rows():
        ax.plot(x, y, "o", color="tab:blue", ms=5)
        ax.annotate(m, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set_xlim(0.5, n + 0.5)
    ax.set_ylim(0.5, n + 0.5)
    ax.set_aspect("equal")
    ax.set_xlabel(f"rank in the paper ({c.paper_dataset}), 1 = lowest error", fontsize=8)
    ax.set_ylabel(f"our rank ({c.dataset})", fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(textwrap.fill(f"Method ranks by mean error over {len(c.rho_settings)} settings: ρ = "
                               f"{_fmt(c.rho, 2)}, p = {_fmt(c.rho_p, 3)}, 95 % CI [{_fmt(c.rho_ci[0], 2)}, "
                               f"{_fmt(c.rho_ci[1], 2)}]", 48), fontsize=8.5)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def compare(dirs: list[str | Path], out: Path, paper_dataset: str | None = None,
            tolerance: float = DEFAULT_TOLERANCE, log=print, sweep: str | None = None,
            where: list[str] | None = None) -> list[Comparison]:
    """Compare every panel of ``dirs`` with the paper, write the outputs into ``out``; return the comparisons.

    ``paper_dataset`` None: each panel with its own dataset's table (panels of a dataset the paper does not
    publish are named through ``log`` and skipped; none left is an AnalysisError).
    """
    if paper_dataset is not None and paper_dataset not in PAPER_DATASETS:
        raise AnalysisError(f"--paper-dataset {paper_dataset!r}: the paper publishes {', '.join(PAPER_DATASETS)}")
    if tolerance < 0 or math.isnan(tolerance):
        raise AnalysisError(f"--tolerance {tolerance}: must be >= 0 points")
    rows, _ = split_rows(load_dirs(dirs, sweep, where))
    panels = sweep_panels(rows)
    if not panels:
        raise AnalysisError("no sweep rows to compare (tune rows are not compared with the paper)")
    comparisons, skipped = [], []
    for panel in panels:
        if sampler := mariodoebler_tables.not_ulmm(panel):  # sorted / dirichlet orders: no UniTTA-paper counterpart
            skipped.append(f"note: {panel.name}: the {sampler} sampler's streams are not the "
                           "paper's; skipped (compare them with --reference mariodoebler)")
            continue
        target = paper_dataset or panel.rows["dataset"][0]
        if target not in PAPER_DATASETS:
            skipped.append(f"note: {panel.name}: the paper publishes no {target} table; skipped "
                           f"(compare with a proxy: --paper-dataset cifar10-c)")
            continue
        comparisons.append(compare_panel(panel, target, tolerance))
    if comparisons:
        for note in skipped:
            log(note)
    else:
        datasets = sorted({p.rows["dataset"][0] for p in panels})
        raise AnalysisError(f"the paper publishes no table for {', '.join(datasets)} "
                            f"(it has {', '.join(PAPER_DATASETS)}); compare with a proxy: --paper-dataset cifar10-c")
    out.mkdir(parents=True, exist_ok=True)
    for c in comparisons:
        for suffix, text in (("md", to_markdown(c)), ("tex", to_latex(c))):
            path = out / f"compare_{c.stem}.{suffix}"
            path.write_text(text)
            c.paths.append(path)
        c.cells.write_csv(out / f"compare_{c.stem}.csv")
        c.paths.append(out / f"compare_{c.stem}.csv")
        c.paths.append(scatter(c, out / f"scatter_{c.stem}.png"))
        c.paths.append(rank_plot(c, out / f"ranks_{c.stem}.png"))
    return comparisons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python analysis/compare_paper.py",
        description="Compare unitta sweep results with the UniTTA paper's published error tables.",
        epilog="example: python analysis/compare_paper.py results/quick --paper-dataset cifar10-c",
    )
    parser.add_argument("dirs", nargs="+", metavar="RESULTS_DIR", help="sweep result directories")
    parser.add_argument("--paper-dataset", choices=sorted(PAPER_DATASETS),
                        help="compare every panel with this paper table (e.g. Fashion-MNIST-C with cifar10-c as a "
                             "proxy); default: each panel's own dataset")
    parser.add_argument("--out", type=Path, help="output directory (default: <first RESULTS_DIR>/analysis)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"points added to our 95 %% uncertainty before a difference is highlighted "
                             f"(default {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--reference", choices=("unitta", mariodoebler_tables.REFERENCE_NAME), default="unitta",
                        help="unitta: the UniTTA paper's tables (default); mariodoebler: the other TTA benchmark's "
                             "published errors, matched by protocol (analysis/mariodoebler_tables.py)")
    add_sweep_argument(parser)
    args = parser.parse_args(argv)
    out = args.out or Path(args.dirs[0]) / "analysis"

    def body() -> int:
        check_dirs(args.dirs)
        if args.reference == mariodoebler_tables.REFERENCE_NAME:
            mariodoebler_tables.run(args.dirs, out, args.paper_dataset, sweep=args.sweep, where=args.where)
            return 0
        for c in compare(args.dirs, out, args.paper_dataset, args.tolerance,
                         log=lambda msg: print(msg, file=sys.stderr), sweep=args.sweep, where=args.where):
            print_comparison(c)
        return 0

    return run_analysis(body)


def print_comparison(c: Comparison, out=None) -> None:
    """One panel's printed summary: its warnings first, then rho with its p-value and interval, the
    per-method deltas, the per-setting rhos and the files written (to ``out``, default stdout)."""
    out = out or sys.stdout
    for w in warnings_of(c):  # once, with the numbers it qualifies (not a second time on stderr)
        print(f"warning: {c.name}: {w}", file=out)
    print(f"# {c.name} vs paper {c.paper_dataset}" + (" (proxy)" if c.proxy else "")
          + f": profile {', '.join(c.profiles)}; {len(c.rho_methods)} methods x {len(c.rho_settings)} settings",
          file=out)
    print(f"spearman_rho={_rho_text(c.rho, len(c.rho_methods))}", file=out)
    print(f"rho_p={_fmt(c.rho_p, 3)}  ({p_kind_text(c.rho_p_kind)}, two-sided, {len(c.rho_methods)} methods)",
          file=out)
    print(f"rho_ci=[{_fmt(c.rho_ci[0], 3)}, {_fmt(c.rho_ci[1], 3)}]  (95 % bootstrap over methods and settings, "
          f"{N_BOOTSTRAP} resamples)", file=out)
    print("per method, ours - paper (points):", file=out)
    for line in delta_rows(c):
        print("  " + line, file=out)
    for s, rho in c.rho_per_setting.items():
        print(f"spearman_rho[{s}]={_rho_text(rho)}", file=out)
    for path in c.paths:
        print(path, file=out)


if __name__ == "__main__":
    sys.exit(main())
