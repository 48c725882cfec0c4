"""Tables, heatmaps and rankings from sweep and tune result directories.

Examples::

    python analysis/heatmaps.py results/quick
    python analysis/heatmaps.py results/full_grid results/extra_methods --out figures/
    python analysis/heatmaps.py results/tune_factors results/tune_bdn_layer

Writes into ``--out`` (default ``<first dir>/analysis``), per panel (dataset, and other fixed
configuration; see analysis/common.py) of sweep rows:

* ``heatmap_<panel>.png``   error for every method x setting;
* ``grid_<panel>.png``      per method, the 6 domain settings x 4 class settings grid;
* ``table_<panel>.md/.tex`` the paper-style table (error per setting + average, best in bold);
* ``ranking_<panel>.md``    per setting, the methods by error (which method for a stream like yours);
* ``significance_<panel>.md`` per setting and overall, whether the best method beats the runner-up beyond
  the 95 % interval (paired over seeds; Wilcoxon signed-rank over settings; analysis/stats.py);
* ``domains_<panel>.md/.png`` error per method x domain (corruption), over all the panel's settings and seeds
  (each domain's images counted together; the best per domain marked);
* ``cells_<panel>.csv``     the numbers behind all of these (one row per method x setting, with status);
* ``orders_<group>.md/.png`` where a run has several stream orders (official / exact, sorted, dirichlet), which
  the panels keep apart: every method on every order in one table and heatmap (analysis/orders.py);

and per tune run (``tune_name`` x dataset) of tune rows:

* ``factors_<run>.png``     error against each searched factor (paper figure 3);
* ``layers_<run>.png``      error per BDN prediction layer (paper figure 5);
* ``tune_<run>.csv``        the trial rows behind them.

A folder whose cells went to an experiment tracker (``<dir>/tracking.json``) gets all of these as artifacts of its
parent run (docs/tracking.md). Missing and failed cells are shown as such (hatched / 'failed' / '—'), never dropped.
An empty or foreign directory is an error (exit code 2).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import polars as pl

from analysis.common import (
    METRICS,
    add_sweep_argument,
    check_dirs,
    load_dirs,
    metric_label,
    run_analysis,
    split_rows,
    sweep_panels,
    use_metric,
)
from analysis.orders import write_orders
from analysis.stats import best_vs_runner_up, verdict_markdown
from analysis.tables import (
    cell_status,
    paper_table,
    per_domain_errors,
    per_domain_markdown,
    ranking,
    ranking_markdown,
    to_latex,
    to_markdown,
)
from unitta.results.output_checks import OutputError, check_output_dir, is_writable
from unitta.results.replicates import METHOD_KEYS, fixed_keys
from unitta.track.attach import attach_to_trackers

__all__ = ["analyse", "main"]

_FACTORS = ("domain_alpha", "domain_beta", "class_alpha", "class_beta")
_CSV_DROP = ("per_domain", "per_class")  # and every other nested column (CSV holds flat values only)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def analyse(dirs: list[str | Path], out: Path, metric: str = "error", sweep: str | None = None,
            where: list[str] | None = None) -> list[Path]:
    """Write every table and figure for the result directories ``dirs`` into ``out``; return the paths.

    metric: the result column shown (``analysis.common.METRICS``); files of a metric other than ``error``
    carry it in their names (``heatmap_<panel>_balanced_error.png``), so both can sit in one folder.
    sweep, where: only that sweep's cells, only the rows matching ``KEY=VALUE`` terms (``load_dirs``).
    """
    from analysis import plots

    df = use_metric(load_dirs(dirs, sweep, where), metric)
    out.mkdir(parents=True, exist_ok=True)
    sweep, tune = split_rows(df)
    label, tag = metric_label(metric), "" if metric == "error" else f"_{metric}"
    written: list[Path] = []
    for panel in sweep_panels(sweep):
        name = panel.name + tag
        cells = cell_status(panel.rows)
        table = paper_table(cells, caption=panel.caption, rows=panel.rows, label=label)
        written.append(_write(out / f"table_{name}.md", to_markdown(table)))
        written.append(_write(out / f"table_{name}.tex", to_latex(table)))
        rank = ranking(cells)
        written.append(_write(out / f"ranking_{name}.md", ranking_markdown(rank, caption=panel.caption, label=label)))
        verdicts, overall = best_vs_runner_up(panel.rows)
        written.append(_write(out / f"significance_{name}.md",
                              verdict_markdown(verdicts, overall, caption=f"Best vs runner-up — {panel.caption}")))
        cells.write_csv(out / f"cells_{name}.csv")
        written.append(out / f"cells_{name}.csv")
        written.append(plots.heatmap(
            table, out / f"heatmap_{name}.png", f"{label} per method and setting — {panel.caption}", label
        ))
        written.append(plots.setting_grids(
            table, out / f"grid_{name}.png", f"{label} per method — {panel.caption}", label
        ))
        domains = per_domain_errors(panel.rows) if metric == "error" else None
        if domains is not None and domains.height:
            written.append(_write(out / f"domains_{name}.md", per_domain_markdown(domains, panel.caption)))
            written.append(plots.per_domain_heatmap(
                domains, out / f"domains_{name}.png", f"Error per domain (all settings and seeds) — {panel.caption}"
            ))
    written += write_orders(sweep, out, label) if metric == "error" else []
    if tune.height:
        written += _tune_outputs(tune, out, plots)
    return written


def _tune_outputs(tune: pl.DataFrame, out: Path, plots) -> list[Path]:
    written = []
    name_col = "tune_name" if "tune_name" in tune.columns else None
    keys = [k for k in (name_col, "dataset") if k]
    # A run's trials differ in what it searched (factors, the method's layer); any other coordinate that differs
    # (other weights after a resume, another protocol) splits the run, so a point's mean is over seeds only.
    fixed = [k for k in fixed_keys(tune, (*METHOD_KEYS, "factor_overrides")) if k not in keys]
    groups = tune.select(keys + fixed).unique().sort(keys + fixed, nulls_last=True).to_dicts()
    seen: dict[tuple, int] = {}
    for group in groups:
        key = {k: group[k] for k in keys}
        rows = tune
        for k, v in group.items():
            rows = rows.filter(pl.col(k).is_null() if v is None else (pl.col(k) == v))
        n = seen[tuple(key.values())] = seen.get(tuple(key.values()), 0) + 1
        run = _safe("_".join(str(v) for v in key.values()) + ("" if n == 1 else f"_{n}"))
        csv = out / f"tune_{run}.csv"
        rows.drop([c for c, dtype in rows.schema.items() if c in _CSV_DROP or dtype.is_nested()]).write_csv(csv)
        written.append(csv)
        setting = ", ".join(sorted(rows["setting"].unique().to_list()))
        what = f"{key.get('tune_name', 'tune')} on {key['dataset']} (setting {setting})"
        objective = rows["tune_objective"].drop_nulls().first() if "tune_objective" in rows.columns else None
        if objective and objective.startswith("gap"):
            what += f"; objective {objective}"
        others = [g for g in groups if all(g[k] == v for k, v in key.items())]
        spread = [k for k in fixed if len({str(g[k]) for g in others}) > 1]
        if spread:
            what += "; " + ", ".join(f"{k}={str(group[k])[:12]}" for k in spread)
        factors = [f for f in _FACTORS if f"param_{f}" in rows.columns and rows[f"param_{f}"].is_not_null().any()]
        if factors:
            factor_rows = rows.filter(pl.col("param_layer").is_null()) if "param_layer" in rows.columns else rows
            written.append(plots.factor_lines(
                factor_rows, factors, out / f"factors_{run}.png", f"Error vs stream factors — {what}"
            ))
        if "param_layer" in rows.columns and rows["param_layer"].is_not_null().any():
            layer_rows = rows.filter(pl.col("param_layer").is_not_null())
            written.append(plots.layer_bars(
                layer_rows, out / f"layers_{run}.png", f"Error per BDN prediction layer — {what}"
            ))
    return written


def _check_out(out: Path) -> None:
    """``--out`` must be a folder (or not exist yet) that this process can write: else one line, exit 2."""
    check_output_dir(out, flag="--out")
    if not is_writable(out):
        raise OutputError(f"output {out} is not writable; give another folder with --out")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python analysis/heatmaps.py",
        description="Tables, heatmaps and rankings from unitta sweep/tune result directories.",
        epilog="example: python analysis/heatmaps.py results/quick --out figures/quick",
    )
    parser.add_argument("dirs", nargs="+", metavar="RESULTS_DIR", help="result directories (sweep or tune)")
    parser.add_argument("--out", type=Path, help="output directory (default: <first RESULTS_DIR>/analysis)")
    parser.add_argument("--metric", default="error", choices=sorted(METRICS),
                        help="the result column to show (default: error; docs/results.md, Metrics)")
    add_sweep_argument(parser)
    args = parser.parse_args(argv)
    out = args.out or Path(args.dirs[0]) / "analysis"

    def body() -> int:
        check_dirs(args.dirs)
        _check_out(out)
        written = analyse(args.dirs, out, args.metric, args.sweep, args.where)
        for path in written:
            print(path)
        # a tracked folder's parent runs get them as artifacts (docs/tracking.md; a tracker away: one warning)
        attach_to_trackers(args.dirs, written, "analysis", args.sweep)
        return 0

    return run_analysis(body, OutputError)


if __name__ == "__main__":
    sys.exit(main())
