"""The printed method x setting table and --fresh directory naming (no Ray, no model)."""

from __future__ import annotations

import polars as pl

from unitta.run.outdir import fresh_output_dir
from unitta.run.summary import summary_table


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
