"""An Optuna selection (Ray Tune's OptunaSearch through its suggest / on_trial_complete interface) on a tiny subset:
``num_samples`` points from the method's declared space, every protocol chooses among them, resume asks none again."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

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
