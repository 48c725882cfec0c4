"""The gradual protocols in a sweep: listed by ``--dry-run``, run ``--local`` on the embedded data to finite errors
with the error at severity 5 beside them, refused on a dataset without severities (docs/streams.md)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import yaml

from analysis import heatmaps
from analysis.common import AnalysisError, use_metric
from unitta.cell import Cell
from unitta.evaluate.adapt import _batch_plan
from unitta.results import load_results
from unitta.streams import make_stream
from unitta.sweep import main

# Two corruptions x 9 severity steps x 20 images = 360 positions a cell; the missing severities 1-4 of the two
# corruptions are prepared once into the test's own data folder (8 domains of 20 images).
CONFIG = {"name": "gradual", "datasets": ["fmnist-c"], "methods": ["test", "tent"],
          "sampler": ["gradual", "gradual_correlated"], "corruptions": ["motion_blur", "gaussian_noise"],
          "n_per_domain": 20, "batch_size": 16, "seeds": [1], "resources": {"num_cpus": 1, "num_gpus": 0}}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(output folder, stdout) of one local sweep of CONFIG."""
    root = tmp_path_factory.mktemp("gradual")
    config = root / "gradual.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "data_dir": str(root / "data")}))
    out = root / "out"
    assert main([str(config), "--output", str(out), "--local", "--no-progress"]) == 0
    return out, config


def test_dry_run_lists_both_protocols(swept, capsys):
    out, config = swept
    assert main([str(config), "--output", str(out), "--dry-run", "--no-preflight"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gradual: 4 cells, 4 already done")
    assert sum("i111 sampler=gradual " in line for line in lines) == 2
    assert sum("1111 sampler=gradual_correlated " in line for line in lines) == 2


def test_both_protocols_run_to_finite_errors_with_the_error_at_severity_5(swept):
    out, _ = swept
    df = load_results(out)
    assert df.height == 4 and df["status"].to_list() == ["ok"] * 4
    rows = {(r["sampler"], r["method"]): r for r in df.iter_rows(named=True)}
    for (sampler, _method), r in rows.items():
        assert r["setting"] == {"gradual": "i111", "gradual_correlated": "1111"}[sampler]
        assert r["n_samples"] == 2 * 9 * 20 and r["images_reused"] == 2 * 4 * 20
        assert math.isfinite(r["error"]) and math.isfinite(r["severity5_error"])
        steps = {d["name"]: d for d in r["per_domain"]}
        assert set(steps) == {f"{c}_{s}" for c in ("motion_blur", "gaussian_noise") for s in range(1, 6)}
        assert steps["motion_blur_5"]["n"] == 20 and steps["motion_blur_1"]["n"] == 40  # severity 1: up and down
        # the error at severity 5 is the severity-5 steps' error (both have 20 images: their mean)
        at_5 = (steps["motion_blur_5"]["error"] + steps["gaussian_noise_5"]["error"]) / 2
        assert r["severity5_error"] == pytest.approx(at_5)
    for sampler in ("gradual", "gradual_correlated"):
        test, tent = rows[(sampler, "test")], rows[(sampler, "tent")]
        assert tent["error"] != test["error"]  # TENT adapts
    # the source model does not adapt: the order does not change its errors
    assert rows[("gradual", "test")]["error"] == pytest.approx(rows[("gradual_correlated", "test")]["error"])
    # severity 5 is the hardest step of the source model
    assert rows[("gradual", "test")]["severity5_error"] > rows[("gradual", "test")]["error"]


def test_analysis_tables_show_the_protocols_and_their_error_at_severity_5(swept, tmp_path):
    out, _ = swept
    heatmaps.analyse([out], tmp_path)
    tables = {p.name: p.read_text() for p in tmp_path.glob("table_*.md")}
    assert any("sampler=gradual," in t and "severity=1..5..1" in t and "| i111 |" in t for t in tables.values())
    assert "1111:gradual_correlated" in (tmp_path / "orders_fmnist-c.md").read_text()
    heatmaps.analyse([out], tmp_path / "at5", "severity5_error")
    at5 = "".join(p.read_text() for p in (tmp_path / "at5").glob("table_*_severity5_error.md"))
    test = load_results(out).filter(pl.col("method") == "test", pl.col("sampler") == "gradual")["severity5_error"][0]
    assert "Error at severity 5 (%)" in at5 and f"| test | {test:.1f} |" in at5
    assert use_metric(load_results(out), "severity5_error").height == 4  # every row is a gradual one here
    with pytest.raises(AnalysisError, match="only the gradual samplers' cells have it"):
        use_metric(load_results(out).with_columns(pl.lit(None, pl.Float64).alias("severity5_error")), "severity5_error")


def test_older_rows_read_with_a_null_severity5_error(swept, tmp_path):
    out, _ = swept
    old = tmp_path / "old"  # a folder written before the column existed: its results.parquet lacks it
    old.mkdir()
    load_results(out).drop("severity5_error").write_parquet(old / "results.parquet")
    df = load_results(old)
    assert df.height == 4 and df["severity5_error"].is_null().all() and df["error"].is_not_null().all()


@pytest.mark.parametrize(("dataset", "kind"), [("folder", "an image folder"), ("imagenet-r", "a natural-shift set")])
def test_a_dataset_without_severities_is_one_line_and_exit_2(tmp_path, capsys, dataset, kind):
    config = tmp_path / "bad.yaml"
    bad = {k: v for k, v in CONFIG.items() if k != "corruptions"}  # an image folder's domains are no corruptions
    config.write_text(yaml.safe_dump({**bad, "datasets": [dataset], "data_dir": str(tmp_path)}))
    out = tmp_path / "out"
    for extra in ([], ["--dry-run"]):
        assert main([str(config), "--output", str(out), "--local", "--no-progress", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"sampler=gradual: {dataset} is {kind}, without corruption severities" in err[0]
        assert "use sampler: sorted" in err[0]
    assert not out.exists()


def test_batches_are_cut_at_every_severity_step():
    """Each step is its own loader in the other benchmark: no batch mixes two steps, and nothing is reset."""
    domains = np.repeat(np.arange(10), 20)  # 2 corruptions x 5 severities x 20 images
    stream = make_stream(np.tile(np.arange(20) % 10, 10), domains, "i111", sampler="gradual", seed=1)
    bounds, resets = _batch_plan(stream, Cell(sampler="gradual", setting="i111", batch_size=16))
    assert set(range(0, 2 * 9 * 20 + 1, 20)) <= set(bounds.tolist()) and np.diff(bounds).max() == 16
    assert len(bounds) - 1 == 2 * 9 * 2 and not resets.any()  # 16 + 4 images a step
