"""analysis/heatmaps.py with several seeds: mean ± 95 % t-interval in the tables, and the best-vs-runner-up file."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.heatmaps import main
from analysis.stats import t_interval
from unitta.results import load_results


def test_tables_show_mean_and_t_interval(seeded_dir: Path, tmp_path: Path) -> None:
    assert main([str(seeded_dir), "--out", str(tmp_path)]) == 0
    rows = load_results(seeded_dir)
    text = (tmp_path / "table_fmnist-c.md").read_text()
    header = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    for line in text.splitlines()[4:]:
        if not line.startswith("| "):
            continue
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        method = cells[0]
        for setting, text in zip(header[1:-1], cells[1:-1]):
            cell = rows.filter((pl.col("method") == method) & (pl.col("setting") == setting))
            mean, hw = t_interval(cell["error"].to_list())
            assert text == f"{mean:.1f} ± {hw:.1f}"
        per_seed = rows.filter(pl.col("method") == method).group_by("seed").agg(pl.col("error").mean())
        mean, hw = t_interval(per_seed["error"].to_list())
        assert cells[-1] == f"{mean:.1f} ± {hw:.1f}"
    assert r"$\pm$" in (tmp_path / "table_fmnist-c.tex").read_text()
    cells_csv = pl.read_csv(tmp_path / "cells_fmnist-c.csv")
    assert cells_csv["ci"].is_not_null().all() and (cells_csv["n_ok"] == 2).all()
    verdict = (tmp_path / "significance_fmnist-c.md").read_text()
    assert verdict.count("paired seeds") >= 3 and "Overall:" in verdict and "Wilcoxon" in verdict
