"""``unitta select CONFIG.yaml``: choose each method's hyper-parameters by the default, oracle, holdout and
unsupervised protocols on the sweep's executor, and write ``<out>/selection.parquet`` (docs/selection.md).

Examples::

    unitta select sweeps/select_quick.yaml --local          # in this process, minutes on a laptop CPU
    unitta select sweeps/select_quick.yaml                  # Ray on this machine (or RAY_ADDRESS)
    python -m unitta.select sweeps/select_grid.yaml --dry-run

Every trial is an ordinary cell (``<out>/cells/<cell_id>.parquet``, its point in ``method_kwargs``), so the
run has the sweep's guarantees: one run per output folder, ``--dry-run``, ``--local``, the checks before
the first cell, per-cell logs, the manifest, membership, and resume (a killed selection reruns no finished
trial). A mistake in the config is one line on stderr, exit code 2, nothing created.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from unitta.results import load_results
from unitta.results.output_checks import check_output_dir
from unitta.run import exits
from unitta.run.checks import list_cells, preflight
from unitta.run.cli import run_command, run_options, run_parser
from unitta.run.executor import RunOptions, execute_plan
from unitta.select.choose import selection_rows, write_selection
from unitta.select.config import SelectConfig, load_select_config
from unitta.select.groups import check_spaces
from unitta.select.plan import SelectPlanner

__all__ = ["run_select", "selection_summary_lines", "main"]


def _planner(cfg: SelectConfig, out: Path, holder: dict):
    def make(finished: set[str]) -> SelectPlanner:
        rows = {}
        if finished or (out / "cells").is_dir():
            rows = {r["cell_id"]: r for r in load_results(out).to_dicts()}
        holder["planner"] = SelectPlanner(cfg, rows)
        return holder["planner"]

    return make


def run_select(cfg: SelectConfig, out: Path, opts: RunOptions, source: str = "select config"):
    """Run the selection into ``out`` and write ``selection.parquet``; returns (outcome, selection DataFrame)."""
    import polars as pl

    check_spaces(cfg, source)
    holder: dict = {}
    outcome = execute_plan(cfg, Path(out), _planner(cfg, Path(out), holder), opts)
    planner = holder["planner"]
    df = load_results(outcome.out_dir)
    rows = {r["cell_id"]: r for r in df.filter(df["cell_id"].is_in(list(planner.owner))).to_dicts()}
    records = selection_rows(cfg, list(planner.plans.values()), rows)
    path = write_selection(outcome.out_dir, records)
    return outcome, pl.read_parquet(path)


def selection_summary_lines(selection) -> list[str]:
    """What each protocol chose and each method's test error per protocol (rows: method x setting x seed), as
    printable lines."""
    import polars as pl

    if selection.height == 0:
        return ["no selection rows"]
    label = pl.when(pl.col("criterion").is_null()).then(pl.col("protocol")).otherwise(
        pl.col("protocol") + ":" + pl.col("criterion"))
    labelled = selection.with_columns(label.alias("choice"), _point_text(pl.col("chosen")).alias("values"))
    index = ["method", "setting", "seed"]
    errors = labelled.pivot(on="choice", index=index, values="test_error", aggregate_function="first")
    chosen = labelled.pivot(on="choice", index=index, values="values", aggregate_function="first")
    with pl.Config(tbl_rows=200, tbl_cols=-1, tbl_width_chars=200, float_precision=2, fmt_str_lengths=60):
        return ["values each protocol chose:", str(chosen), "test error (%) of each protocol's choice:", str(errors)]


def _point_text(chosen):
    """The ``chosen`` JSON point without its JSON punctuation: ``{"lr": 0.001}`` -> ``lr=0.001``."""
    return chosen.str.strip_chars("{}").str.replace_all('"', "").str.replace_all(": ", "=")


def main(argv: list[str] | None = None) -> int:
    args = run_parser(
        "unitta select",
        "Choose hyper-parameters without test labels: default, oracle, holdout and unsupervised "
        "selection (docs/selection.md).",
        ["unitta select sweeps/select_quick.yaml --local", "python -m unitta.select sweeps/select_grid.yaml --dry-run",
         "unitta select sweeps/select_quick.yaml settings=[n111] cell.seed=1 --local"],
        "select YAML (sweeps/select_*.yaml)",
        failed="some trials failed",
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def body() -> int:
        cfg = load_select_config(args.config, args.overrides)
        out = (Path(args.output) if args.output else cfg.output_dir()).expanduser()
        check_output_dir(out)
        check_spaces(cfg, args.config)
        planner = SelectPlanner(cfg, {})
        cells = list(planner.queue)
        if args.dry_run:
            note = "" if cfg.search.algorithm == "grid" else f"; optuna proposes {cfg.search.num_samples} per method"
            list_cells(f"{cfg.name} (first cells of the selection)", cells, out, cfg.resources, note)
        if not args.no_preflight:
            sys.stdout.flush()
            preflight(cells, num_gpus=cfg.resources.num_gpus, local=args.local, feasibility=False)
        if args.dry_run:
            return exits.EXIT_OK
        outcome, selection = run_select(cfg, out, run_options(args), source=args.config)
        for line in selection_summary_lines(selection):
            print(line)
        print(f"selection: {outcome.out_dir / 'selection.parquet'}  (python analysis/selection.py {outcome.out_dir})")
        if outcome.n_failed:
            print(f"{outcome.n_failed} trial(s) failed (logs: {outcome.out_dir / 'logs'}); rerun the command to retry")
            return exits.EXIT_FAILED_CELLS
        return exits.EXIT_OK

    return run_command(body)
