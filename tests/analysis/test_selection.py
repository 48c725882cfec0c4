"""analysis/selection.py on a hand-made selection.parquet: the error table, the rankings with Kendall's tau against
the default ranking, the winner and its bootstrap share, the figure, and the report's section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import selection
from tests.bench_scripts import load_bench_script
from unitta.select import write_selection

# three methods on four (setting, seed) units; under the oracle c becomes best, the ranking reverses
ERRORS = {
    "default": {"a": 10.0, "b": 20.0, "c": 30.0},
    "oracle": {"a": 9.0, "b": 8.0, "c": 5.0},
}


def _records() -> list[dict]:
    out = []
    for unit, setting in enumerate(["i111", "nu11", "n1i1", "iu11"]):
        for protocol, by_method in ERRORS.items():
            for method, error in by_method.items():
                out.append({"dataset": "fmnist-c", "setting": setting, "seed": 425, "method": method,
                            "protocol": protocol, "criterion": None, "chosen": "{}",
                            "test_error": error + 0.1 * unit, "default_error": ERRORS["default"][method],
                            "oracle_error": ERRORS["oracle"][method],
                            "gap_to_oracle": error - ERRORS["oracle"][method], "trials": 3, "batches_spent": 9})
    return out


def test_rankings_tau_and_winner(tmp_path: Path) -> None:
    write_selection(tmp_path, _records())
    df = selection.load_selection([tmp_path])
    ranks = {r["choice"]: r for r in selection.rankings(df, n_boot=200).iter_rows(named=True)}
    assert ranks["default"]["ranking"] == "a < b < c" and ranks["default"]["kendall_tau"] == pytest.approx(1.0)
    assert ranks["oracle"]["ranking"] == "c < b < a" and ranks["oracle"]["kendall_tau"] == pytest.approx(-1.0)
    assert ranks["oracle"]["winner"] == "c" and ranks["oracle"]["winner_share"] == 1.0
    assert ranks["oracle"]["tau_low"] == ranks["oracle"]["tau_high"] == pytest.approx(-1.0)
    table = selection.error_table(df)
    assert "| a | 10.15 (+1.00) | 9.15 |" in table


def test_analyse_writes_table_and_figure_and_the_report_has_a_section(tmp_path: Path) -> None:
    from analysis.report import _selection_section

    (tmp_path / "run").mkdir()
    write_selection(tmp_path / "run", _records())
    md, png = selection.analyse([tmp_path / "run"], tmp_path / "out")
    assert "Kendall's tau" in md.read_text() and png.stat().st_size > 1000
    nav: list[str] = []
    html = "".join(_selection_section([tmp_path / "run"], tmp_path / "report", nav))
    assert "Hyper-parameters chosen without test labels" in html and "data:image/png;base64" in html and nav
    assert selection.main([str(tmp_path / "missing")]) == 2


@pytest.fixture(scope="module")
def tiny_selection(tmp_path_factory) -> Path:
    """A real ``unitta select`` run: tent at two learning rates on one setting, default / oracle / holdout."""
    from unitta.run import RunOptions
    from unitta.select import parse_select_config, run_select

    cfg = parse_select_config({
        "name": "tiny_select", "cell": {"dataset": "fmnist-c", "n_per_domain": 10, "S": 1, "batch_size": 16},
        "settings": ["n111"], "methods": ["tent"], "space": {"tent": {"lr": [0.0001, 0.01]}},
        "search": {"algorithm": "grid"}, "protocols": ["default", "oracle", "holdout"],
        "validation": {"corruptions": "held_out"}, "resources": {"num_cpus": 1, "num_gpus": 0}})
    out = tmp_path_factory.mktemp("tiny_select")
    outcome, _ = run_select(cfg, out, RunOptions(local=True, progress=False))
    assert outcome.n_failed == 0
    return out


def test_the_selection_names_its_choice_in_the_markdown_and_the_command_table(tiny_selection: Path) -> None:
    import polars as pl

    from unitta.select.run import selection_summary_lines

    rows = pl.read_parquet(tiny_selection / "selection.parquet")
    oracle = json.loads(rows.filter(pl.col("protocol") == "oracle")["chosen"][0])
    md, _ = selection.analyse([tiny_selection], tiny_selection / "analysis")
    chosen_part = md.read_text().split("## What each protocol chose")[1].split("## Test error")[0]
    assert "| method | setting | default | oracle | holdout |" in chosen_part
    assert f"lr={oracle['lr']:g}" in chosen_part and "| tent | n111 | lr=0.001 |" in chosen_part  # TENT's default lr
    printed = "\n".join(selection_summary_lines(rows))
    assert "values each protocol chose" in printed and f"lr={oracle['lr']}" in printed


def test_validation_trials_are_never_result_rows(tiny_selection: Path) -> None:
    """The held-out validation trials ran on other corruptions: the report's panels and heatmaps leave them out."""
    from analysis.common import load_dirs
    from unitta.data import HELD_OUT_CORRUPTIONS
    from unitta.results import load_results

    every = load_results(tiny_selection)
    validation = every.filter(every["corruptions"] == json.dumps(list(HELD_OUT_CORRUPTIONS)))
    assert validation.height == 2  # one per point
    kept = load_dirs([tiny_selection])
    assert kept.height == every.height - 2 and kept["corruptions"].is_null().all()


def test_the_figure_shows_the_differences(tmp_path: Path) -> None:
    """The y axis spans the errors' range (not 0-100) so that a 1-point gap is visible."""
    assert selection._error_limits([30.0, 31.0]) == pytest.approx((29.5, 31.5))
    low, high = selection._error_limits([5.0, 45.0])
    assert 0.0 <= low < 5.0 and 45.0 < high <= 100.0


def test_the_docs_table_is_made_from_the_named_results_folder(tiny_selection: Path, tmp_path: Path) -> None:
    """bench/docs_tables.py renders docs/selection.md's table from results/select_quick: here the fresh run,
    linked in as that folder; its numbers are the selection's means, and a second run is up to date."""
    import shutil

    import polars as pl

    root = Path(__file__).resolve().parents[2]
    docs_tables = load_bench_script("docs_tables")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "select_quick").symlink_to(tiny_selection)
    (tmp_path / "docs").mkdir()
    shutil.copy(root / "docs" / "selection.md", tmp_path / "docs" / "selection.md")
    args = ["selection_quick", "selection_quick_chosen", "--results-root", str(tmp_path), "--docs-root", str(tmp_path)]
    assert docs_tables.main(args) == 0
    text = (tmp_path / "docs" / "selection.md").read_text()
    rows = pl.read_parquet(tiny_selection / "selection.parquet")
    holdout = rows.filter(pl.col("protocol") == "holdout")["test_error"].mean()
    assert f"| tent | {rows.filter(pl.col('protocol') == 'default')['test_error'].mean():.2f}" in text
    assert f"{holdout:.2f} (+" in text and "| tent | n111 | lr=0.001 |" in text
    assert docs_tables.main([*args, "--check"]) == 0
