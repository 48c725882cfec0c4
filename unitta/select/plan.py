"""A selection as a planner of the one executor (``unitta.run``): groups -> points -> trial cells -> choices.

Per group (method, setting, stream seed) the planner runs the default cell, every point's test trial (when
the oracle or unsupervised protocol asks for it) and validation trial (holdout), then, for a holdout
choice without a test trial, the chosen point's test cell. Points come from the grid or from Ray Tune's
OptunaSearch (``suggest`` / ``on_trial_complete``, warm-started from the points already run); with
``scheduler: asha`` every validation trial reports to Ray Tune's ASHA (``unitta.select.asha``), which may stop
it ('stopped' rows: never results). Cells already done in the output directory ('ok', or 'stopped' for a
validation trial) are not run again (resume); every cell of the selection joins its membership record.
"""

from __future__ import annotations

import json
import logging
import math
import random
from typing import Any

from unitta.cell import Cell
from unitta.cell.criteria import CRITERION_MODES, column
from unitta.evaluate.adapt import Report
from unitta.evaluate.inputs import build_stream, load_cell_dataset
from unitta.results import STATUS_OK, STATUS_STOPPED
from unitta.select.asha import AshaArbiter, AshaHook, asha_score, first_rung, milestones
from unitta.select.config import SelectConfig
from unitta.select.space import Group, chosen_text, distributions, grid_points, groups, trial_cell

__all__ = ["SelectPlanner", "GroupPlan", "batches_of", "best_point", "ok_value", "objective"]

logger = logging.getLogger("unitta.select")


def batches_of(row: dict[str, Any]) -> int:
    """Adapted batches a trial's row stands for: to its end ('ok') or to where ASHA stopped it."""
    if row.get("status") == STATUS_STOPPED:
        return int(row.get("stopped_at_batch") or 0)
    if row.get("status") == STATUS_OK and row.get("n_samples"):
        return math.ceil(int(row["n_samples"]) / int(row["batch_size"]))
    return 0


def row_score(row: dict[str, Any]) -> float:
    """A finished validation trial's ``asha_score``: its error, ties broken by its NLL."""
    return asha_score(float(row["error"]), row.get("nll"))


def ok_value(row: dict[str, Any] | None, col: str) -> float | None:
    if row is None or row.get("status") != STATUS_OK or row.get(col) is None:
        return None
    value = float(row[col])
    return value if math.isfinite(value) else None


def best_point(plan: GroupPlan, rows: dict[str, dict], stream: str, col: str, mode: str):
    """(point, value) of the best 'ok' row by ``col`` on ``stream``, or None. Ties go to the point whose JSON
    (``chosen_text``) sorts first, so that a choice does not depend on the order points were run or resumed in."""
    found = []
    for point in plan.points:
        cell = plan.cell(point, stream)
        value = ok_value(rows.get(cell.cell_id()) if cell is not None else None, col)
        if value is not None:
            found.append((value if mode == "min" else -value, chosen_text(point), point, value))
    if not found:
        return None
    best = min(found, key=lambda f: (f[0], f[1]))
    return best[2], best[3]


def holdout_choice(plan: GroupPlan, rows: dict[str, dict]) -> dict[str, Any] | None:
    best = best_point(plan, rows, "validation", "error", "min")
    return None if best is None else best[0]


def objective(cfg: SelectConfig) -> tuple[str, str, str]:
    """(stream, column, mode) by which an Optuna search proposes points: holdout's validation error, else the
    oracle's test error, else the first criterion."""
    if "holdout" in cfg.protocols:
        return "validation", "error", "min"
    if "oracle" in cfg.protocols:
        return "test", "error", "min"
    return "test", column(cfg.criteria[0]), CRITERION_MODES[cfg.criteria[0]]


class GroupPlan:
    """One group's points and cells: which cell is which stream of which point."""

    def __init__(self, cfg: SelectConfig, group: Group) -> None:
        self.cfg, self.group = cfg, group
        self.streams = ["test"] if cfg.uses_test_trials else []
        if "holdout" in cfg.protocols:
            self.streams.append("validation")
        self.points: list[dict[str, Any]] = []
        self.cells: dict[tuple[str, str], Cell] = {}  # (point key or '', stream) -> cell
        self.chosen_planned = False
        self.search: Any = None  # Optuna: Ray Tune's searcher; grid: the points left
        self.asked = 0
        self.open: dict[str, str] = {}  # the searcher's trial handle -> its point's key

    def add_point(self, point: dict[str, Any]) -> list[Cell]:
        key = chosen_text(point)
        if any(chosen_text(p) == key for p in self.points):
            return []
        self.points.append(point)
        return [self._cell(point, stream) for stream in self.streams]

    def _cell(self, point: dict[str, Any] | None, stream: str) -> Cell:
        cell = trial_cell(self.cfg, self.group, point, stream)
        self.cells[(chosen_text(point) if point is not None else "", stream)] = cell
        return cell

    def default_cell(self) -> Cell:
        return self._cell(None, "default")

    def chosen_cell(self, point: dict[str, Any]) -> Cell:
        self.chosen_planned = True
        return self._cell(point, "chosen")

    def cell(self, point: dict[str, Any] | None, stream: str) -> Cell | None:
        return self.cells.get((chosen_text(point) if point is not None else "", stream))


class SelectPlanner:
    """The executor's planner of a selection (``unitta.run.Planner``); see the module docstring."""

    def __init__(self, cfg: SelectConfig, rows: dict[str, dict[str, Any]]) -> None:
        self.cfg = cfg
        self.rows = {cid: r for cid, r in rows.items() if r.get("status") in (STATUS_OK, STATUS_STOPPED)}
        self.plans = {g.key: GroupPlan(cfg, g) for g in groups(cfg)}
        self.owner: dict[str, GroupPlan] = {}  # cell id -> its group
        self.stream: dict[str, str] = {}  # cell id -> its stream (STREAMS)
        self.queue: list[Cell] = []
        self.waiting: set[str] = set()
        self.outbox: list[tuple[dict[str, Any], str]] = []
        self.members: list[str] | None = None
        self.added_members: list[str] = []
        self.notes: list[str] = []
        self.n_cells = self.n_skipped = 0
        self.arbiter: Any = None
        self.report_every: dict[str, int] = {}
        self.milestones: dict[str, tuple[int, ...]] = {}
        for plan in self.plans.values():
            self._init_search(plan)
            self._enqueue(plan, [plan.default_cell()], "default")
        self._advance()

    # ------------------------------------------------------------------ the searches
    def _init_search(self, plan: GroupPlan) -> None:
        if self.cfg.search.algorithm == "grid":
            plan.search = grid_points(self.cfg, plan.group.method)
            if self.cfg.search.scheduler == "asha":  # asynchronous halving assumes no order (a sorted grid would
                random.Random(self.cfg.search.seed).shuffle(plan.search)  # keep improving and never stop)
            return
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        _, _, mode = objective(self.cfg)
        previous = self._previous_points(plan)
        plan.search = OptunaSearch(
            space=distributions(self.cfg, plan.group.method), metric="objective", mode=mode,
            sampler=optuna.samplers.TPESampler(seed=self.cfg.search.seed),
            points_to_evaluate=[p for p, _ in previous] or None, evaluated_rewards=[v for _, v in previous] or None,
        )
        for point, _ in previous:
            self._add_point(plan, point)
        plan.asked = len(previous)

    def _previous_points(self, plan: GroupPlan) -> list[tuple[dict[str, Any], float]]:
        """Points of this selection already evaluated (rows of its cells in the output), for a warm start."""
        stream, col, _ = objective(self.cfg)
        names = set(distributions(self.cfg, plan.group.method))
        base = trial_cell(self.cfg, plan.group, None, stream)
        found: dict[str, tuple[dict[str, Any], float]] = {}
        for row in self.rows.values():
            kwargs = json.loads(row.get("method_kwargs") or "{}")
            point = {k: v for k, v in kwargs.items() if k in names}
            if set(point) != names or row.get("status") != STATUS_OK or row.get(col) is None:
                continue
            if trial_cell(self.cfg, plan.group, point, stream).cell_id() == row["cell_id"] != base.cell_id():
                found[chosen_text(point)] = (point, float(row[col]))
        return list(found.values())

    def _next_points(self, plan: GroupPlan) -> list[dict[str, Any]]:
        if isinstance(plan.search, list):
            points, plan.search = plan.search, []
            return points
        out = []
        while plan.asked < self.cfg.search.num_samples and len(plan.open) < self.cfg.search.max_concurrent:
            plan.asked += 1
            handle = f"{plan.group.key}:{plan.asked}"
            point = dict(plan.search.suggest(handle))
            plan.open[handle] = chosen_text(point)
            out.append(point)
        return out

    def _exhausted(self, plan: GroupPlan) -> bool:
        if isinstance(plan.search, list):
            return not plan.search
        return plan.asked >= self.cfg.search.num_samples and not plan.open

    def _tell(self, plan: GroupPlan) -> None:
        """Tell the searcher every open point whose cells are all back."""
        if isinstance(plan.search, list):
            return
        stream, col, _ = objective(self.cfg)
        for handle, key in list(plan.open.items()):
            point = json.loads(key)
            if any(self._missing(plan.cell(point, s)) for s in plan.streams):
                continue
            row = self.rows.get(plan.cell(point, stream).cell_id(), {})
            value = row.get(col) if row.get("status") == STATUS_OK else None
            if value is None or not math.isfinite(value):
                plan.search.on_trial_complete(handle, error=True)
            else:
                plan.search.on_trial_complete(handle, result={"objective": float(value)})
            del plan.open[handle]

    # ------------------------------------------------------------------ bookkeeping
    def _missing(self, cell: Cell | None) -> bool:
        return cell is not None and cell.cell_id() not in self.rows

    def _enqueue(self, plan: GroupPlan, cells: list[Cell], stream: str) -> None:
        for cell in cells:
            cid = cell.cell_id()
            if cid in self.owner:
                continue
            self.owner[cid], self.stream[cid] = plan, stream
            self.added_members.append(cid)
            self.n_cells += 1
            if cid in self.rows and (self.rows[cid]["status"] == STATUS_OK or stream == "validation"):
                self.n_skipped += 1  # done before: reused ('stopped' counts only for a validation trial)
            else:
                self.rows.pop(cid, None)
                self.queue.append(cell)

    def _add_point(self, plan: GroupPlan, point: dict[str, Any]) -> None:
        for cell, stream in zip(plan.add_point(point), plan.streams):
            self._enqueue(plan, [cell], stream)

    def _advance(self) -> None:
        """Plan every cell that can be planned now (new points, holdout's chosen test cells)."""
        for plan in self.plans.values():
            self._tell(plan)
            for point in self._next_points(plan):
                self._add_point(plan, point)
            self._tell(plan)
            if self._needs_chosen(plan):
                best = best_point(plan, self.rows, "validation", "error", "min")
                if best is not None:
                    self._enqueue(plan, [plan.chosen_cell(best[0])], "chosen")
                else:
                    plan.chosen_planned = True

    def _needs_chosen(self, plan: GroupPlan) -> bool:
        if "holdout" not in self.cfg.protocols or self.cfg.uses_test_trials or plan.chosen_planned:
            return False
        return self._exhausted(plan) and not any(self._missing(plan.cell(p, "validation")) for p in plan.points)

    # ------------------------------------------------------------------ the executor's interface
    def attach(self, backend) -> None:
        """ASHA's arbiter: an object here (--local) or a Ray actor every validation task asks."""
        if self.cfg.search.scheduler != "asha":
            return
        arbiter = AshaArbiter(self.cfg.search.reduction_factor)
        if backend.mode == "ray":
            actor = backend.ray.remote(AshaArbiter).options(num_cpus=0, name=None)
            arbiter = actor.remote(self.cfg.search.reduction_factor)
        self.arbiter = arbiter
        lengths: dict[tuple, int] = {}
        for plan in self.plans.values():
            max_t = self._validation_batches(plan, lengths)
            every = self.cfg.search.report_every or first_rung(max_t, self.cfg.search.reduction_factor)
            self.report_every[plan.group.key] = every
            self.milestones[plan.group.key] = milestones(max_t, every, self.cfg.search.reduction_factor)
            self._call("add_group", plan.group.key, max_t, every)
            for (_, stream), cell in plan.cells.items():
                row = self.rows.get(cell.cell_id())
                if stream == "validation" and row is not None:
                    final = (batches_of(row), row_score(row)) if row["status"] == STATUS_OK else None
                    self._call("replay", plan.group.key, cell.cell_id(), row.get("report_values"), final)

    def _call(self, name: str, *args: Any) -> Any:
        method = getattr(self.arbiter, name)
        if hasattr(method, "remote"):
            import ray

            return ray.get(method.remote(*args))
        return method(*args)

    def _validation_batches(self, plan: GroupPlan, lengths: dict[tuple, int]) -> int:
        cell = trial_cell(self.cfg, plan.group, None, "validation")
        key = (cell.setting, cell.seed)
        if key not in lengths:
            stream = build_stream(cell, load_cell_dataset(cell))
            lengths[key] = math.ceil(len(stream.indices) / cell.batch_size)
        return lengths[key]

    def report_for(self, cell: Cell) -> Report | None:
        if self.arbiter is None or self.stream[cell.cell_id()] != "validation":
            return None
        plan = self.owner[cell.cell_id()]
        key = plan.group.key
        return Report(self.report_every[key], AshaHook(self.arbiter, key, cell.cell_id(), self.milestones[key]))

    def take(self) -> list[Cell]:
        cells, self.queue = self.queue, []
        self.waiting.update(c.cell_id() for c in cells)
        return cells

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        cid = cell.cell_id()
        self.waiting.discard(cid)
        self.outbox.append((row, text))
        self.rows[cid] = row
        if self.arbiter is not None and self.stream[cid] == "validation" and row.get("status") == STATUS_OK:
            self._call("complete", self.owner[cid].group.key, cid, batches_of(row), row_score(row))
        self._advance()

    def drain(self) -> list[tuple[dict[str, Any], str]]:
        out, self.outbox = self.outbox, []
        return out

    def done(self) -> bool:
        return not self.queue and not self.waiting and not self.outbox and all(
            self._exhausted(p) and not self._needs_chosen(p) for p in self.plans.values()
        )
