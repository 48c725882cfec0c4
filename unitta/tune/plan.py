"""A tune run as a planner of the one executor (``unitta.run``): trials -> cells -> objective -> next trials.

A trial is one point of the search space and runs one cell per method (two for a 'gap' objective: both
methods on the same stream). The planner hands the executor the cells of at most ``search.max_concurrent``
trials at a time; when a trial's cells are all back it computes the objective, adds the trial columns
(docs/analysis.md) to the rows and releases them to the executor's writer, and (Optuna) tells the study.
Grid searches walk ``unitta.tune.config.grid_trials``; Optuna searches use Ray Tune's Optuna searcher through
its suggest / on_trial_complete interface (TPE, seeded by ``search.seed``), warm-started from the trials already
done in the output directory.

Points the stream sampler refuses (paper Cor. 1, ``make_stream`` raises ValueError) are not run: their
rows get status 'failed', an ``error_text`` starting with 'infeasible:' and ``tune_feasible = False``,
and the trial's objective is NaN (Optuna records the trial as failed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from unitta.cell import Cell
from unitta.evaluate import failed_row, run_cell
from unitta.evaluate.input_checks import infeasibility
from unitta.results import STATUS_OK
from unitta.tune.config import (
    FACTORS,
    RangeSpec,
    TuneConfig,
    feasible_pairs,
    map_feasible,
    trial_cells,
    unmap_feasible,
    with_method,
)
from unitta.tune.replay import done_trials, point_key, replay

__all__ = ["TRIAL_COLUMNS", "TuneContext", "Trial", "GridSearch", "OptunaSearch", "trial_rows"]

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


@dataclass
class TuneContext:
    """What every trial of a run needs: the config, the dataset's state counts, the model's BN layers, done rows.

    layers: the model's BatchNorm layers in module order; default_layer its default BDN layer (recorded
    with the rows so that the analysis can order and mark the layers). done_rows: rows of cells already
    done (status 'ok'), keyed by cell id: reused, not run again.
    """

    cfg: TuneConfig
    num_domains: int
    num_classes: int
    layers: tuple[str, ...] = ()
    default_layer: str | None = None
    done_rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # this run's earlier trial rows, any status

    @property
    def sizes(self) -> dict[str, int]:
        return {"domain": self.num_domains, "class": self.num_classes}


def _infeasible_row(cell: Cell, message: str) -> dict[str, Any]:
    """A row for a cell that was not run (infeasible point): identity columns, status and reason."""
    from unitta.streams.settings import default_factors

    row = failed_row(cell, message)
    # The factor columns hold the values the stream would have used (defaults + overrides), as for
    # a row that ran, so that the analysis can place the point on its factor axis.
    resolved = {**default_factors(cell.setting, cell.dataset), **cell.factors}
    row.update({k: float(resolved[k]) for k in FACTORS})
    return row


class Trial:
    """One point: its cells, the rows back so far (reused, infeasible or run) and which of them to write."""

    def __init__(self, ctx: TuneContext, point: dict[str, Any]) -> None:
        self.ctx, self.point = ctx, point
        self.params = {k: v for k, v in point.items() if k != "method"}
        self.cells = trial_cells(with_method(ctx.cfg, point.get("method")), self.params)
        self.trial_id = hashlib.sha256(
            json.dumps([ctx.cfg.name, point], sort_keys=True, default=str).encode()
        ).hexdigest()[:12]
        self.why = infeasibility(self.cells[0], ctx.num_domains, ctx.num_classes)
        self.rows: dict[str, dict[str, Any]] = {}
        self.texts: dict[str, str] = {}  # rows to write, with their log text
        self.handle: Any = None  # the search's own handle (an Optuna trial)
        for cell in self.cells:
            cid = cell.cell_id()
            if self.why is not None:
                self.rows[cid] = {**_infeasible_row(cell, _INFEASIBLE + self.why), "sweep_name": ctx.cfg.name}
                self.texts[cid] = f"cell {cid}\nnot run: {_INFEASIBLE}{self.why}\n"
            elif cid in ctx.done_rows:
                self.rows[cid] = dict(ctx.done_rows[cid])

    def pending(self) -> list[Cell]:
        return [c for c in self.cells if c.cell_id() not in self.rows]

    def add(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        self.rows[cell.cell_id()], self.texts[cell.cell_id()] = row, text

    def objective(self) -> float:
        cfg = self.ctx.cfg
        rows = [self.rows[c.cell_id()] for c in self.cells]
        errors = [r.get("error") if r.get("status") == STATUS_OK else None for r in rows]
        if any(e is None or not math.isfinite(e) for e in errors):
            return float("nan")
        return float(errors[0] - errors[1]) if cfg.objective.metric == "gap" else float(errors[0])

    def finish(self) -> tuple[float, list[dict[str, Any]]]:
        """(objective, every row of the trial with the trial columns); call once all cells are back."""
        cfg, value = self.ctx.cfg, self.objective()
        layer = self.params.get("layer")
        columns = dict(
            trial_id=self.trial_id,
            tune_name=cfg.name,
            tune_objective=cfg.objective.metric
            if cfg.objective.metric == "error"
            else f"gap({cfg.objective.gap[0]} - {cfg.objective.gap[1]})",
            tune_objective_value=value,
            tune_feasible=self.why is None,
            **{f"param_{k}": (float(self.params[k]) if k in self.params else None) for k in FACTORS},
            param_layer=layer,
            param_layer_index=self.ctx.layers.index(layer) if layer in self.ctx.layers else None,
            tune_default_layer=self.ctx.default_layer,
            tune_algorithm=cfg.search.algorithm,
        )
        rows = [{**self.rows[c.cell_id()], **columns} for c in self.cells]
        point = {k: round(v, 4) if isinstance(v, float) else v for k, v in self.point.items()}
        log.info("trial %s: %s", point, "infeasible" if self.why else f"objective {value:.3g}")
        return value, rows


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
    """Run one trial in this process: (objective value, one row per cell, feasible?). No Ray, no files."""
    ctx = TuneContext(cfg, num_domains, num_classes, tuple(layers), default_layer, dict(done_rows or {}))
    trial = Trial(ctx, point)
    for cell in trial.pending():
        trial.add(cell, run_cell(cell, dataset=dataset, sweep_name=cfg.name), "")
    value, rows = trial.finish()
    return value, rows, trial.why is None


class _TrialPlanner:
    """The executor's planner over trials; a search supplies ``_next_point`` and ``_tell``."""

    _GROWS = False  # a search whose cells join its record as its trials finish

    def __init__(self, ctx: TuneContext, n_trials: int, n_done_trials: int) -> None:
        self.ctx = ctx
        per_trial = len(ctx.cfg.trial_methods)
        self.n_cells, self.n_skipped = (n_trials + n_done_trials) * per_trial, n_done_trials * per_trial
        self.running: dict[str, list[Trial]] = {}  # cell id -> the open trials waiting for it
        self.open: list[Trial] = []
        self.outbox: list[tuple[dict[str, Any], str]] = []
        self.exhausted = False
        self.members: list[str] | None = None  # a search's cells are not known before it runs
        self.added_members: list[str] = []  # its trials' cells (reused ones too), recorded as they finish
        self.notes: list[str] = []

    def _next_point(self) -> tuple[dict[str, Any], Any] | None:
        raise NotImplementedError

    def _tell(self, trial: Trial, value: float) -> None:
        pass

    def take(self) -> list[Cell]:
        cells: list[Cell] = []
        while not self.exhausted and len(self.open) < self.ctx.cfg.search.max_concurrent:
            nxt = self._next_point()
            if nxt is None:
                self.exhausted = True
                break
            trial = Trial(self.ctx, nxt[0])
            trial.handle = nxt[1]
            self.open.append(trial)
            for cell in trial.pending():
                if cell.cell_id() not in self.running:  # two open trials at one point share the cell
                    cells.append(cell)
                self.running.setdefault(cell.cell_id(), []).append(trial)
            self._close_if_complete(trial)
        return cells

    def _close_if_complete(self, trial: Trial) -> None:
        if trial.pending():
            return
        self.open.remove(trial)
        value, rows = trial.finish()
        if self.members is None or self._GROWS:
            self.added_members += [row["cell_id"] for row in rows]
        self.outbox += [(row, trial.texts[row["cell_id"]]) for row in rows if row["cell_id"] in trial.texts]
        self._tell(trial, value)

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        if row.get("status") == STATUS_OK:
            self.ctx.done_rows[cell.cell_id()] = row  # a later trial with the same cell reuses it
        for trial in self.running.pop(cell.cell_id()):
            trial.add(cell, row, text)
            self._close_if_complete(trial)

    def drain(self) -> list[tuple[dict[str, Any], str]]:
        out, self.outbox = self.outbox, []
        return out

    def done(self) -> bool:
        return self.exhausted and not self.open and not self.outbox


class GridSearch(_TrialPlanner):
    """Every grid trial whose cells are not all done (``unitta.tune.config.grid_trials``)."""

    def __init__(self, ctx: TuneContext, trials: list[dict[str, Any]]) -> None:
        self.todo = [t for t in trials if not self._done(ctx, t)]
        super().__init__(ctx, len(self.todo), len(trials) - len(self.todo))
        n_done = len(trials) - len(self.todo)
        # a grid's cells are known now: the run's record (load_results(out, sweep=name)) is all of them
        self.members = list(dict.fromkeys(c.cell_id() for t in trials for c in self._cells(ctx, t)))
        log.info("%d grid trials, %d already done, %d to run", len(trials), n_done, len(self.todo))

    @staticmethod
    def _cells(ctx: TuneContext, trial: dict[str, Any]) -> list[Cell]:
        params = {k: v for k, v in trial.items() if k != "method"}
        return trial_cells(with_method(ctx.cfg, trial.get("method")), params)

    @classmethod
    def _done(cls, ctx: TuneContext, trial: dict[str, Any]) -> bool:
        return all(c.cell_id() in ctx.done_rows for c in cls._cells(ctx, trial))

    def _next_point(self) -> tuple[dict[str, Any], Any] | None:
        return (self.todo.pop(0), None) if self.todo else None


class OptunaSearch(_TrialPlanner):
    """Ray Tune's Optuna searcher (``ray.tune.search.optuna.OptunaSearch``: TPE seeded by ``search.seed``) driven
    through its suggest / on_trial_complete interface: Ray Tune picks each trial's point, the executor runs the
    trial's cells (lock, preflight, the per-cell writer: docs/analysis.md). The trials already done in the output
    are replayed into the fresh searcher in their order (``unitta.tune.replay``), so a resumed search continues
    the sequence an uninterrupted one runs; they count towards ``num_samples``. Done trials outside today's space
    are named in one line and left out of the run's cells (``load_results(out, sweep=name)``)."""

    _GROWS = True

    def __init__(self, ctx: TuneContext, layers: list[str]) -> None:
        import optuna
        from ray.tune.search.optuna import OptunaSearch as TuneOptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        cfg, self.ctx = ctx.cfg, ctx
        self.distributions = _distributions(cfg, layers)
        self.searcher = TuneOptunaSearch(space=self.distributions, metric=_METRIC, mode=cfg.objective.mode,
                                         sampler=optuna.samplers.TPESampler(seed=cfg.search.seed))
        self.asked = 0
        names = cfg.space.searched()
        done = done_trials(ctx.history, names)
        inside = [t for t in done if self._searcher_point(ctx, t.point) is not None]
        result = replay(inside, self._ask, self._tell_handle, lambda p: point_key(p, names), cfg.search.max_concurrent,
                        reopen=lambda t: not t.immediate and not math.isfinite(t.value))  # a failed cell: retried
        for t in result.unmatched:  # met out of order (a concurrent run): a warm start
            value = t.value if math.isfinite(t.value) else 0.0
            self.searcher.add_evaluated_point(self._searcher_point(ctx, t.point), value,
                                              error=not math.isfinite(t.value))
        self.queued = [*result.reopened, *([result.prefetched] if result.prefetched else [])]
        n_done = len(inside) - len(result.reopened)
        self.remaining = max(0, cfg.search.num_samples - n_done)
        super().__init__(ctx, self.remaining, n_done)
        # the run's cells: its done trials inside today's space; each new trial's cells join as it finishes
        self.members = list(dict.fromkeys(cid for t in inside for cid in t.cell_ids))
        if len(done) > len(inside):
            self.notes.append(f"{cfg.name}: {len(done) - len(inside)} earlier trial(s) lie outside today's search "
                              "space: not part of this search (their rows stay in the folder)")
        log.info(
            "optuna (Ray Tune searcher): %d trials in total, %d already done (%d replayed), %d to run",
            cfg.search.num_samples, n_done, len(result.replayed), self.remaining,
        )

    def _searcher_point(self, ctx: TuneContext, point: dict[str, Any]) -> dict[str, Any] | None:
        """A done trial's point as the searcher's space has it, None if it lies outside that space."""
        if any(v is None for v in point.values()):
            return None
        if ctx.cfg.search.feasible_only:
            point = unmap_feasible(ctx.cfg, point, ctx.sizes)
        return point if point is not None and _inside(point, self.distributions) else None

    def _ask(self) -> tuple[dict[str, Any], str]:
        self.asked += 1
        handle = f"trial_{self.asked:05d}"
        point = dict(self.searcher.suggest(handle))
        if self.ctx.cfg.search.feasible_only:
            point = map_feasible(self.ctx.cfg, point, self.ctx.sizes)
        return point, handle

    def _next_point(self) -> tuple[dict[str, Any], Any] | None:
        if self.remaining == 0:
            return None
        self.remaining -= 1
        return self.queued.pop(0) if self.queued else self._ask()

    def _tell_handle(self, handle: str, value: float) -> None:
        if math.isfinite(value):
            self.searcher.on_trial_complete(handle, result={_METRIC: value})
        else:  # an infeasible or failed trial: the searcher records it as failed
            self.searcher.on_trial_complete(handle, error=True)

    def _tell(self, trial: Trial, value: float) -> None:
        self._tell_handle(trial.handle, value)


_METRIC = "tune_objective_value"


def _inside(point: dict[str, Any], distributions: dict[str, Any]) -> bool:
    """Whether a previous point lies in today's search space (a config that changed does not warm-start)."""
    if set(point) != set(distributions):
        return False
    try:
        return all(d._contains(d.to_internal_repr(point[name])) for name, d in distributions.items())
    except (ValueError, TypeError):
        return False


def _distributions(cfg: TuneConfig, layers: list[str]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space: dict[str, Any] = {}
    for name in cfg.space.searched():
        if name == "layer":
            space[name] = CategoricalDistribution(list(layers))
            continue
        spec = getattr(cfg.space, name)
        if cfg.search.feasible_only and name.endswith("_alpha") and name.split("_")[0] in feasible_pairs(cfg):
            space[f"{name}_u"] = FloatDistribution(0.0, 1.0)  # mapped onto the feasible interval per trial
        elif isinstance(spec, RangeSpec):
            space[name] = FloatDistribution(spec.low, spec.high, log=spec.log)
        else:
            space[name] = CategoricalDistribution([float(v) for v in spec])
    return space
