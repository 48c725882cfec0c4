"""``unitta select`` end to end on the embedded Fashion-MNIST-C (--local): the issue's example config as written
but on a 10-images-per-domain subset (S = 1: 150-image test streams, 40-image validation streams).

Checks the done-when conditions: the oracle is the minimum of the grid's test errors; every protocol's
test_error equals a plain ``unitta sweep`` cell run with its chosen point; the held-out corruptions are disjoint
from the test ones; non-oracle choices do not change when the labels that scoring sees are permuted; a killed
selection resumes without rerunning finished trials.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from unitta.data import HELD_OUT_CORRUPTIONS
from unitta.data.records import CORRUPTIONS
from unitta.evaluate import evaluate
from unitta.evaluate.inputs import load_cell_dataset
from unitta.results import load_results
from unitta.run import RunOptions
from unitta.select import SELECTION_COLUMNS, parse_select_config, run_select, selection_rows
from unitta.select.plan import SelectPlanner
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
TINY = {"n_per_domain": 10, "S": 1}
LOCAL = RunOptions(local=True, progress=False)


def _example(**changes) -> dict:
    raw = yaml.safe_load((ROOT / "sweeps" / "select_example.yaml").read_text())
    raw["cell"].update(TINY)
    raw.update(copy.deepcopy(changes))
    return raw


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    cfg = parse_select_config(_example())
    out = tmp_path_factory.mktemp("select_example")
    outcome, selection = run_select(cfg, out, LOCAL)
    return cfg, out, outcome, selection


def test_example_writes_one_row_per_protocol_and_the_oracle_is_the_grid_minimum(example) -> None:
    cfg, out, outcome, sel = example
    assert outcome.n_failed == 0 and tuple(sel.columns) == SELECTION_COLUMNS
    assert sel.height == 2 * 2 * 4  # settings x methods x (default, oracle, holdout, unsupervised:entropy)
    assert set(sel["protocol"]) == {"default", "oracle", "holdout", "unsupervised"}
    assert sel.filter(pl.col("protocol") == "unsupervised")["criterion"].to_list() == ["entropy"] * 4
    rows = load_results(out, sweep=cfg.name).filter(pl.col("status") == "ok")
    for r in sel.filter(pl.col("protocol") == "oracle").iter_rows(named=True):
        grid = rows.filter(
            (pl.col("method") == r["method"]) & (pl.col("setting") == r["setting"]) & pl.col("corruptions").is_null()
            & (pl.col("method_kwargs") != "{}")
        )
        assert grid.height == 3 and r["oracle_error"] == pytest.approx(grid["error"].min(), abs=1e-12)
        assert r["test_error"] == r["oracle_error"] and r["gap_to_oracle"] == 0.0 and r["trials"] == 3
    assert (sel["gap_to_oracle"].drop_nulls() >= -1e-9).all()


def test_holdout_is_disjoint_from_the_test_corruptions(example) -> None:
    cfg, out, _, sel = example
    holdout = sel.filter(pl.col("protocol") == "holdout")
    for names in holdout["validation_corruptions"].to_list():
        assert names == list(HELD_OUT_CORRUPTIONS) and not set(names) & set(CORRUPTIONS)
    validation = load_results(out).filter(pl.col("corruptions").is_not_null())
    assert validation.height == 12 and set(validation["corruptions"]) == {json.dumps(list(HELD_OUT_CORRUPTIONS))}
    # the validation stream is the test stream's setting and seed on 4 domains instead of 15 (i111: each state once)
    assert (validation.filter(pl.col("setting") == "i111")["n_samples"] == 4 * 10).all()


def test_each_protocols_test_error_equals_a_plain_sweep_cell(example, tmp_path: Path) -> None:
    cfg, _, _, sel = example
    chosen = sel.select("method", "setting", "chosen", "test_error").unique(["method", "setting", "chosen"])
    methods = sorted({(m, c) for m, c in zip(chosen["method"], chosen["chosen"])})
    sweep = parse_config({
        "name": "plain", "datasets": ["fmnist-c"], "settings": cfg.setting_list, "seeds": [cfg.cell.seed],
        "methods": [{m: json.loads(c)} for m, c in methods], **TINY,
    })
    run_sweep(sweep, tmp_path, local=True, progress=False)
    plain = load_results(tmp_path)
    for r in chosen.iter_rows(named=True):
        match = plain.filter((pl.col("method") == r["method"]) & (pl.col("setting") == r["setting"])
                             & (pl.col("method_kwargs") == json.dumps(json.loads(r["chosen"]), sort_keys=True)))
        assert match.height == 1 and match["error"][0] == pytest.approx(r["test_error"], abs=1e-9), r


def test_choices_without_test_labels_survive_permuted_labels(example, monkeypatch) -> None:
    """Rerun every test-stream trial on the same stream, but with scoring seeing permuted labels."""
    import unitta.evaluate.inputs

    cfg, out, _, sel = example
    rows = {r["cell_id"]: r for r in load_results(out).to_dicts()}
    planner = SelectPlanner(cfg, rows)
    original = load_cell_dataset(_cell_of(planner, next(iter(planner.stream))))
    permuted = copy.copy(original)
    permuted.labels = np.random.default_rng(0).permutation(original.labels)
    build = unitta.evaluate.inputs.build_stream
    monkeypatch.setattr(unitta.evaluate.inputs, "build_stream", lambda cell, dataset: build(cell, original))
    again_rows = dict(rows)
    for cid, stream in planner.stream.items():
        if stream == "test":  # validation labels are not test labels: only the test stream's are permuted
            again_rows[cid] = {**evaluate(_cell_of(planner, cid), dataset=permuted), "status": "ok"}
    again = pl.DataFrame(selection_rows(cfg, list(planner.plans.values()), again_rows))
    key = ["method", "setting", "protocol", "criterion"]
    before, after = sel.sort(key, nulls_last=True), again.sort(key, nulls_last=True)
    assert (before["selection_score"] != after["selection_score"]).fill_null(False).any()  # the oracle's moved
    non_oracle = pl.col("protocol") != "oracle"
    assert before.filter(non_oracle)["chosen"].to_list() == after.filter(non_oracle)["chosen"].to_list()


def _cell_of(planner: SelectPlanner, cid: str):
    plan = planner.owner[cid]
    return next(c for c in plan.cells.values() if c.cell_id() == cid)


def test_a_killed_selection_resumes_without_rerunning_finished_trials(example, tmp_path: Path) -> None:
    cfg, out, _, sel = example
    import shutil

    shutil.copytree(out, tmp_path / "copy")
    copy_out = tmp_path / "copy"
    (copy_out / "results.parquet").unlink()
    files = sorted((copy_out / "cells").glob("*.parquet"))
    files[0].unlink()  # the trial a kill interrupted
    before = {p.name: p.stat().st_mtime_ns for p in files[1:]}
    outcome, again = run_select(cfg, copy_out, LOCAL)
    assert outcome.n_skipped == outcome.n_cells - 1 and outcome.n_ok == 1
    assert {p.name: p.stat().st_mtime_ns for p in files[1:]} == before
    assert again.drop("chosen_cell_id").equals(sel.drop("chosen_cell_id"))
