"""A tune trial: one point of the stream factors and the BDN layer, one cell per method (two for a 'gap'
objective: both methods on the same stream), its objective and the trial columns of its rows (docs/analysis.md).

``TuneTrials`` is tune's trial space of the search package's planner (``unitta.search.planner``): grid
searches walk ``unitta.tune.config.grid_trials``; Optuna searches use the search package's Optuna driver.
Points the stream sampler refuses (paper Cor. 1, ``make_stream`` raises ValueError) are not run: their
rows get status 'failed', an ``error_text`` starting with 'infeasible:' and ``tune_feasible = False``,
and the trial's objective is NaN (Optuna records the trial as failed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from typing import Any

from unitta.cell import Cell
from unitta.evaluate import failed_row
from unitta.evaluate.input_checks import infeasibility
from unitta.results import STATUS_OK
from unitta.search.distributions import distribution, point_key
from unitta.search.planner import Trial, TrialSpace
from unitta.search_dimensions import Choice, Uniform
from unitta.tune.config import FACTORS, TuneConfig, feasible_pairs, trial_cells, with_method

__all__ = ["TRIAL_COLUMNS", "TuneTrials", "optuna_space"]

_log = logging.getLogger("unitta.tune")

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


def _infeasible_row(cell: Cell, message: str) -> dict[str, Any]:
    """A row for a cell that was not run (infeasible point): identity columns, status and reason."""
    from unitta.streams.settings import default_factors

    row = failed_row(cell, message)
    # The factor columns hold the values the stream would have used (defaults + overrides), as for
    # a row that ran, so that the analysis can place the point on its factor axis.
    resolved = {**default_factors(cell.setting, cell.dataset), **cell.factors}
    row.update({k: float(resolved[k]) for k in FACTORS})
    return row


class TuneTrials(TrialSpace):
    """Tune's trials (see the module docstring).

    num_domains, num_classes: the dataset's state counts (feasibility, paper Cor. 1); layers: the model's
    BatchNorm layers in module order; default_layer its default BDN layer (recorded with the rows so that the
    analysis can order and mark the layers).
    """

    def __init__(self, cfg: TuneConfig, num_domains: int, num_classes: int, layers: tuple[str, ...] = (),
                 default_layer: str | None = None) -> None:
        self.cfg, self.num_domains, self.num_classes = cfg, num_domains, num_classes
        self.layers, self.default_layer = tuple(layers), default_layer
        self.width = len(cfg.trial_methods)
        self._why: dict[str, str | None] = {}

    @property
    def sizes(self) -> dict[str, int]:
        return {"domain": self.num_domains, "class": self.num_classes}

    def trial_cells(self, point: dict[str, Any]) -> list[Cell]:
        params = {k: v for k, v in point.items() if k != "method"}
        return trial_cells(with_method(self.cfg, point.get("method")), params)

    def _infeasible(self, point: dict[str, Any], cells: list[Cell]) -> str | None:
        key = point_key(point)
        if key not in self._why:
            self._why[key] = infeasibility(cells[0], self.num_domains, self.num_classes)
        return self._why[key]

    def not_run(self, point: dict[str, Any], cells: list[Cell]) -> dict[str, tuple[dict[str, Any], str]]:
        why = self._infeasible(point, cells)
        if why is None:
            return {}
        return {c.cell_id(): ({**_infeasible_row(c, _INFEASIBLE + why), "sweep_name": self.cfg.name},
                              f"cell {c.cell_id()}\nnot run: {_INFEASIBLE}{why}\n") for c in cells}

    def objective(self, rows: list[dict[str, Any]]) -> float:
        errors = [r.get("error") if r.get("status") == STATUS_OK else None for r in rows]
        if any(e is None or not math.isfinite(e) for e in errors):
            return float("nan")
        return float(errors[0] - errors[1]) if self.cfg.objective.metric == "gap" else float(errors[0])

    def finish(self, trial: Trial, value: float) -> list[dict[str, Any]]:
        """Every row of the trial with the trial columns."""
        cfg, params = self.cfg, {k: v for k, v in trial.point.items() if k != "method"}
        why = self._infeasible(trial.point, trial.cells)
        layer = params.get("layer")
        columns = dict(
            trial_id=hashlib.sha256(json.dumps([cfg.name, trial.point], sort_keys=True, default=str).encode())
            .hexdigest()[:12],
            tune_name=cfg.name,
            tune_objective=cfg.objective.metric
            if cfg.objective.metric == "error"
            else f"gap({cfg.objective.gap[0]} - {cfg.objective.gap[1]})",
            tune_objective_value=value,
            tune_feasible=why is None,
            **{f"param_{k}": (float(params[k]) if k in params else None) for k in FACTORS},
            param_layer=layer,
            param_layer_index=self.layers.index(layer) if layer in self.layers else None,
            tune_default_layer=self.default_layer,
            tune_algorithm=cfg.search.algorithm,
        )
        point = {k: round(v, 4) if isinstance(v, float) else v for k, v in trial.point.items()}
        _log.info("trial %s: %s", point, "infeasible" if why else f"objective {value:.3g}")
        return [{**trial.rows[c.cell_id()], **columns} for c in trial.cells]

    def point_of(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """An Optuna trial's point from its rows' param_* columns (None if it searched other dimensions)."""
        point = {n: row.get(f"param_{n}") for n in self.cfg.space.searched()}
        return None if any(v is None for v in point.values()) else point


def optuna_space(cfg: TuneConfig, layers: list[str]) -> dict[str, Any]:
    """The Optuna searcher's space: each searched factor and the layer (a feasible_only alpha_1 as u in [0, 1])."""
    space: dict[str, Any] = {}
    for name in cfg.space.searched():
        if name == "layer":
            space[name] = distribution(Choice(tuple(layers)))
        elif cfg.search.feasible_only and name.endswith("_alpha") and name.split("_")[0] in feasible_pairs(cfg):
            space[f"{name}_u"] = distribution(Uniform(0.0, 1.0))  # mapped onto the feasible interval per trial
        else:
            space[name] = distribution(getattr(cfg.space, name))
    return space
