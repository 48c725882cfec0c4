"""``unitta.tune`` on a local Ray cluster: a tiny grid and a tiny Optuna stress search, real cells.

Cells use the embedded Fashion-MNIST-C on a 20-images-per-domain subset and the exact sampler with a
200-image stream, so a trial takes about a second once its worker has imported torch.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from unitta.evaluate import run_cell
from unitta.results import load_results
from unitta.tune import run_tune
from unitta.tune.config import parse_tune_config, trial_cells

CELL = {"dataset": "fmnist-c", "setting": "nunu", "sampler": "exact", "length": 200, "n_per_domain": 20,
        "factors": {"domain_beta": 5.0}, "batch_size": 50}


def _grid_cfg() -> dict:
    # domain (n,u) with beta = 5 over D = 15 domains: Cor. 1 needs alpha_1 >= 0.8133, so 0.5 is infeasible
    return {"name": "tiny_grid", "cell": CELL, "methods": ["test"], "space": {"domain_alpha": [0.5, 0.9]},
            "search": {"algorithm": "grid", "max_concurrent": 2}}


def test_grid_trials_are_cells_and_resume(ray_session, tmp_path: Path) -> None:
    cfg = parse_tune_config(_grid_cfg())
    rows = run_tune(cfg, tmp_path)
    files = sorted((tmp_path / "cells").glob("*.parquet"))
    assert rows.height == 2 and len(files) == 2
    assert sorted(load_results(tmp_path, sweep="tiny_grid")["cell_id"]) == sorted(rows["cell_id"])  # membership
    assert rows["trial_id"].null_count() == 0 and set(rows["tune_name"]) == {"tiny_grid"}

    ok = rows.filter(pl.col("param_domain_alpha") == 0.9).row(0, named=True)
    assert ok["status"] == "ok" and ok["tune_feasible"] and ok["domain_alpha"] == 0.9 and ok["domain_beta"] == 5.0
    # the trial's row is the cell's row: same id, same error as running the cell directly
    (cell,) = trial_cells(cfg, {"domain_alpha": 0.9})
    direct = run_cell(cell)
    assert ok["cell_id"] == cell.cell_id() and ok["error"] == pytest.approx(direct["error"], abs=1e-9)
    assert ok["tune_objective_value"] == pytest.approx(ok["error"])

    bad = rows.filter(pl.col("param_domain_alpha") == 0.5).row(0, named=True)
    assert bad["status"] == "failed" and bad["tune_feasible"] is False
    assert bad["error_text"].startswith("infeasible: ") and math.isnan(bad["tune_objective_value"])
    assert bad["domain_alpha"] == 0.5 and bad["domain_beta"] == 5.0  # placed on its factor axis

    # resume: the feasible cell is done and not run again; only the infeasible point is re-checked
    mtime = {p.name: p.stat().st_mtime_ns for p in files}
    again = run_tune(cfg, tmp_path)
    assert again.height == 2
    assert (tmp_path / "cells" / f"{cell.cell_id()}.parquet").stat().st_mtime_ns == mtime[f"{cell.cell_id()}.parquet"]


def test_optuna_gap_search_stays_feasible_and_resumes(ray_session, tmp_path: Path) -> None:
    cfg = parse_tune_config(
        {"name": "tiny_stress", "cell": {**CELL, "factors": {}},
         "space": {"domain_alpha": {"low": 0.5, "high": 0.95}, "domain_beta": {"low": 1.0, "high": 10.0, "log": True}},
         "search": {"algorithm": "optuna", "num_samples": 3, "seed": 0, "max_concurrent": 2, "feasible_only": True},
         "objective": {"metric": "gap", "gap": ["bn", "test"], "mode": "max"}}
    )
    rows = run_tune(cfg, tmp_path)
    assert rows.height == 6 and rows["trial_id"].n_unique() == 3
    for trial in rows.partition_by("trial_id"):
        by_method = {r["method"]: r for r in trial.iter_rows(named=True)}
        assert set(by_method) == {"bn", "test"}
        bn, test = by_method["bn"], by_method["test"]
        assert bn["domain_alpha"] == test["domain_alpha"] and bn["domain_beta"] == test["domain_beta"]  # same stream
        # feasible_only: alpha_1 is placed on Cor. 1's interval, (1 - alpha_1) beta <= 14/15 for D = 15
        assert bn["tune_feasible"] and (1 - bn["domain_alpha"]) * bn["domain_beta"] <= 14 / 15 + 1e-9
        assert 0.5 <= bn["domain_alpha"] <= 0.95 and 1.0 <= bn["domain_beta"] <= 10.0
        assert bn["tune_objective_value"] == pytest.approx(bn["error"] - test["error"])
    assert load_results(tmp_path).height == 6
    assert load_results(tmp_path, sweep="tiny_stress").height == 6  # every trial's cells are recorded as members
    # resume: the 3 done trials count towards num_samples, so nothing runs and nothing is rewritten
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "cells").glob("*.parquet")}
    again = run_tune(cfg, tmp_path)
    assert again.height == 6
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cells").glob("*.parquet")} == mtimes
