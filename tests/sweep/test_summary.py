"""The printed method x setting table and --fresh directory naming (no Ray, no model)."""

from __future__ import annotations

import polars as pl

from unitta.results.summary import summary_table
from unitta.run.outdir import fresh_output_dir


def test_summary_table_means_over_seeds_and_marks_failures():
    rows = [
        {"dataset": "fmnist-c", "model": "resnet20", "method": "bn", "setting": "i111", "status": "ok", "error": 10.0},
        {"dataset": "fmnist-c", "model": "resnet20", "method": "bn", "setting": "i111", "status": "ok", "error": 20.0},
        {"dataset": "fmnist-c", "model": "resnet20", "method": "bn", "setting": "nui1", "status": "ok", "error": 30.0},
        {"dataset": "fmnist-c", "model": "resnet20", "method": "tent", "setting": "i111", "status": "ok", "error": 5.0},
        {"dataset": "fmnist-c", "model": "resnet20", "method": "tent", "setting": "nui1", "status": "failed", "error": None},
    ]
    text = summary_table(pl.DataFrame(rows))
    lines = text.splitlines()
    assert lines[0].startswith("fmnist-c (resnet20)")
    header = lines[2].split()
    assert header == ["method", "i111", "nui1", "avg"]
    assert lines[3].split() == ["bn", "15.00", "30.00", "22.50"]
    assert lines[4].split() == ["tent", "5.00", "failed", "-"]
    assert summary_table(pl.DataFrame(rows[:0], schema={k: pl.Utf8 for k in rows[0]})) == "(no results)"


def test_fresh_output_dir_never_reuses_a_directory_with_content(tmp_path):
    out = tmp_path / "sweep"
    assert fresh_output_dir(out) == out  # absent: use it
    out.mkdir()
    assert fresh_output_dir(out) == out  # empty: use it
    (out / "cells").mkdir()
    first = fresh_output_dir(out)
    assert first != out and first.name.startswith("sweep-") and first.parent == tmp_path
    first.mkdir()
    (first / "x").write_text("x")
    second = fresh_output_dir(out)
    assert second not in (out, first) and not second.exists()


def test_summary_table_gives_each_sampler_its_own_column():
    base = {"dataset": "fmnist-c", "model": "resnet20", "method": "bn", "status": "ok"}
    rows = [
        {**base, "setting": "n1i1", "sampler": "official", "delta": None, "error": 10.0},
        {**base, "setting": "n1i1", "sampler": "dirichlet", "delta": 0.1, "error": 20.0},
        {**base, "setting": "n1i1", "sampler": "dirichlet", "delta": 0.01, "error": 40.0},
        {**base, "setting": "1111", "sampler": "sorted", "delta": None, "error": 30.0},
    ]
    lines = summary_table(pl.DataFrame(rows)).splitlines()
    assert lines[2].split() == ["method", "n1i1:official", "n1i1:dirichlet@0.1", "n1i1:dirichlet@0.01",
                                "1111:sorted", "avg"]
    # settings in the paper's order (the tables' and heatmaps'), whatever order the rows come in
    flipped = summary_table(pl.DataFrame(rows[::-1])).splitlines()[2].split()
    assert flipped[1:3] == ["n1i1:dirichlet@0.01", "n1i1:dirichlet@0.1"] and flipped[-2] == "1111:sorted"
    assert lines[3].split() == ["bn", "10.00", "20.00", "40.00", "30.00", "25.00"]  # nothing averaged across samplers
    exact_only = summary_table(pl.DataFrame([{**rows[0], "sampler": "exact"}])).splitlines()
    assert exact_only[2].split() == ["method", "n1i1", "avg"]  # one ULMM sampler: plain setting codes


def test_summary_table_averages_only_seeds():
    base = {"dataset": "fmnist-c", "model": "resnet20", "method": "tent", "setting": "nu11", "status": "ok"}
    rows = [
        {**base, "batch_size": 64, "protocol": "online", "seed": 1, "error": 10.0},
        {**base, "batch_size": 64, "protocol": "online", "seed": 2, "error": 20.0},
        {**base, "batch_size": 64, "protocol": "realtime", "seed": 1, "error": 50.0},
        {**base, "batch_size": 16, "protocol": "online", "seed": 1, "error": 70.0},
    ]
    text = summary_table(pl.DataFrame(rows))
    titles = [line for line in text.splitlines() if line.startswith("fmnist-c")]
    assert len(titles) == 3 and any("batch_size=16" in t for t in titles) and any("protocol=realtime" in t for t in titles)
    values = sorted(line.split()[1] for line in text.splitlines() if line.startswith("tent"))
    assert values == ["15.00", "50.00", "70.00"]


def test_the_console_orders_settings_as_the_tables_do():
    """The quick sweep's settings as its config lists them (i111, n111, nu11, nuiu) and shuffled: one order, the
    paper's (unitta.streams.settings.setting_order), on the console as in analysis/tables.py."""
    from unitta.streams.settings import setting_order

    base = {"dataset": "fmnist-c", "model": "resnet20", "method": "bn", "status": "ok", "error": 1.0}
    codes = ["nuiu", "i111", "nu11", "n111"]
    header = summary_table(pl.DataFrame([{**base, "setting": c} for c in codes])).splitlines()[2].split()
    assert header[1:-1] == setting_order(codes) == setting_order(codes[::-1])
