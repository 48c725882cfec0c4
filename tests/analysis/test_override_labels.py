"""A method run with hyper-parameter overrides keeps its marker (``tent{lr=0.005}``) in the sweep's summary table
and in the report's tables and cost figure: it is never shown as, or averaged with, the unmodified method."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analysis.common import sweep_panels
from analysis.report import metric_comparison
from unitta.results import load_results
from unitta.results.summary import summary_table
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

MODIFIED = "tent{lr=0.005,min_update_batch=8}"


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> pl.DataFrame:
    out = tmp_path_factory.mktemp("overrides")
    cfg = parse_config({"name": "overrides", "datasets": ["fmnist-c"], "settings": ["i111", "nu11"],
                        "methods": ["tent", {"tent": {"lr": 0.005, "min_update_batch": 8}}],
                        "n_per_domain": 20, "S": 2, "resources": {"num_cpus": 1, "num_gpus": 0}})
    assert run_sweep(cfg, out, local=True, progress=False, log=lambda _: None).n_failed == 0
    return load_results(out)


def test_sweep_summary_keeps_the_override_marker(rows) -> None:
    table = summary_table(rows)
    lines = {line.split()[0]: line for line in table.splitlines()[3:] if line.strip()}
    assert set(lines) == {"tent", MODIFIED}
    plain = rows.filter(pl.col("method_kwargs") == "{}").sort("setting")["error"].to_list()
    assert [float(v) for v in lines["tent"].split()[1:3]] == pytest.approx(plain, abs=0.005)  # not a mean of both


def test_report_tables_and_cost_figure_keep_the_override_marker(rows, tmp_path: Path) -> None:
    from analysis import plots

    (panel,) = sweep_panels(rows)
    md = metric_comparison(panel.rows)
    assert f"| {MODIFIED} |" in md and "| tent |" in md
    assert plots.error_vs_cost(panel.rows, tmp_path / "cost.png", "cost").stat().st_size > 5_000
