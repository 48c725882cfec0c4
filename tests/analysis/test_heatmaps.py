"""analysis/heatmaps.py on a small real result directory written by the sweep (and by the tune trials).

The sweep runs 2 methods x 3 settings of the embedded Fashion-MNIST-C in-process (20 images per domain,
S = 5): about a second per cell. One cell is then replaced by a failed row (the sweep's own
``failed_row``) and one cell file is deleted, so the tables must show 'failed' and '—' for them.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from analysis.heatmaps import main
from unitta.evaluate import failed_row
from unitta.results import cell_path, load_results, write_cell_result
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

SETTINGS = ("i111", "n1i1", "nuiu")
FAILED = ("bn", "n1i1")
MISSING = ("test", "nuiu")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    cfg = parse_config({"name": "tiny", "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": list(SETTINGS),
                        "n_per_domain": 20, "S": 5, "seeds": [425], "resources": {"num_cpus": 1, "num_gpus": 0}})
    outcome = run_sweep(cfg, out, local=True, progress=False, log=lambda _: None)
    assert outcome.n_failed == 0
    cells = {(c.method, c.setting): c for c in cfg.cells()}
    write_cell_result(out, failed_row(cells[FAILED], "RuntimeError: injected failure", sweep_name="tiny"))
    cell_path(out, cells[MISSING].cell_id()).unlink()
    (out / "results.parquet").unlink()  # the consolidated file would still hold the deleted cell
    return out


@pytest.fixture(scope="module")
def analysed(sweep_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("analysis")
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    return out


def _md_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| method", "|---")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_every_file_is_written(analysed: Path) -> None:
    for name in ("heatmap_fmnist-c.png", "grid_fmnist-c.png"):
        data = (analysed / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    for name in ("table_fmnist-c.md", "table_fmnist-c.tex", "ranking_fmnist-c.md", "cells_fmnist-c.csv"):
        assert (analysed / name).stat().st_size > 100


def test_table_numbers_match_the_parquet_rows(sweep_dir: Path, analysed: Path) -> None:
    df = load_results(sweep_dir)
    text = (analysed / "table_fmnist-c.md").read_text()
    header = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    assert header == ["method", *SETTINGS, "Avg"]  # paper order: class (i,1) before (n,1) before (n,u)
    rows = _md_rows(text)
    assert list(rows) == ["test", "bn"]
    for method, cells in rows.items():
        for setting, text_value in zip(SETTINGS, cells):
            if (method, setting) == FAILED:
                assert text_value == "failed"
            elif (method, setting) == MISSING:
                assert text_value == "—"
            else:
                (error,) = df.filter((pl.col("method") == method) & (pl.col("setting") == setting))["error"]
                assert float(text_value.strip("*")) == pytest.approx(error, abs=0.05)
    # best per column in bold: the lower of the two errors where both ran
    i111 = {m: df.filter((pl.col("method") == m) & (pl.col("setting") == "i111"))["error"][0] for m in rows}
    best = min(i111, key=i111.get)
    assert rows[best][0].startswith("**") and not rows[max(i111, key=i111.get)][0].startswith("**")
    # averages over the settings that have a result, flagged as partial
    for method, cells in rows.items():
        ok = df.filter((pl.col("method") == method) & (pl.col("status") == "ok"))["error"]
        avg = re.match(r"\**([0-9.]+)", cells[-1])
        assert float(avg.group(1)) == pytest.approx(ok.mean(), abs=0.05)
        assert "† (2/3)" in cells[-1]
    tex = (analysis_tex := (analysed / "table_fmnist-c.tex").read_text())
    assert r"\textbf{" + f"{i111[best]:.1f}" + "}" in tex and "failed" in analysis_tex and "--" in tex


def test_ranking_orders_methods_by_error(sweep_dir: Path, analysed: Path) -> None:
    df = load_results(sweep_dir).filter(pl.col("status") == "ok")
    text = (analysed / "ranking_fmnist-c.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("| i111 |"))
    expected = df.filter(pl.col("setting") == "i111").sort("error")
    names = re.findall(r"\| (\w+) \(\d", line)
    assert names == expected["method"].to_list()
    failed_line = next(line for line in text.splitlines() if line.startswith("| n1i1 |"))
    assert "bn (failed)" in failed_line
    missing_line = next(line for line in text.splitlines() if line.startswith("| nuiu |"))
    assert "test (missing)" in missing_line


def test_cells_csv_keeps_failed_and_missing(analysed: Path) -> None:
    cells = pl.read_csv(analysed / "cells_fmnist-c.csv")
    assert cells.height == 2 * len(SETTINGS)
    status = {(r["method_label"], r["setting"]): r["status"] for r in cells.iter_rows(named=True)}
    assert status[FAILED] == "failed" and status[MISSING] == "missing"
    assert sum(s == "ok" for s in status.values()) == 4


def test_tune_rows_get_factor_and_layer_plots(tmp_path: Path) -> None:
    """Tune rows (from real trials run in-process through the executor) give the factor-line and layer-bar
    figures."""
    from unitta.run import RunOptions
    from unitta.tune import run_tune
    from unitta.tune.config import parse_tune_config

    cell = {"dataset": "fmnist-c", "setting": "nunu", "n_per_domain": 20, "S": 5}
    out = tmp_path / "tune"
    local = RunOptions(local=True, progress=False)
    factors = parse_tune_config({"name": "f", "cell": cell, "methods": ["test"], "search": {"grid": "one_at_a_time"},
                                 "space": {"class_beta": [1.0, 10.0], "domain_alpha": [0.01]}})
    run_tune(factors, out, opts=local)
    layer = parse_tune_config({"name": "l", "cell": cell, "methods": ["bdn"], "space": {"layer": ["bn1", "layer1.0.bn1"]}})
    run_tune(layer, out, opts=local)
    df = load_results(out)
    assert df.filter(pl.col("param_domain_alpha") == 0.01)["status"].to_list() == ["failed"]  # below 1/15
    assert main([str(out), "--out", str(tmp_path / "a")]) == 0
    for name in ("factors_f_fmnist-c.png", "layers_l_fmnist-c.png", "tune_f_fmnist-c.csv", "tune_l_fmnist-c.csv"):
        assert (tmp_path / "a" / name).stat().st_size > 1000
    csv = pl.read_csv(tmp_path / "a" / "tune_l_fmnist-c.csv")
    assert sorted(csv["param_layer_index"].to_list()) == [0, 1]


def test_empty_and_foreign_directories_exit_2(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 2
    assert "no result rows" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    (foreign / "cells").mkdir(parents=True)
    pl.DataFrame({"a": [1]}).write_parquet(foreign / "cells" / "x.parquet")
    assert main([str(foreign)]) == 2
    err = capsys.readouterr().err  # the foreign file is skipped with a warning, leaving no rows
    assert "not a unitta cell file" in err and "no result rows" in err
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not (empty / "analysis").exists()


def test_an_out_that_is_a_file_is_one_line_and_exit_2(sweep_dir: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "figures.png"
    target.write_bytes(b"an image")
    assert main([str(sweep_dir), "--out", str(target)]) == 2
    assert main([str(sweep_dir), "--out", str(target / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "is a file, not a directory" in err[0] and "lies under" in err[1], err
    assert target.read_bytes() == b"an image"


def test_per_domain_errors_count_each_domains_images_over_the_rows(sweep_dir: Path, analysed: Path) -> None:
    """domains_<panel>.md: per method and corruption, the error over that corruption's images of every ok row
    (the per_domain entries weighted by their counts), the best per corruption in bold; a PNG beside it."""
    df = load_results(sweep_dir).filter(pl.col("status") == "ok")
    rows = _md_rows((analysed / "domains_fmnist-c.md").read_text())
    header = next(line for line in (analysed / "domains_fmnist-c.md").read_text().splitlines()
                  if line.startswith("| method"))
    domains = [c.strip() for c in header.strip("|").split("|")][1:]
    assert len(domains) == 15 and set(rows) == {"test", "bn"}
    for method, cells in rows.items():
        entries = [e for per in df.filter(pl.col("method") == method)["per_domain"].to_list() for e in per]
        for domain, text in zip(domains, cells):
            mine = [e for e in entries if e["name"] == domain]
            expected = sum(e["error"] * e["n"] for e in mine) / sum(e["n"] for e in mine)
            assert float(text.strip("*")) == pytest.approx(expected, abs=0.005)
    for j in range(len(domains)):
        values = {m: float(cells[j].strip("*")) for m, cells in rows.items()}
        assert any(cells[j].startswith("**") and values[m] == min(values.values()) for m, cells in rows.items())
    assert (analysed / "domains_fmnist-c.png").stat().st_size > 10_000
