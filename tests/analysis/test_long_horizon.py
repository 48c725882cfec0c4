"""analysis/long_horizon.py on a real two-round sweep of the embedded Fashion-MNIST-C."""

from __future__ import annotations

import pytest

from analysis.long_horizon import collapse_point, main
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config


def test_the_collapse_point_is_where_the_method_stays_above_the_source():
    source = [40.0, 40.0, 40.0, 40.0, 40.0]
    assert collapse_point([30, 45, 35, 50, 60], source) == 3
    assert collapse_point([50, 50, 50, 50, 50], source) == 0
    assert collapse_point([50, 50, 50, 50, 30], source) is None


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_horizon")
    cfg = parse_config({"name": "lh", "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": ["i111"],
                        "sampler": "exact", "length": 300, "rounds": 2, "curve_points": 6, "n_per_domain": 20,
                        "batch_size": 32, "resources": {"num_cpus": 1, "num_gpus": 0}})
    assert run_sweep(cfg, out, local=True, progress=False, log=lambda _: None).n_failed == 0
    return out


def test_tables_and_figures_are_written(two_rounds, tmp_path, capsys):
    assert main([str(two_rounds), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "long_horizon.md").read_text()
    assert "x 2 rounds" in text and "| bn |" in text and "test (source)" in text
    for name in ("curves_1.png", "curves_1.pdf", "rounds_1.png", "rounds_1.pdf"):
        assert (tmp_path / name).stat().st_size > 0


def test_a_folder_without_a_test_cell_is_refused(two_rounds, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(two_rounds, copy)
    for path in (copy / "cells").glob("*__test__*"):
        path.unlink()
    (copy / "results.parquet").unlink(missing_ok=True)
    assert main([str(copy), "--out", str(tmp_path / "out")]) == 2
    assert "no stream has a finished TEST cell" in capsys.readouterr().err


def test_online_realtime_and_forgetting_rows_are_labelled_apart():
    """One stream, TENT online, real-time and with forgetting: three labels, one source row (the online TEST)."""
    import polars as pl

    from analysis.long_horizon import stream_tables

    base = {"dataset": "fmnist-c", "model": "resnet20", "sampler": "exact", "setting": "i111", "length": 300,
            "seed": 425, "batch_size": 32, "status": "ok", "n_samples": 300, "method_kwargs": "{}"}
    variants = [("test", "online", False, 50.0), ("test", "realtime", False, 50.0), ("tent", "online", False, 40.0),
                ("tent", "realtime", False, 45.0), ("tent", "online", True, 40.5)]
    rows = [{**base, "cell_id": f"c{i}", "method": m, "protocol": p, "forgetting": f, "error": e,
             "error_curve": [e, e]} for i, (m, p, f, e) in enumerate(variants)]
    ((_, source, methods),) = stream_tables(pl.DataFrame(rows))
    assert source["protocol"] == "online" and source["method"] == "test"
    labels = [r["label"] for r in methods]
    assert len(set(labels)) == len(labels) == 4
    assert "tent" in labels and "tent [realtime]" in labels and "tent [forgetting]" in labels
