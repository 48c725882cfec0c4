"""One self-contained HTML page after a sweep: what a user opens to see a reproduction.

Example::

    python -m unitta.sweep sweeps/quick_seeds.yaml
    python analysis/report.py results/quick_seeds --out results/quick_seeds/report   # open report.html

Writes ``<out>/report.html`` (figures embedded as base64 PNG, no external file or network access) with, per
panel: the paper-style table (mean ± 95 % interval where there are seeds), the heatmap, the per-method
domain x class grids, best vs runner-up (analysis/stats.py) and the per-setting ranking; then the comparison with the
paper's table (the dataset's own, else ``--paper-dataset``, by default CIFAR-10-C as a proxy) with its scatter
plot and Spearman's rho; then the tune figures if the directories hold tune rows, and the hyper-parameter
selection (analysis/selection.py) of the directories that hold a ``selection.parquet``. The figures and tables
themselves are written beside it (analysis/heatmaps.py and analysis/compare_paper.py outputs).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import html
import re
import sys
from pathlib import Path

import polars as pl

from analysis import compare_paper, heatmaps, plots, selection
from analysis.common import (
    AnalysisError,
    add_sweep_argument,
    check_dirs,
    load_dirs,
    run_analysis,
    split_rows,
    sweep_panels,
)
from unitta.evaluate.segments import row_stream_cell, short_segment_warnings
from unitta.paper import PAPER_DATASETS
from unitta.results.output_checks import OutputError, check_output_dir
from unitta.results.tracking_record import read_tracking_record
from unitta.track.attach import attach_to_trackers

__all__ = ["markdown_to_html", "build_report", "main"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #222; line-height: 1.4; }
h1 { border-bottom: 2px solid #444; } h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; } th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; } .warn { background: #fff3cd; padding: 0.5em; border-left: 4px solid #e0a800; }
nav a { margin-right: 1em; } .scroll { overflow-x: auto; }
"""


def _inline(text: str) -> str:
    """Markdown inline markup of our own outputs (bold, code) -> HTML, everything else escaped."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"`(.+?)`", r"<code>\1</code>", out)
    return out.replace("\\*", "*")


def _table_cells(line: str) -> list[str]:
    """The cells of one Markdown pipe-table row; ``\\|`` is a literal bar inside a cell (``mean \\|diff\\|``)."""
    inner = line.strip().removeprefix("|")
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def markdown_to_html(md: str) -> str:
    """The subset of Markdown the analysis scripts write (headings, pipe tables, paragraphs) as HTML."""
    parts: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(_table_cells(lines[i]))
                i += 1
            head, rows = block[0], [r for r in block[1:] if not all(set(c) <= set("-:") for c in r)]
            parts.append('<div class="scroll"><table><tr>' + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            for r in rows:
                cells = "".join(
                    f'<td class="num">{_inline(c)}</td>' if re.match(r"^[*+\-]*\d", c) else f"<td>{_inline(c)}</td>"
                    for c in r)
                parts.append(f"<tr>{cells}</tr>")
            parts.append("</table></div>")
            continue
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)  # the page's own h1/h2 stay above
            parts.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            css = ' class="warn"' if "Warning" in line or "Proxy comparison" in line else ""
            parts.append(f"<p{css}>{_inline(line.strip())}</p>")
        i += 1
    return "\n".join(parts)


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def build_report(dirs: list[str | Path], out: Path, paper_dataset: str | None = None,
                 tolerance: float = compare_paper.DEFAULT_TOLERANCE, sweep: str | None = None,
                 where: list[str] | None = None) -> Path:
    """Write every figure and table into ``out`` and the page ``out/report.html``; return the page's path.

    sweep: only that sweep's cells (``analysis.common.load_dirs``)."""
    df = load_dirs(dirs, sweep, where)
    sweep_rows, tune = split_rows(df)
    written = heatmaps.analyse(dirs, out, sweep=sweep, where=where)
    has_balanced = "balanced_error" in sweep_rows.columns and sweep_rows["balanced_error"].is_not_null().any()
    if has_balanced:
        written += heatmaps.analyse(dirs, out, "balanced_error", sweep, where)
    by_name = {p.name: p for p in written}
    panel_rows = {panel.name: panel.rows for panel in sweep_panels(sweep_rows)}
    body = ["<h1>unitta reproduction report</h1>", _overview(df, dirs)]
    body += [f'<p class="warn">{html.escape(w)}</p>' for w in _segment_warnings(sweep_rows)]
    body += _chance_section(df)
    nav = []
    panels = sorted(panel_rows)
    for panel in panels:
        nav.append(f'<a href="#panel-{panel}">{html.escape(panel)}</a>')
        body.append(f'<h2 id="panel-{panel}">Results: {html.escape(panel)}</h2>')
        body.append(markdown_to_html(by_name[f"table_{panel}.md"].read_text()))
        body.append(_img(by_name[f"heatmap_{panel}.png"], f"heatmap {panel}"))
        if has_balanced:
            body.append("<h3>Error and balanced error (mean over classes present) side by side</h3>")
            body.append(markdown_to_html(metric_comparison(panel_rows[panel])))
            body.append(_img(by_name[f"heatmap_{panel}_balanced_error.png"], f"balanced error heatmap {panel}"))
        body.append("<h3>Error vs cost</h3>")
        cost = plots.error_vs_cost(panel_rows[panel], out / f"cost_{panel}.png", f"Error vs time per image — {panel}")
        body.append(_img(cost, f"error vs cost {panel}"))
        body.append("<h3>Per method: domain settings x class settings</h3>")
        body.append(_img(by_name[f"grid_{panel}.png"], f"grids {panel}"))
        if f"domains_{panel}.png" in by_name:
            body.append("<h3>Per domain (corruption), over all settings and seeds</h3>")
            body.append(_img(by_name[f"domains_{panel}.png"], f"error per domain {panel}"))
        body.append("<h3>Best vs runner-up</h3>")
        body.append(markdown_to_html(by_name[f"significance_{panel}.md"].read_text()))
        body.append("<h3>Which method for a stream like yours: ranking per setting</h3>")
        body.append(markdown_to_html(by_name[f"ranking_{panel}.md"].read_text()))
    orders = [p for p in written if p.name.startswith("orders_") and p.suffix == ".png"]
    if orders:
        nav.append('<a href="#orders">stream orders</a>')
        body.append('<h2 id="orders">Stream orders compared</h2>')
        for png in orders:
            body.append(markdown_to_html(png.with_suffix(".md").read_text()))
            body.append(_img(png, png.stem.replace("_", " ")))
    if sweep_rows.height:
        nav.append('<a href="#paper">vs paper</a>')
        body.append('<h2 id="paper">Comparison with the UniTTA paper</h2>')
        body += _paper_section(dirs, out, sweep_rows, paper_dataset, tolerance, sweep, where)
    tune_figs = [p for p in written if p.suffix == ".png" and p.name.startswith(("factors_", "layers_"))]
    if tune_figs:
        nav.append('<a href="#tune">tune</a>')
        body.append('<h2 id="tune">Tune runs</h2>')
        body += [f"<h3>{html.escape(p.stem)}</h3>" + _img(p, p.stem) for p in tune_figs]
    body += _selection_section(dirs, out, nav)
    body += _tracking_section(dirs, nav)
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>unitta report</title>"
            f"<style>{_CSS}</style></head><body>\n<nav>{' '.join(nav)}</nav>\n" + "\n".join(body)
            + "\n</body></html>\n")
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _selection_section(dirs, out: Path, nav: list[str]) -> list[str]:
    """The hyper-parameter selection of the folders that hold a ``selection.parquet`` (analysis/selection.py)."""
    chosen = [d for d in dirs if (Path(d) / "selection.parquet").is_file()]
    if not chosen:
        return []
    md, png = selection.analyse(chosen, out / "selection")
    nav.append('<a href="#selection">selection</a>')
    return ['<h2 id="selection">Hyper-parameters chosen without test labels</h2>',
            '<p class="note">default / oracle / holdout / unsupervised protocols (docs/selection.md)</p>',
            markdown_to_html(md.read_text()), _img(png, "error of each protocol's choice")]


def _tracking_section(dirs, nav: list[str]) -> list[str]:
    """Links to the runs of the folders whose cells went to an experiment tracker (``<out>/tracking.json``;
    docs/tracking.md, "In the HTML report")."""
    items = []
    for folder in dirs:
        for name, where in sorted(read_tracking_record(folder).items()):
            items.append(f"<li>{html.escape(str(folder))}: {_tracker_line(name, where)}</li>")
    if not items:
        return []
    nav.append('<a href="#tracking">tracked runs</a>')
    return ['<h2 id="tracking">Tracked runs</h2>', "<ul>", *items, "</ul>"]


def _tracker_line(name: str, where: dict) -> str:
    def esc(value) -> str:
        return html.escape(str(value))

    if name == "mlflow":
        url = where.get("url")
        if not url:
            return (f"MLflow experiment {esc(where.get('experiment'))} in {esc(where.get('tracking_uri'))} "
                    f"(<code>mlflow ui --backend-store-uri {esc(where.get('tracking_uri'))}</code>)")
        parents = ", ".join(f'<a href="{esc(url)}/runs/{esc(run_id)}">{esc(sweep)}</a>'
                            for sweep, run_id in sorted((where.get("parent_runs") or {}).items()))
        return (f'MLflow experiment <a href="{esc(url)}">{esc(where.get("experiment"))}</a>'
                + (f" (parent runs: {parents})" if parents else ""))
    if name == "wandb":
        return (f"Weights &amp; Biases project {esc(where.get('project'))} ({esc(where.get('mode'))}): "
                f"<code>wandb sync {esc(where.get('dir'))}/offline-run-*</code>")
    if name == "tensorboard":
        return f"TensorBoard: <code>tensorboard --logdir {esc(where.get('dir'))}</code>"
    return f"{esc(name)}: {esc(where)}"


def metric_comparison(rows: pl.DataFrame) -> str:
    """Markdown: per method the mean error and mean balanced error over the panel's settings, and the rank of
    each (rank 1 = lowest), so that a method that trades its rare classes for its overall error stands out."""
    ok = rows.filter((pl.col("status") == "ok") & pl.col("balanced_error").is_not_null())
    label = "method_label" if "method_label" in ok.columns else "method"  # 'rmt{...}' apart from 'rmt'
    means = ok.group_by(pl.col(label).alias("method")).agg(
        pl.col("error").mean(), pl.col("balanced_error").mean(), pl.len().alias("n"))
    means = means.with_columns(
        pl.col("error").rank("min").cast(pl.Int64).alias("rank_error"),
        pl.col("balanced_error").rank("min").cast(pl.Int64).alias("rank_balanced"),
    ).sort("error", "method")
    lines = ["| method | error (%) | rank | balanced error (%) | rank | cells |", "|---|---:|---:|---:|---:|---:|"]
    for r in means.iter_rows(named=True):
        moved = " **≠**" if r["rank_error"] != r["rank_balanced"] else ""
        lines.append(f"| {r['method']} | {r['error']:.2f} | {r['rank_error']} | {r['balanced_error']:.2f} | "
                     f"{r['rank_balanced']}{moved} | {r['n']} |")
    lines += ["", "Means over the settings present; ≠ marks a method whose rank differs between the two metrics "
              "(docs/results.md, Metrics)."]
    return "\n".join(lines) + "\n"


def _segment_warnings(rows: pl.DataFrame) -> list[str]:
    """The sweep's warnings about continual domain segments of a few batches (unitta.evaluate.segments)."""
    keys = [c for c in ("dataset", "setting", "sampler", "S", "n_per_domain", "length", "delta", "batch_size",
                        "factor_overrides") if c in rows.columns]
    if not rows.height or "setting" not in keys:
        return []
    cells = [row_stream_cell(r) for r in rows.select(keys).unique(maintain_order=True).iter_rows(named=True)]
    return short_segment_warnings(c for c in cells if c is not None)


def _chance_section(df: pl.DataFrame) -> list[str]:
    """A warning at the top and one line per cell whose source model is at chance on its stream (the row's
    ``warnings``, unitta.evaluate.chance): such cells say nothing about the methods."""
    if "warnings" not in df.columns:
        return []
    hits = df.filter(pl.col("warnings").fill_null("").str.contains("at chance"))
    if not hits.height:
        return []
    keys = [k for k in ("dataset", "model", "method", "setting", "seed") if k in hits.columns]
    lines = [f"<li>{html.escape('/'.join(str(r[k]) for k in keys))}: {html.escape(r['warnings'])}</li>"
             for r in hits.sort(keys).iter_rows(named=True)]
    return [f'<p class="warn" id="chance">Warning: in {hits.height} cell(s) the source model is at chance on its '
            "stream (check its weights: random, or trained for other classes or data?); their numbers say nothing "
            "about the methods.</p>", f'<ul class="warn">{"".join(lines)}</ul>']


def _overview(df: pl.DataFrame, dirs) -> str:
    n_ok = df.filter(pl.col("status") == "ok").height
    items = [f"result directories: {', '.join(html.escape(str(d)) for d in dirs)}",
             f"{df.height} result rows: {n_ok} ok, {df.height - n_ok} failed",
             f"datasets: {', '.join(sorted(df['dataset'].unique().to_list()))}"]
    if "seed" in df.columns:
        items.append(f"seeds: {', '.join(str(s) for s in sorted(df['seed'].drop_nulls().unique().to_list()))}")
    profiles = sorted({p or "default" for p in df["profile"].to_list()}) if "profile" in df.columns else ["default"]
    items.append(f"profile: {', '.join(profiles)}")
    if "git_commit" in df.columns and df["git_commit"].drop_nulls().len():
        items.append(f"git commit: {', '.join(sorted(df['git_commit'].drop_nulls().unique().to_list()))}")
    items.append(f"report written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


# The embedded Fashion-MNIST-C stands in for CIFAR-10-C (10 classes, the 15 corruptions at CIFAR-10-C's
# parameters, docs/models.md): the report compares it with the paper's CIFAR-10-C table unless told otherwise.
PAPER_PROXY = "fmnist-c"


def _paper_section(dirs, out: Path, rows: pl.DataFrame, paper_dataset: str | None, tolerance: float,
                   sweep: str | None, where: list[str] | None) -> list[str]:
    datasets = set(rows["dataset"].unique().to_list())
    if paper_dataset is None and not datasets & set(PAPER_DATASETS):
        if PAPER_PROXY not in datasets:  # a folder of the user's own images, a natural-shift set, ...
            data = html.escape(", ".join(sorted(datasets)))
            return [f'<p class="note">No comparison with the paper: the data ({data}) '
                    f"is none of the paper's datasets ({html.escape(', '.join(PAPER_DATASETS))}); "
                    "<code>--paper-dataset cifar10-c</code> compares anyway.</p>"]
        paper_dataset = "cifar10-c"
    notes: list[str] = []
    try:
        comparisons = compare_paper.compare(dirs, out, paper_dataset, tolerance, log=notes.append, sweep=sweep,
                                            where=where)
    except AnalysisError as exc:
        return [f'<p class="warn">No comparison: {html.escape(str(exc))}</p>']
    parts = [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    for c in comparisons:
        md = next(p for p in c.paths if p.suffix == ".md").read_text()
        png = next(p for p in c.paths if p.suffix == ".png")
        parts += [f'<p class="warn">Warning: {html.escape(w)}.</p>' for w in compare_paper.warnings_of(c)]
        parts.append(f"<p><b>{html.escape(compare_paper.rho_text(c))}</b> ({len(c.rho_methods)} methods, "
                     f"{len(c.rho_settings)} settings)</p>")
        parts.append(_img(png, f"ours vs paper {c.stem}"))
        parts.append(markdown_to_html(md))
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python analysis/report.py",
        description="One self-contained HTML page (tables, heatmaps, paper comparison, tune plots) from result dirs.",
        epilog="example: python analysis/report.py results/quick --out results/quick/report",
    )
    parser.add_argument("dirs", nargs="+", metavar="RESULTS_DIR", help="sweep and/or tune result directories")
    parser.add_argument("--out", type=Path, help="output directory (default: <first RESULTS_DIR>/report)")
    parser.add_argument("--paper-dataset", choices=sorted(PAPER_DATASETS),
                        help="paper table to compare with (default: the run's own dataset; cifar10-c for the embedded "
                             "fmnist-c; none for other data)")
    parser.add_argument("--tolerance", type=float, default=compare_paper.DEFAULT_TOLERANCE,
                        help="points added to our 95 %% uncertainty before a difference to the paper is highlighted")
    add_sweep_argument(parser)
    args = parser.parse_args(argv)
    out = args.out or Path(args.dirs[0]) / "report"

    def body() -> int:
        check_dirs(args.dirs)
        check_output_dir(out, flag="--out")
        page = build_report(args.dirs, out, args.paper_dataset, args.tolerance, args.sweep, args.where)
        print(page)
        # a tracked folder's parent runs get the self-contained page as an artifact (docs/tracking.md)
        attach_to_trackers(args.dirs, [page], "report", args.sweep)
        return 0

    return run_analysis(body, OutputError)


if __name__ == "__main__":
    sys.exit(main())
