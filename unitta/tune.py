"""Ray Tune over the stream factors and the BDN domain-prediction layer: ``python -m unitta.tune CONFIG.yaml``.

Examples::

    python -m unitta.tune sweeps/tune_factors.yaml                 # paper figure 3 on the embedded fmnist-c
    python -m unitta.tune sweeps/tune_bdn_layer.yaml --output results/bdn_layer
    python -m unitta.tune sweeps/tune_stress.yaml --address auto   # on a running Ray cluster

Each trial is one point of the search space (correlation factor alpha_1 and imbalance factor beta of
domains and classes, paper Cor. 1, docs/streams.md; the BDN prediction layer, docs/unitta.md) and runs
one cell per method through ``unitta.evaluate.run_cell`` (two cells for a 'gap' objective: both methods on the
same stream). The driver writes every cell's row, with the trial columns (``docs/analysis.md``),
as its own Parquet file under ``<out>/cells/`` (the sweep's schema), so ``analysis/heatmaps.py``
reads tune and sweep results alike. Re-running skips points whose cells are already done.

Points outside the feasible region (the stream sampler refuses the factors: ``make_stream`` raises
ValueError, paper Cor. 1) are not run: their rows are written with status 'failed', an
``error_text`` that starts with 'infeasible:' and ``tune_feasible = False``, and the trial reports
a NaN objective (Optuna then records the trial as failed and moves on; it logs "The value nan is
not acceptable"). ``search.feasible_only`` keeps an Optuna search inside the feasible region
instead (``unitta.tune_config.map_feasible``).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import pickle
import sys
from pathlib import Path
from typing import Any

from unitta import cli, ray_cluster
from unitta.cell import Cell
from unitta.evaluate import DatasetUnavailable, failed_row, load_cell_dataset, run_cell
from unitta.outdir import OutputError, check_output_dir, is_writable, removed_if_unused
from unitta.preflight import infeasibility
from unitta.schema import check_methods
from unitta.tune_config import (
    FACTORS,
    ConfigError,
    RangeSpec,
    TuneConfig,
    base_cell,
    expand_grid,
    feasible_pairs,
    grid_trials,
    load_tune_config,
    map_feasible,
    trial_cells,
    unmap_feasible,
    with_method,
)

__all__ = [
    "TRIAL_COLUMNS",
    "expand_grid",  # re-exported from unitta.tune_config
    "trial_cells",
    "infeasibility",
    "trial_rows",
    "run_tune",
    "main",
]

log = logging.getLogger("unitta.tune")

# Columns a tune row carries on top of the sweep's schema (docs/analysis.md).
TRIAL_COLUMNS = (
    "trial_id",
    "tune_name",
    "tune_objective",
    "tune_objective_value",
    "tune_feasible",
    "param_domain_alpha",
    "param_domain_beta",
    "param_class_alpha",
    "param_class_beta",
    "param_layer",
    "param_layer_index",
    "tune_default_layer",
    "tune_algorithm",
)
_INFEASIBLE = "infeasible: "
# problems found before any trial ran: one line, exit 2 (docs/results.md, "Exit codes")
USAGE_ERRORS = (ConfigError, ray_cluster.ClusterError, OutputError, DatasetUnavailable)


# ---------------------------------------------------------------------- one trial (runs in a Ray worker)
def _objective(cfg: TuneConfig, rows: list[dict[str, Any]]) -> float:
    errors = [r.get("error") if r.get("status") == "ok" else None for r in rows]
    if any(e is None or not math.isfinite(e) for e in errors):
        return float("nan")
    if cfg.objective.metric == "gap":
        return float(errors[0] - errors[1])
    return float(errors[0])


def _infeasible_row(cell: Cell, message: str) -> dict[str, Any]:
    """A row for a cell that was not run (infeasible point): identity columns, status and reason."""
    from unitta.streams.settings import default_factors

    row = failed_row(cell, message)
    # The factor columns hold the values the stream would have used (defaults + overrides), as for
    # a row that ran, so that the analysis can place the point on its factor axis.
    resolved = {**default_factors(cell.setting, cell.dataset), **cell.factors}
    row.update({k: float(resolved[k]) for k in FACTORS})
    return row


def trial_rows(
    cfg: TuneConfig,
    point: dict[str, Any],
    dataset=None,
    done_rows: dict[str, dict[str, Any]] | None = None,
    num_domains: int = 15,
    num_classes: int = 10,
    layers: tuple[str, ...] = (),
    default_layer: str | None = None,
) -> tuple[float, list[dict[str, Any]], bool]:
    """Run one trial: (objective value, one row per cell, feasible?). Plain Python, no Ray needed.

    Cells already done (``done_rows``, keyed by cell id) are reused, not re-run. ``layers``: the
    model's BatchNorm layers in module order and ``default_layer`` its default BDN layer (recorded
    with the rows so that the analysis can order and mark the layers).
    """
    layers = list(layers)
    method = point.get("method")
    params = {k: v for k, v in point.items() if k != "method"}
    cells = trial_cells(with_method(cfg, method), params)
    why = infeasibility(cells[0], num_domains, num_classes)
    rows = []
    for cell in cells:
        if why is not None:
            rows.append({**_infeasible_row(cell, _INFEASIBLE + why), "sweep_name": cfg.name})
        elif done_rows and cell.cell_id() in done_rows:
            rows.append(dict(done_rows[cell.cell_id()]))
        else:
            rows.append(run_cell(cell, dataset=dataset, sweep_name=cfg.name))
    value = _objective(cfg, rows)
    for row in rows:
        row.update(
            tune_name=cfg.name,
            tune_objective=cfg.objective.metric if cfg.objective.metric == "error" else
            f"gap({cfg.objective.gap[0]} - {cfg.objective.gap[1]})",
            tune_objective_value=value,
            tune_feasible=why is None,
            **{f"param_{k}": (float(params[k]) if k in params else None) for k in FACTORS},
            param_layer=params.get("layer"),
            param_layer_index=layers.index(params["layer"]) if params.get("layer") in layers else None,
            tune_default_layer=default_layer,
            tune_algorithm=cfg.search.algorithm,
        )
    return value, rows, why is None


def _trainable(config: dict[str, Any], cfg_json: str, dataset, done_rows, meta: dict[str, Any]):
    """The Ray Tune function trainable: one trial, one final report (a returned dict)."""
    cfg = TuneConfig.model_validate_json(cfg_json)
    if cfg.plugins:  # the trial's methods may be a plugin's: import them on this worker (unitta/plugins.py)
        from unitta.plugins import import_on_worker

        import_on_worker(cfg.plugins)
    point = config.get("point", config)
    if cfg.search.feasible_only:
        point = map_feasible(cfg, point, {"domain": meta["num_domains"], "class": meta["num_classes"]})
    value, rows, feasible = trial_rows(cfg, point, dataset, done_rows, **meta)
    errors = {f"error_{r['method']}": (r.get("error") if r.get("status") == "ok" else float("nan")) for r in rows}
    return {
        "objective": value,
        "feasible": feasible,
        **errors,
        # Rows travel to the driver pickled: they hold timestamps and nested lists that Tune's
        # loggers would flatten or stringify.
        "rows_pickle": base64.b64encode(pickle.dumps(rows)).decode("ascii"),
    }


# ---------------------------------------------------------------------- driver
def _load_bn_layers(cfg: TuneConfig) -> tuple[list[str], list[str], str | None]:
    """(searched layers, all BatchNorm layers in module order, default BDN layer) of the cell's model."""
    if cfg.space.layer is None:
        return [], [], None
    from unitta.models import load_model

    base = base_cell(cfg)
    _, info = load_model(base.dataset, base.model, checkpoint_dir=base.checkpoint_dir)
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
        check_methods(entries, [base.dataset], base.profile, source)
    except ConfigError as exc:
        extra = " (space.layer needs a method with a 'layer' hyper-parameter: unitta, bdn)" if layers else ""
        raise ConfigError(f"{exc}{extra}") from None


def _done_rows(out: Path) -> dict[str, dict[str, Any]]:
    """Rows of the cells already done in ``out`` (status 'ok'), keyed by cell id."""
    from unitta.results import done_cells, load_results

    done = done_cells(out)
    if not done:
        return {}
    df = load_results(out)
    df = df.filter(df["cell_id"].is_in(list(done)))
    return {row["cell_id"]: row for row in df.to_dicts()}


def run_tune(
    cfg: TuneConfig,
    out: Path,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    wait_for_resources: float = 0.0,
    source: str = "tune config",
):
    """Run the search, write every trial's rows under ``out/cells``; return all tune rows (polars)."""
    try:
        layers, all_layers, default_layer = _load_bn_layers(cfg)
    except ValueError as exc:
        raise ConfigError(f"{source}: space.layer: {exc}") from None
    _check_methods(cfg, source, layers)
    out = Path(out).resolve()
    _check_output(out)
    with removed_if_unused(out, USAGE_ERRORS):
        return _search(cfg, out, (layers, all_layers, default_layer), address, num_cpus, wait_for_resources)


def _check_output(out: Path) -> None:
    """An output that is a file, lies under one, or cannot be written: one line (OutputError), nothing created."""
    check_output_dir(out)
    if not is_writable(out):
        raise OutputError(f"output {out} is not writable; make it writable or give another directory with --output")


def _search(cfg: TuneConfig, out: Path, bn: tuple, address, num_cpus, wait_for_resources):
    """The search itself, writing into ``out`` (checked): see ``run_tune``."""
    from ray import tune

    from unitta.results import load_results, write_cell_result

    layers, all_layers, default_layer = bn
    (out / "cells").mkdir(parents=True, exist_ok=True)
    (out / "tune_config.json").write_text(cfg.model_dump_json(indent=2))

    base = base_cell(cfg)
    dataset = load_cell_dataset(base)  # missing or damaged: DatasetUnavailable, one line and exit 2
    num_domains, num_classes = dataset.num_domains, dataset.num_classes
    done = _done_rows(out)
    _record_membership(cfg, out, done, layers)

    metric, mode = "objective", cfg.objective.mode
    if cfg.search.algorithm == "grid":
        trials = grid_trials(cfg, layers)
        todo = [t for t in trials if not _trial_done(cfg, t, done)]
        log.info("%d grid trials, %d already done, %d to run", len(trials), len(trials) - len(todo), len(todo))
        param_space = {"point": tune.grid_search(todo)} if todo else None
        search_alg, num_samples = None, 1
    else:
        param_space = _optuna_space(cfg, layers)
        points, rewards = _previous_points(cfg, done, {"domain": num_domains, "class": num_classes})
        todo = max(0, cfg.search.num_samples - len(points))
        log.info("optuna: %d trials in total, %d already done, %d to run", cfg.search.num_samples, len(points), todo)
        import optuna
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(
            points_to_evaluate=points or None,
            evaluated_rewards=rewards or None,
            sampler=optuna.samplers.TPESampler(seed=cfg.search.seed),
        )
        search_alg = ConcurrencyLimiter(search_alg, max_concurrent=cfg.search.max_concurrent)
        num_samples = todo

    if todo:
        from unitta import plugins

        # the plugins' files travel to every worker (Ray's py_modules); the driver imported them with the config
        runtime_env = plugins.runtime_env(plugins.load(cfg.plugins))
        ray, _ = ray_cluster.connect(address, num_cpus, runtime_env=runtime_env)
        joined = ray_cluster.joined_line(ray)
        if joined:
            log.info(joined)
        ray_cluster.check_fits(ray, cfg.resources.num_cpus, cfg.resources.num_gpus, wait_s=wait_for_resources)
        trainable = tune.with_parameters(
            _trainable,
            cfg_json=cfg.model_dump_json(),
            dataset=dataset,
            done_rows=done,
            meta={
                "num_domains": num_domains,
                "num_classes": num_classes,
                "layers": tuple(all_layers),
                "default_layer": default_layer,
            },
        )
        resources = {"cpu": cfg.resources.num_cpus, "gpu": cfg.resources.num_gpus}
        tuner = tune.Tuner(
            tune.with_resources(trainable, resources),
            param_space=param_space,
            tune_config=tune.TuneConfig(
                metric=metric,
                mode=mode,
                search_alg=search_alg,
                num_samples=num_samples,
                # optuna: the ConcurrencyLimiter above already bounds it
                max_concurrent_trials=cfg.search.max_concurrent if search_alg is None else None,
            ),
            run_config=tune.RunConfig(
                name=cfg.name,
                storage_path=str(out / "tune"),
                callbacks=[
                    _RowWriter(out, write_cell_result, set(done), total=len(todo) if isinstance(todo, list) else todo,
                               name=cfg.name)
                ],
                verbose=0,
            ),
        )
        tuner.fit()
    rows = load_results(out)
    if "trial_id" in rows.columns:
        rows = rows.filter(rows["trial_id"].is_not_null())
    return rows


def _record_membership(cfg: TuneConfig, out: Path, done: dict[str, dict[str, Any]], layers: list[str]) -> None:
    """The cells of this tune run (``load_results(out, sweep=name)``): a grid's are known now; a search's are
    the rows this name wrote before plus each trial's as it finishes (``_RowWriter``)."""
    from unitta.results import add_to_membership, write_membership

    if cfg.search.algorithm == "grid":
        ids = [c.cell_id() for t in grid_trials(cfg, layers) for c in _cells_of(cfg, t)]
        write_membership(out, cfg.name, list(dict.fromkeys(ids)))
    else:
        add_to_membership(out, cfg.name, [cid for cid, row in done.items() if row.get("tune_name") == cfg.name])


def _cells_of(cfg: TuneConfig, trial: dict[str, Any]) -> list[Cell]:
    method = trial.get("method")
    return trial_cells(with_method(cfg, method), {k: v for k, v in trial.items() if k != "method"})


def _trial_done(cfg: TuneConfig, trial: dict[str, Any], done: dict[str, Any]) -> bool:
    return all(c.cell_id() in done for c in _cells_of(cfg, trial))


def _optuna_space(cfg: TuneConfig, layers: list[str]) -> dict[str, Any]:
    from ray import tune

    space: dict[str, Any] = {}
    for name in cfg.space.searched():
        if name == "layer":
            space[name] = tune.choice(layers)
            continue
        spec = getattr(cfg.space, name)
        if cfg.search.feasible_only and name.endswith("_alpha") and name.split("_")[0] in feasible_pairs(cfg):
            space[f"{name}_u"] = tune.uniform(0.0, 1.0)  # mapped onto the feasible interval per trial
        elif isinstance(spec, RangeSpec):
            space[name] = (tune.loguniform if spec.log else tune.uniform)(spec.low, spec.high)
        else:
            space[name] = tune.choice([float(v) for v in spec])
    return space


def _previous_points(
    cfg: TuneConfig, done: dict[str, dict[str, Any]], sizes: dict[str, int]
) -> tuple[list[dict], list[float]]:
    """Points of this tune run already evaluated (from the result rows), for Optuna's warm start."""
    names = cfg.space.searched()
    points: dict[str, tuple[dict, float]] = {}
    for row in done.values():
        if row.get("tune_name") != cfg.name or row.get("tune_objective_value") is None:
            continue
        value = float(row["tune_objective_value"])
        point = {n: row.get(f"param_{n}") for n in names}
        if not math.isfinite(value) or any(v is None for v in point.values()):
            continue
        if cfg.search.feasible_only:
            point = unmap_feasible(cfg, point, sizes)
            if point is None:
                continue
        points[json.dumps(point, sort_keys=True)] = (point, value)
    return [p for p, _ in points.values()], [v for _, v in points.values()]


def _tune_callback_base():
    from ray.tune import Callback

    return Callback


class _RowWriter(_tune_callback_base()):  # type: ignore[misc]
    """Runs in the driver: writes each finished trial's rows as Parquet (atomic, one file per cell)."""

    def __init__(self, out: Path, write, done: set[str], total: int, name: str | None = None):
        self.out, self.write, self.done, self.total, self.finished = out, write, done, total, 0
        self.name = name  # the tune run's name: its trials' cells are recorded as its members
        self.seen: set[str] = set()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if trial.trial_id in self.seen:  # a trial reports once; Tune may replay its last result
            return
        self.seen.add(trial.trial_id)
        rows = pickle.loads(base64.b64decode(result["rows_pickle"]))
        self.finished += 1
        point = {k.removeprefix("param_"): v for k, v in rows[0].items() if k.startswith("param_") and v is not None}
        if rows[0].get("method") and len(rows) == 1:
            point = {"method": rows[0]["method"], **point}
        point = {k: round(v, 4) if isinstance(v, float) else v for k, v in point.items()}
        state = "infeasible" if not result.get("feasible", True) else f"objective {result.get('objective'):.3g}"
        log.info("trial %d/%d %s: %s", self.finished, self.total, point, state)
        if self.name:
            from unitta.results import add_to_membership

            add_to_membership(self.out, self.name, [row["cell_id"] for row in rows])  # reused cells too
        for row in rows:
            if row["cell_id"] in self.done:
                continue  # a reused cell: its file is already there
            row["trial_id"] = trial.trial_id
            self.write(self.out, row)
            if row.get("status") == "ok":
                self.done.add(row["cell_id"])


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
    failed = rows.filter((pl.col("status") != "ok") & pl.col("tune_feasible"))
    if failed.height:
        lines.append(f"{failed.height} failed cell(s):")
        for r in failed.select("cell_id", "error_text").iter_rows():
            lines.append(f"  {r[0]}: {str(r[1]).splitlines()[-1] if r[1] else ''}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m unitta.tune",
        description="Ray Tune over the stream factors and the BDN prediction layer (docs/analysis.md).",
        epilog="examples:\n  python -m unitta.tune sweeps/tune_factors.yaml\n"
        "  python -m unitta.tune sweeps/tune_stress.yaml --output results/stress --address local\n"
        "exit codes: 0 ok, 2 config/cluster problem, 3 crashed, 130/143 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="tune YAML (sweeps/tune_*.yaml)")
    parser.add_argument("--output", help="result directory (default: the config's output, or results/<name>)")
    ray_cluster.add_ray_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def body() -> int:
        cfg = load_tune_config(args.config)
        out = Path(args.output) if args.output else cfg.output_dir()
        _check_output(out)
        rows = run_tune(cfg, out, address=args.address, num_cpus=args.num_cpus,
                        wait_for_resources=args.wait_for_resources, source=args.config)
        for line in summary_lines(rows, cfg):
            print(line)
        print(f"results: {out}/cells  (python analysis/heatmaps.py {out})")
        return cli.EXIT_OK

    resume = "finished trials are saved; rerun the same command to resume"
    return cli.run_cli(body, resume, USAGE_ERRORS)


if __name__ == "__main__":
    # import under the package name so Ray ships the trainable by reference to unitta.tune, not by value
    from unitta.tune import main as _main

    sys.exit(_main())
