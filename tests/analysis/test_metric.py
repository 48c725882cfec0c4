"""``--metric``: the analysis scripts and the recommender on any metric column (docs/results.md, Metrics)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl
import pytest

from analysis import heatmaps, report
from analysis.common import AnalysisError, load_dirs, use_metric
from unitta import recommend
from unitta.results import cells_dir


def test_heatmaps_with_balanced_error_show_that_column(seeded_dir, tmp_path):
    written = heatmaps.analyse([seeded_dir], tmp_path, "balanced_error")
    names = {p.name for p in written}
    assert "heatmap_fmnist-c_balanced_error.png" in names and "table_fmnist-c_balanced_error.md" in names
    table = (tmp_path / "table_fmnist-c_balanced_error.md").read_text()
    assert "Balanced error (%), lower is better" in table
    rows = load_dirs([seeded_dir]).filter(pl.col("method") == "tent", pl.col("setting") == "nu11")
    mean = rows["balanced_error"].mean()
    tent = next(line for line in table.splitlines() if line.startswith("| tent "))
    assert f"{mean:.1f}" in tent  # the table holds the metric's mean over seeds, not the error
    assert heatmaps.main([str(seeded_dir), "--out", str(tmp_path / "cli"), "--metric", "nll"]) == 0


def test_unknown_or_absent_metric_is_a_clear_error(seeded_dir, tmp_path):
    df = load_dirs([seeded_dir])
    with pytest.raises(AnalysisError, match="expected one of"):
        use_metric(df, "accuracy")
    with pytest.raises(AnalysisError, match="forgetting: true"):
        use_metric(df, "source_error_after")  # the fixture ran without the forgetting check


def test_old_folders_load_with_null_metrics_and_refuse_the_metric(seeded_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(seeded_dir, old)
    for path in cells_dir(old).glob("*.parquet"):  # a folder written before the metric columns existed
        pl.read_parquet(path).drop("balanced_error", "ece", "nll", "error_curve").write_parquet(path)
    (old / "results.parquet").unlink(missing_ok=True)
    df = load_dirs([old])
    assert df["balanced_error"].is_null().all() if "balanced_error" in df.columns else True
    assert heatmaps.analyse([old], tmp_path / "a")  # error still works
    with pytest.raises(AnalysisError, match="no result row has it"):
        heatmaps.analyse([old], tmp_path / "b", "balanced_error")


def test_report_puts_error_and_balanced_error_side_by_side(seeded_dir, tmp_path):
    page = report.build_report([seeded_dir], tmp_path).read_text()
    assert "balanced error" in page.lower() and "Error vs cost" in page
    assert (tmp_path / "cost_fmnist-c.png").is_file()


def test_recommend_ranks_by_the_metric(seeded_dir, tmp_path, capsys):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.random.default_rng(0).integers(0, 10, 600))
    by_error, _ = recommend.benchmark_table(results=[seeded_dir])
    by_balanced, source = recommend.benchmark_table(results=[seeded_dir], metric="balanced_error")
    assert "ranked by balanced_error" in source
    df = load_dirs([seeded_dir]).filter(pl.col("status") == "ok")
    expected = df.group_by("method", "setting").agg(pl.col("balanced_error").mean()).sort("method", "setting")
    got = by_balanced.sort("method", "setting")
    assert np.allclose(got["error"].to_numpy(), expected["balanced_error"].to_numpy())
    assert not np.allclose(got["error"].to_numpy(), by_error.sort("method", "setting")["error"].to_numpy())
    assert recommend.main(["--classes", str(labels), "--results", str(seeded_dir), "--metric", "ece"]) == 0
    report = capsys.readouterr().out
    reasons = [line for line in report.splitlines() if line.startswith("reason: ")]
    assert reasons and all("lowest mean ece (" in line and "%" not in line for line in reasons), report
    assert recommend.main(["--classes", str(labels), "--results", str(seeded_dir), "--metric", "ece", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metric"] == "ece"
    with pytest.raises(recommend.UsageError, match="paper publishes only error"):
        recommend.benchmark_table(paper="cifar10-c", metric="ece")
