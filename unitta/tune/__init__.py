"""Ray Tune over the stream factors and the BDN domain-prediction layer: ``python -m unitta.tune CONFIG.yaml``.

The tune package: the Tune front end and its command (this module; ``__main__`` runs it), what a trial is
(``trials``) and the schema of a tune config (``config``); the search itself is ``unitta.search``'s.


Examples::

    python -m unitta.tune sweeps/tune_factors.yaml                 # paper figure 3 on the embedded fmnist-c
    python -m unitta.tune sweeps/tune_bdn_layer.yaml --output results/bdn_layer
    python -m unitta.tune sweeps/tune_stress.yaml --address auto   # on a running Ray cluster

Each trial is one point of the search space (correlation factor alpha_1 and imbalance factor beta of
domains and classes, paper Cor. 1, docs/streams.md; the BDN prediction layer, docs/unitta.md) and runs
one cell per method (two cells for a 'gap' objective: both methods on the same stream). The search is the
search package's planner (``unitta.search``) of the executor the sweep uses (``unitta.run``), so a tune run has the
sweep's guarantees: one run per output folder, ``--dry-run``, ``--local``, the checks before the first
cell, every cell's row (with the trial columns, ``docs/analysis.md``) written as
``<out>/cells/<cell_id>.parquet`` by the sweep's writer, per-cell logs, and resume: re-running skips the
cells already done (an Optuna search replays the trials already done into its searcher and continues their
sequence: ``unitta.search.replay``).

Points outside the feasible region (the stream sampler refuses the factors: ``make_stream`` raises
ValueError, paper Cor. 1) are not run: their rows are written with status 'failed', an
``error_text`` that starts with 'infeasible:' and ``tune_feasible = False``, and the trial reports
a NaN objective (Optuna then records the trial as failed and moves on; it logs "The value nan is
not acceptable"). ``search.feasible_only`` keeps an Optuna search inside the feasible region
instead (``unitta.tune.config.map_feasible``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from unitta.cell import Cell
from unitta.evaluate.input_checks import dataset_shape
from unitta.results import load_results
from unitta.results.output_checks import check_output_dir
from unitta.results.summary import failure_lines
from unitta.run import exits
from unitta.run.checks import list_cells, preflight
from unitta.run.cli import run_command, run_options, run_parser
from unitta.run.executor import RunOptions, execute_plan
from unitta.run.outdir import fresh_output_dir
from unitta.schema import ConfigError
from unitta.schema.methods import check_methods
from unitta.search.cell_template import base_cell
from unitta.search.planner import Search, SearchPlanner
from unitta.search.searchers import GridSearcher, OptunaSearcher
from unitta.tune.config import (
    TuneConfig,
    grid_trials,
    load_tune_config,
    map_feasible,
    trial_cells,
    unmap_feasible,
    with_method,
)
from unitta.tune.trials import TuneTrials, optuna_space

__all__ = ["run_tune", "main"]

_log = logging.getLogger("unitta.tune")


# ---------------------------------------------------------------------- the search's inputs
def _load_bn_layers(cfg: TuneConfig) -> tuple[list[str], list[str], str | None]:
    """(searched layers, all BatchNorm layers in module order, default BDN layer) of the cell's model."""
    if cfg.space.layer is None:
        return [], [], None
    from unitta.evaluate.inputs import model_layers

    info = model_layers(base_cell(cfg))
    if cfg.space.layer == "all":
        searched = list(info.bn_layers)
    else:
        searched = [info.check_bn_layer(name) for name in cfg.space.layer]
    return searched, list(info.bn_layers), info.bdn_layer


def _check_methods(cfg: TuneConfig, source: str, layers: list[str]) -> None:
    """Method names and overrides (the searched layer too) checked against the registry before any trial."""
    base = base_cell(cfg)
    kwargs = {**base.method_kwargs, **({"layer": layers[0]} if layers else {})}
    entries = [("methods", name, kwargs) for name in cfg.trial_methods]
    try:
        check_methods(entries, [base.dataset], base.profile, source, models={base.dataset: base.model})
    except ConfigError as exc:
        extra = " (space.layer needs a method with a 'layer' hyper-parameter: unitta, bdn)" if layers else ""
        raise ConfigError(f"{exc}{extra}") from None


def _layers(cfg: TuneConfig, source: str) -> tuple[list[str], list[str], str | None]:
    try:
        layers = _load_bn_layers(cfg)
    except ValueError as exc:
        raise ConfigError(f"{source}: space.layer: {exc}") from None
    _check_methods(cfg, source, layers[0])
    return layers


def _earlier_rows(out: Path, finished: set[str]) -> dict[str, dict]:
    """The rows already in ``out``, any status, by cell id (the search answers what they stand for)."""
    if not finished and not (out / "cells").is_dir():
        return {}
    return {row["cell_id"]: row for row in load_results(out).to_dicts()}


def _planner(cfg: TuneConfig, out: Path, layers: tuple[list[str], list[str], str | None]):
    searched, all_layers, default_layer = layers
    domains, classes, _ = dataset_shape(base_cell(cfg))

    def make(finished: set[str]) -> SearchPlanner:
        space = TuneTrials(cfg, domains, classes, tuple(all_layers), default_layer)
        if cfg.search.algorithm == "grid":
            trials = grid_trials(cfg, searched)
            searcher = GridSearcher(trials)
            _log.info("%d grid trials", len(trials))
        else:
            sizes = space.sizes
            searcher = OptunaSearcher(
                optuna_space(cfg, searched), cfg.objective.mode, cfg.search.seed, cfg.search.num_samples,
                to_point=(lambda p: map_feasible(cfg, p, sizes)) if cfg.search.feasible_only else None,
                from_point=(lambda p: unmap_feasible(cfg, p, sizes)) if cfg.search.feasible_only else None,
            )
        search = Search(space, searcher, cfg.search.max_concurrent, cfg.name)
        return SearchPlanner([search], _earlier_rows(out, finished))

    return make


def first_cells(cfg: TuneConfig, searched_layers: list[str]) -> list[Cell]:
    """The first cell of every grid trial; an Optuna search's base cells (its points come as results arrive)."""
    if cfg.search.algorithm != "grid":
        return trial_cells(cfg, {})
    return [
        trial_cells(with_method(cfg, t.get("method")), {k: v for k, v in t.items() if k != "method"})[0]
        for t in grid_trials(cfg, searched_layers)
    ]


# ---------------------------------------------------------------------- the driver
def run_tune(
    cfg: TuneConfig,
    out: Path,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    wait_for_resources: float = 0.0,
    source: str = "tune config",
    opts: RunOptions | None = None,
):
    """Run the search through the executor, every cell written under ``out/cells``; return all tune rows (polars)."""
    opts = opts or RunOptions(address=address, num_cpus=num_cpus, wait_for_resources=wait_for_resources, progress=False)
    layers = _layers(cfg, source)
    outcome = execute_plan(cfg, Path(out), _planner(cfg, Path(out), layers), opts)
    rows = load_results(outcome.out_dir)
    if "trial_id" in rows.columns:
        rows = rows.filter(rows["trial_id"].is_not_null())
    return rows


# ---------------------------------------------------------------------- report
def summary_lines(rows, cfg: TuneConfig, top: int = 10) -> list[str]:
    """The best trials and the infeasible points, as printable lines."""
    import polars as pl

    if rows.height == 0:
        return ["no trial rows"]
    params = [f"param_{n}" for n in cfg.space.searched()]
    wanted = ["method", *params, "error", "tune_objective_value", "status", "tune_feasible"]
    keep = [c for c in wanted if c in rows.columns]
    trials = rows.select(keep)
    feasible = trials.filter(pl.col("tune_objective_value").is_not_nan() & pl.col("tune_objective_value").is_not_null())
    lines = [f"{rows.height} rows, {feasible.height} with an objective ({cfg.objective.metric}, {cfg.objective.mode})"]
    best = feasible.sort("tune_objective_value", descending=cfg.objective.mode == "max").head(top)
    with pl.Config(tbl_rows=top, tbl_cols=-1, tbl_width_chars=160):
        lines.append(str(best))
    infeasible = trials.filter(~pl.col("tune_feasible"))
    if infeasible.height:
        lines.append(f"{infeasible.height} infeasible point(s) (not run; see error_text):")
        with pl.Config(tbl_rows=20, tbl_cols=-1, tbl_width_chars=160):
            lines.append(str(infeasible.select([c for c in ["method", *params] if c in infeasible.columns])))
    return lines


def _exit_code(rows, cfg: TuneConfig, out: Path) -> int:
    """1 (one line per kind of failure) when a feasible trial's cell of this run failed, else 0; an infeasible
    point is a result, not a failure."""
    import polars as pl

    if rows.height == 0 or "tune_name" not in rows.columns:
        return exits.EXIT_OK
    failed = rows.filter((pl.col("tune_name") == cfg.name) & (pl.col("status") != "ok") & pl.col("tune_feasible"))
    for line in failure_lines(failed, out / "logs"):
        print(line)
    if failed.height:
        print(f"exit {exits.EXIT_FAILED_CELLS}: some cells failed (see their logs)")
        return exits.EXIT_FAILED_CELLS
    return exits.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = run_parser(
        "python -m unitta.tune",
        "Ray Tune over the stream factors and the BDN prediction layer (docs/analysis.md).",
        ["python -m unitta.tune sweeps/tune_factors.yaml", "python -m unitta.tune sweeps/tune_factors.yaml --dry-run",
         "python -m unitta.tune sweeps/tune_factors.yaml methods=[test,bn] cell.n_per_domain=100 output=out/t2",
         "python -m unitta.tune sweeps/tune_stress.yaml --output results/stress --address local"],
        "tune YAML (sweeps/tune_*.yaml)",
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def body() -> int:
        cfg = load_tune_config(args.config, args.overrides)
        out = (Path(args.output) if args.output else cfg.output_dir()).expanduser()
        check_output_dir(out)
        layers = _layers(cfg, args.config)
        cells = first_cells(cfg, layers[0])
        if args.dry_run:  # the cells first, fast; then the checks (--no-preflight skips them)
            note = "" if cfg.search.algorithm == "grid" else f"; optuna picks {cfg.search.num_samples} trials' points"
            shown = fresh_output_dir(out) if args.fresh else out  # --fresh: the folder it would use
            list_cells(f"{cfg.name} (first cell of each trial)", cells, shown, cfg.resources, note)
        if not args.no_preflight:  # a search's infeasible points are results, not mistakes
            sys.stdout.flush()
            preflight(cells, num_gpus=cfg.resources.num_gpus, local=args.local, feasibility=False)
        if args.dry_run:
            return exits.EXIT_OK
        outcome = execute_plan(cfg, out, _planner(cfg, out, layers), run_options(args))
        rows = load_results(outcome.out_dir)
        rows = rows.filter(rows["trial_id"].is_not_null()) if "trial_id" in rows.columns else rows.clear()
        for line in summary_lines(rows, cfg):
            print(line)
        print(f"results: {outcome.out_dir}/cells  (python analysis/heatmaps.py {outcome.out_dir})")
        return _exit_code(rows, cfg, outcome.out_dir)

    return run_command(body)
