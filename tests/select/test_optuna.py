"""An Optuna selection (Ray Tune's OptunaSearch through its suggest / on_trial_complete interface) on a tiny subset:
``num_samples`` points from the method's declared space, every protocol chooses among them, resume asks none again."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from unitta.methods import method_space
from unitta.run import RunOptions
from unitta.select import parse_select_config, run_select


def test_optuna_points_come_from_the_declared_space_and_resume(tmp_path: Path) -> None:
    cfg = parse_select_config({
        "name": "optuna_tiny", "cell": {"dataset": "fmnist-c", "n_per_domain": 10, "S": 1, "batch_size": 16},
        "methods": ["tent"], "space": "declared", "protocols": ["default", "oracle"],
        "search": {"algorithm": "optuna", "num_samples": 3, "max_concurrent": 2, "seed": 1},
    })
    opts = RunOptions(local=True, progress=False)
    outcome, sel = run_select(cfg, tmp_path, opts)
    assert outcome.n_cells == 4 and outcome.n_failed == 0  # the default cell and three suggested points
    oracle = sel.filter(pl.col("protocol") == "oracle").row(0, named=True)
    lr = json.loads(oracle["chosen"])["lr"]
    assert method_space("tent")["lr"].contains(lr) and oracle["trials"] == 3
    again, sel2 = run_select(cfg, tmp_path, opts)
    assert again.n_skipped == again.n_cells == 4 and sel2["chosen"].to_list() == sel["chosen"].to_list()


@pytest.mark.parametrize(("seed", "window"), [(0, 1), (1, 2)])
def test_optuna_points_repeated_by_the_searcher_are_answered_from_the_finished_rows(
        tmp_path: Path, seed: int, window: int) -> None:
    """A list space smaller than num_samples: Optuna proposes points already run (seed 0: 0.5, 0.1, 0.5, 0.5, one
    trial at a time) or still running (seed 1: 0.5, 0.5, 0.1, 0.5, two at a time); they are answered from the rows
    of their cells (no cell runs twice), and a rerun proposes them again and runs nothing (issue 43, B)."""
    cfg = parse_select_config({
        "name": "optuna_repeats", "cell": {"dataset": "fmnist-c", "n_per_domain": 10, "S": 1, "batch_size": 50},
        "methods": ["bn_alpha"], "space": {"bn_alpha": {"alpha": [0.1, 0.5]}}, "protocols": ["default", "oracle"],
        "search": {"algorithm": "optuna", "num_samples": 4, "max_concurrent": window, "seed": seed},
    })
    opts = RunOptions(local=True, progress=False)
    outcome, sel = run_select(cfg, tmp_path, opts)
    assert outcome.n_failed == 0 and outcome.n_ok == 3  # the default cell and the two points, each once
    oracle = sel.filter(pl.col("protocol") == "oracle").row(0, named=True)
    assert json.loads(oracle["chosen"])["alpha"] in (0.1, 0.5) and oracle["trials"] == outcome.n_ok - 1
    again, sel2 = run_select(cfg, tmp_path, opts)
    assert again.n_ok == 0 and again.n_skipped == again.n_cells and sel2.equals(sel)
