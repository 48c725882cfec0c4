"""The protocols' choices from a selection's trial rows, and ``<out>/selection.parquet`` (docs/selection.md).

One row per (dataset, setting, seed, method, protocol, criterion):
- default: the method's defaults (the plain sweep cell);
- oracle: the point with the lowest test-stream error (labels of the test stream: an upper bound);
- holdout: the point with the lowest validation-stream error (held-out corruptions; 'stopped' trials never
  win: they have no result);
- unsupervised: per criterion, the point best on the test stream by that label-free criterion.
Only the oracle reads test errors to choose; the others read validation errors or criterion columns.
Ties go to the point whose JSON sorts first (independent of run order). Errors are percent, as in the rows' ``error``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unitta.evaluate.criteria import CRITERION_MODES, column
from unitta.files import write_atomically
from unitta.select.config import SelectConfig
from unitta.select.groups import chosen_text
from unitta.select.plan import GroupPlan, batches_of, best_point, ok_value

__all__ = ["SELECTION_COLUMNS", "selection_rows", "write_selection"]

SELECTION_COLUMNS = (
    "dataset", "setting", "seed", "method", "protocol", "criterion", "chosen", "selection_score", "test_error",
    "default_error", "oracle_error", "gap_to_oracle", "trials", "batches_spent", "validation_corruptions",
    "chosen_cell_id",
)


def _spent(plan: GroupPlan, rows: dict[str, dict], stream: str) -> tuple[int, int]:
    """(trials run, adapted batches) of the group's trials on ``stream`` (stopped ones count)."""
    cells = [plan.cell(p, stream) for p in plan.points]
    found = [rows[c.cell_id()] for c in cells if c is not None and c.cell_id() in rows]
    return len(found), sum(batches_of(r) for r in found)


def _test_row(plan: GroupPlan, rows: dict[str, dict], point: dict[str, Any]) -> dict | None:
    for stream in ("test", "chosen"):
        cell = plan.cell(point, stream)
        if cell is not None and cell.cell_id() in rows:
            return rows[cell.cell_id()]
    return None


def _default_point(plan: GroupPlan, default_row: dict | None) -> dict[str, Any]:
    """The default values of the searched hyper-parameters (from the default cell's resolved config)."""
    names = {n for p in plan.points for n in p}
    config = json.loads(default_row["method_config"]) if default_row and default_row.get("method_config") else {}
    return {n: config.get(n) for n in sorted(names)}


def _record(common: dict[str, Any], protocol: str, criterion: str | None, point: dict[str, Any] | None,
            score: float | None, spent: tuple[int, int], test_row: dict | None, validation=None) -> dict[str, Any]:
    test_error = ok_value(test_row, "error")
    oracle_error = common["oracle_error"]
    return {
        **common, "protocol": protocol, "criterion": criterion, "chosen": None if point is None else chosen_text(point),
        "selection_score": score, "test_error": test_error,
        "gap_to_oracle": None if test_error is None or oracle_error is None else test_error - oracle_error,
        "trials": spent[0], "batches_spent": spent[1], "validation_corruptions": validation,
        "chosen_cell_id": None if test_row is None else test_row["cell_id"],
    }


def _group_rows(cfg: SelectConfig, plan: GroupPlan, rows: dict[str, dict]) -> list[dict[str, Any]]:
    default_row = rows.get(plan.cell(None, "default").cell_id())
    oracle = best_point(plan, rows, "test", "error", "min") if cfg.uses_test_trials else None
    common = dict(
        dataset=cfg.cell.dataset, setting=plan.group.setting, seed=plan.group.seed, method=plan.group.method,
        default_error=ok_value(default_row, "error"), oracle_error=None if oracle is None else oracle[1],
    )
    test_spent = _spent(plan, rows, "test")

    def chosen(best):  # (point, score, the point's test row)
        return (None, None, None) if best is None else (best[0], best[1], _test_row(plan, rows, best[0]))

    out = []
    for protocol in cfg.protocols:
        if protocol == "default":
            out.append(_record(common, "default", None, _default_point(plan, default_row), None, (0, 0), default_row))
        elif protocol == "oracle":
            point, score, test_row = chosen(oracle)
            out.append(_record(common, "oracle", None, point, score, test_spent, test_row))
        elif protocol == "holdout":
            point, score, test_row = chosen(best_point(plan, rows, "validation", "error", "min"))
            out.append(_record(common, "holdout", None, point, score, _spent(plan, rows, "validation"), test_row,
                               list(cfg.validation.names())))
        else:
            for name in cfg.criteria:
                point, score, test_row = chosen(best_point(plan, rows, "test", column(name), CRITERION_MODES[name]))
                out.append(_record(common, "unsupervised", name, point, score, test_spent, test_row))
    return out


def selection_rows(cfg: SelectConfig, plans: list[GroupPlan], rows: dict[str, dict]) -> list[dict[str, Any]]:
    """The rows of selection.parquet (see the module docstring), group by group."""
    return [record for plan in plans for record in _group_rows(cfg, plan, rows)]


def write_selection(out_dir: Path, records: list[dict[str, Any]]) -> Path:
    """``<out>/selection.parquet`` (atomically), columns SELECTION_COLUMNS in that order."""
    import polars as pl

    schema = {
        "dataset": pl.String, "setting": pl.String, "seed": pl.Int64, "method": pl.String, "protocol": pl.String,
        "criterion": pl.String, "chosen": pl.String, "selection_score": pl.Float64, "test_error": pl.Float64,
        "default_error": pl.Float64, "oracle_error": pl.Float64, "gap_to_oracle": pl.Float64, "trials": pl.Int64,
        "batches_spent": pl.Int64, "validation_corruptions": pl.List(pl.String), "chosen_cell_id": pl.String,
    }
    df = pl.DataFrame(records, schema=schema) if records else pl.DataFrame(schema=schema)
    path = Path(out_dir) / "selection.parquet"
    write_atomically(path, lambda handle: df.write_parquet(handle))
    return path
