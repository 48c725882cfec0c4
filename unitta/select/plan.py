"""A selection on the search package's planner (``unitta.search``): groups -> points -> trial cells -> choices.

Per group (method, setting, stream seed) one search runs every point's test trial (when the oracle or
unsupervised protocol asks for it) and validation trial (holdout); the planner also runs the group's default
cell and, for a holdout choice without a test trial, the chosen point's test cell once the search is done.
Points come from the grid or from the search package's Optuna driver (a point proposed again is answered
from the rows of its cells; a resumed search replays the points already run); with ``scheduler: asha`` every
validation trial reports to Ray Tune's ASHA (``unitta.select.asha``), which may stop it ('stopped' rows: never
results). Cells already done in the output directory ('ok', or 'stopped' for a validation trial) are not run
again (resume); every cell of the selection is in its membership record.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from unitta.cell import Cell
from unitta.evaluate.adapt import Report
from unitta.evaluate.criteria import CRITERION_MODES, column
from unitta.evaluate.inputs import build_stream, load_cell_dataset
from unitta.results import STATUS_OK, STATUS_STOPPED
from unitta.search.planner import Search, SearchPlanner, TrialSpace
from unitta.search.searchers import GridSearcher, OptunaSearcher
from unitta.select.asha import AshaArbiter, AshaHook, asha_score, first_rung, milestones
from unitta.select.config import SelectConfig
from unitta.select.groups import Group, chosen_text, distributions, grid_points, groups, trial_cell

__all__ = ["SelectPlanner", "GroupPlan", "batches_of", "best_point", "ok_value", "objective"]


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


def objective(cfg: SelectConfig) -> tuple[str, str, str]:
    """(stream, column, mode) by which an Optuna search proposes points: holdout's validation error, else the
    oracle's test error, else the first criterion."""
    if "holdout" in cfg.protocols:
        return "validation", "error", "min"
    if "oracle" in cfg.protocols:
        return "test", "error", "min"
    return "test", column(cfg.criteria[0]), CRITERION_MODES[cfg.criteria[0]]


class GroupPlan(TrialSpace):
    """One group's trial space (``unitta.search.planner.TrialSpace``): a point's cells (its test and validation
    trials), the objective the searcher is told, and which planned cell is which stream of which point.

    owner, stream: the planner's registries (cell id -> its group, cell id -> its stream, one of STREAMS).
    """

    def __init__(self, cfg: SelectConfig, group: Group, owner: dict[str, GroupPlan], stream: dict[str, str]) -> None:
        self.cfg, self.group, self.owner, self.stream_of = cfg, group, owner, stream
        self.streams = ["test"] if cfg.uses_test_trials else []
        if "holdout" in cfg.protocols:
            self.streams.append("validation")
        self.width = len(self.streams)
        self.points: list[dict[str, Any]] = []
        self.cells: dict[tuple[str, str], Cell] = {}  # (point key or '', stream) -> cell
        # only the holdout protocol has validation cells (an image folder has no corruptions to hold out)
        self._validation = (trial_cell(cfg, group, None, "validation").corruptions
                            if "validation" in self.streams else None)
        self._names: set[str] | None = None

    def _record(self, point: dict[str, Any] | None, stream: str, cell: Cell) -> Cell:
        self.cells[(chosen_text(point) if point is not None else "", stream)] = cell
        self.owner.setdefault(cell.cell_id(), self)
        self.stream_of.setdefault(cell.cell_id(), stream)
        return cell

    def default_cell(self) -> Cell:
        return self._record(None, "default", trial_cell(self.cfg, self.group, None, "default"))

    def chosen_cell(self, point: dict[str, Any]) -> Cell:
        return self._record(point, "chosen", trial_cell(self.cfg, self.group, point, "chosen"))

    def cell(self, point: dict[str, Any] | None, stream: str) -> Cell | None:
        return self.cells.get((chosen_text(point) if point is not None else "", stream))

    # ------------------------------------------------------------------ the trial space
    def trial_cells(self, point: dict[str, Any]) -> list[Cell]:
        return [trial_cell(self.cfg, self.group, point, stream) for stream in self.streams]

    def accept(self, point: dict[str, Any], cells: list[Cell]) -> None:
        if all(chosen_text(p) != chosen_text(point) for p in self.points):
            self.points.append(point)
        for stream, cell in zip(self.streams, cells):
            self._record(point, stream, cell)

    def reuses(self, cell: Cell, row: dict[str, Any]) -> bool:
        """'ok', or 'stopped' for a validation trial (ASHA stopped it: its result is that it stopped)."""
        return row.get("status") == STATUS_OK or (row.get("status") == STATUS_STOPPED and self._validation is not None
                                                  and cell.corruptions == self._validation)

    def objective(self, rows: list[dict[str, Any]]) -> float:
        stream, col, _ = objective(self.cfg)
        value = ok_value(rows[self.streams.index(stream)], col)
        return math.nan if value is None else value

    def point_of(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """The searched hyper-parameters of a row's method_kwargs (None if it lacks one)."""
        if self._names is None:
            self._names = set(distributions(self.cfg, self.group.method))
        kwargs = json.loads(row.get("method_kwargs") or "{}")
        point = {k: v for k, v in kwargs.items() if k in self._names}
        return point if set(point) == self._names else None


class SelectPlanner(SearchPlanner):
    """The executor's planner of a selection: one search per group on the search package's planner, the default
    cells, holdout's chosen cells, ASHA's reports (see the module docstring).

    rows: the rows already in the output folder, by cell id, any status.
    """

    def __init__(self, cfg: SelectConfig, rows: dict[str, dict[str, Any]]) -> None:
        self.cfg = cfg
        self.owner: dict[str, GroupPlan] = {}  # cell id -> its group
        self.stream: dict[str, str] = {}  # cell id -> its stream (STREAMS)
        self.plans = {g.key: GroupPlan(cfg, g, self.owner, self.stream) for g in groups(cfg)}
        self.arbiter: Any = None
        self.report_every: dict[str, int] = {}
        self.milestones: dict[str, tuple[int, ...]] = {}
        searches = [Search(plan, *self._searcher(plan), plan.group.key) for plan in self.plans.values()]
        super().__init__(searches, rows, [plan.default_cell() for plan in self.plans.values()])

    def _searcher(self, plan: GroupPlan) -> tuple[GridSearcher | OptunaSearcher, int]:
        """(the group's searcher, its window): a grid's points all at once, Optuna's ``max_concurrent``."""
        search = self.cfg.search
        if search.algorithm == "grid":
            points = grid_points(self.cfg, plan.group.method)
            if search.scheduler == "asha":  # asynchronous halving assumes no order (a sorted grid would
                random.Random(search.seed).shuffle(points)  # keep improving and never stop)
            return GridSearcher(points), max(1, len(points))
        _, _, mode = objective(self.cfg)
        searcher = OptunaSearcher(distributions(self.cfg, plan.group.method), mode, search.seed, search.num_samples,
                                  name=plan.group.key)
        return searcher, search.max_concurrent

    def search_done(self, search: Search) -> None:
        """Holdout without test trials: the test cell of the point best on the validation stream."""
        plan = search.space
        if "holdout" not in self.cfg.protocols or self.cfg.uses_test_trials:
            return
        best = best_point(plan, self.rows, "validation", "error", "min")
        if best is not None:
            self.plan_cell(plan.chosen_cell(best[0]))

    # ------------------------------------------------------------------ ASHA
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

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        cid = cell.cell_id()
        if self.arbiter is not None and self.stream.get(cid) == "validation" and row.get("status") == STATUS_OK:
            self._call("complete", self.owner[cid].group.key, cid, batches_of(row), row_score(row))
        super().on_result(cell, row, text)
