"""analysis/selection.py on a hand-made selection.parquet: the error table, the rankings with Kendall's tau against
the default ranking, the winner and its bootstrap share, the figure, and the report's section."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import selection
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
