"""``unitta select`` on a local Ray cluster: trials are Ray tasks, ASHA's arbiter a Ray actor every validation task
asks; the same choices as --local where nothing is left to the order in which trials finish."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from unitta.results import load_results
from unitta.run import RunOptions
from unitta.select import parse_select_config, run_select

CELL = {"dataset": "fmnist-c", "n_per_domain": 10, "S": 1, "batch_size": 4, "num_threads": 1}


def test_example_protocols_and_asha_on_ray(ray_session, tmp_path: Path) -> None:
    raw = {
        "name": "select_ray", "cell": CELL, "settings": ["i111"], "methods": ["tent"],
        "space": {"tent": {"lr": [0.0001, 0.001, 0.01]}}, "search": {"scheduler": "asha", "report_every": 2},
        "protocols": ["default", "oracle", "holdout", "unsupervised"], "criteria": ["entropy", "consistency"],
    }
    cfg = parse_select_config(raw)
    outcome, sel = run_select(cfg, tmp_path / "ray", RunOptions(progress=False))
    assert outcome.n_failed == 0 and sel.height == 5
    rows = load_results(tmp_path / "ray")
    assert rows["node_id"].drop_nulls().len() == rows.height  # every trial ran as a Ray task
    validation = rows.filter(pl.col("corruptions").is_not_null())
    assert validation.height == 3 and validation["report_values"].null_count() == 0  # reported to the actor
    # the test-stream protocols do not depend on finishing order: the same choices as in this process
    local, sel_local = run_select(cfg.model_copy(update={"search": cfg.search.model_copy(
        update={"scheduler": "none"})}), tmp_path / "local", RunOptions(local=True, progress=False))
    test_side = pl.col("protocol").is_in(["default", "oracle", "unsupervised"])
    key = ["protocol", "criterion"]
    assert sel.filter(test_side).sort(key, nulls_last=True)["chosen"].to_list() == \
        sel_local.filter(test_side).sort(key, nulls_last=True)["chosen"].to_list()
    errors = [s.filter(test_side).sort(key, nulls_last=True)["test_error"].to_list() for s in (sel, sel_local)]
    assert errors[0] == errors[1] and local.n_failed == 0  # same cells, same results on Ray and here
