"""analysis/compare_paper.py on a real seeded Fashion-MNIST-C sweep, against the paper's CIFAR-10-C (proxy)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from analysis.compare_paper import main
from analysis.stats import t_interval
from tests.analysis.conftest import SEEDED_METHODS, SEEDED_SETTINGS, SEEDS
from unitta.paper import load_paper_table
from unitta.results import cell_path, load_results


@pytest.fixture(scope="module")
def compared(seeded_dir: Path, tmp_path_factory) -> tuple[Path, str, str]:
    out = tmp_path_factory.mktemp("compare")
    import contextlib
    import io

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        assert main([str(seeded_dir), "--paper-dataset", "cifar10-c", "--out", str(out)]) == 0
    return out, o.getvalue(), e.getvalue()


def test_loader_has_the_papers_grid() -> None:
    paper = load_paper_table("cifar10-c")
    assert paper.height == 17 * 24 and paper["setting"].n_unique() == 24
    lame = load_paper_table("cifar100-c").filter(pl.col("method") == "lame")
    assert lame.filter(pl.col("source") == "main").height == 10  # only the main table prints these 10
    avg = load_paper_table("cifar10-c", include_avg=True).filter(pl.col("setting") == "avg24")
    assert avg.filter(pl.col("method") == "bdn")["error"][0] == pytest.approx(25.63)  # as printed, not 25.30


def test_table_values_and_no_marks_in_a_proxy_comparison(seeded_dir: Path, compared) -> None:
    out, _, _ = compared
    rows = load_results(seeded_dir)
    paper = load_paper_table("cifar10-c")
    cells = pl.read_csv(out / "compare_fmnist-c_vs_cifar10-c.csv")
    assert cells.height == len(SEEDED_METHODS) * len(SEEDED_SETTINGS)
    for r in cells.iter_rows(named=True):
        errors = rows.filter((pl.col("method") == r["method"]) & (pl.col("setting") == r["setting"]))["error"].to_list()
        mean, hw = t_interval(errors)
        p = paper.filter((pl.col("method") == r["method"]) & (pl.col("setting") == r["setting"]))["error"][0]
        assert r["ours"] == pytest.approx(mean) and r["paper"] == pytest.approx(p)
        assert r["basis"] == "seeds" and r["uncertainty"] == pytest.approx(hw)
        assert r["diff"] == pytest.approx(mean - p)
        assert r["beyond"] is None  # different data and model: a difference means nothing cell by cell
    md = (out / "compare_fmnist-c_vs_cifar10-c.md").read_text()
    assert "**+" not in md and "**-" not in md and "not assessed in a proxy comparison" in md
    assert md.index("Proxy comparison") < md.index("spearman_rho=")  # the warning before the headline
    assert "Paper methods not in this run:" in md
    tex = (out / "compare_fmnist-c_vs_cifar10-c.tex").read_text()
    assert r"\textbf{" not in tex and r"\end{tabular}" in tex
    for name in ("scatter", "ranks"):
        png = (out / f"{name}_fmnist-c_vs_cifar10-c.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_highlighting_when_data_and_model_are_the_papers(seeded_dir: Path, tmp_path: Path) -> None:
    """The first seed's rows labelled cifar10-c: no proxy, so cells beyond our (binomial) interval are marked."""
    copy = tmp_path / "run"
    shutil.copytree(seeded_dir, copy)
    (copy / "results.parquet").unlink(missing_ok=True)
    for path in (copy / "cells").glob("*.parquet"):
        row = pl.read_parquet(path)
        if row["seed"][0] != SEEDS[0]:
            path.unlink()
        else:
            row.with_columns(pl.lit("cifar10-c").alias("dataset")).write_parquet(path)
    import contextlib
    import io

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main([str(copy), "--out", str(tmp_path / "a"), "--tolerance", "0.5"]) == 0
    assert "proxy" not in stdout.getvalue()
    cells = pl.read_csv(tmp_path / "a" / "compare_cifar10-c_vs_cifar10-c.csv")
    for r in cells.iter_rows(named=True):
        assert r["basis"] == "binomial" and r["beyond"] == (abs(r["diff"]) > r["uncertainty"] + 0.5)
    flagged = cells.filter(pl.col("beyond"))
    assert flagged.height > 0
    md = (tmp_path / "a" / "compare_cifar10-c_vs_cifar10-c.md").read_text()
    for r in flagged.iter_rows(named=True):
        assert f"**{r['diff']:+.1f}**" in md
    tex = (tmp_path / "a" / "compare_cifar10-c_vs_cifar10-c.tex").read_text()
    assert tex.count(r"\textbf{") == flagged.height


def test_spearman_lines_match_scipy(seeded_dir: Path, compared) -> None:
    _, stdout, _ = compared
    rows = load_results(seeded_dir)
    paper = load_paper_table("cifar10-c")
    ours = rows.group_by("method").agg(pl.col("error").mean()).sort("method")
    theirs = paper.filter(pl.col("setting").is_in(SEEDED_SETTINGS) & pl.col("method").is_in(SEEDED_METHODS))
    theirs = theirs.group_by("method").agg(pl.col("error").mean()).sort("method")
    rho = stats.spearmanr(ours["error"].to_list(), theirs["error"].to_list()).statistic
    assert f"spearman_rho={rho:.3f}" in stdout.splitlines()
    for s in SEEDED_SETTINGS:
        o = rows.filter(pl.col("setting") == s).group_by("method").agg(pl.col("error").mean()).sort("method")
        t = paper.filter((pl.col("setting") == s) & pl.col("method").is_in(SEEDED_METHODS)).sort("method")
        assert f"spearman_rho[{s}]={stats.spearmanr(o['error'], t['error']).statistic:.3f}" in stdout


def test_rho_p_ci_and_method_deltas_are_printed_after_the_warnings(seeded_dir: Path, compared) -> None:
    out, stdout, _ = compared
    lines = stdout.splitlines()
    rows = load_results(seeded_dir)
    paper = load_paper_table("cifar10-c").filter(pl.col("setting").is_in(SEEDED_SETTINGS)
                                                 & pl.col("method").is_in(SEEDED_METHODS))
    ours = rows.group_by("method").agg(pl.col("error").mean()).sort("method")
    theirs = paper.group_by("method").agg(pl.col("error").mean()).sort("method")
    # 3 methods: the exact p over the 3! pairings, by hand
    rho = stats.spearmanr(ours["error"], theirs["error"]).statistic
    count = sum(abs(stats.spearmanr(ours["error"].to_list(), list(p)).statistic) >= abs(rho) - 1e-12
                for p in itertools.permutations(theirs["error"].to_list()))
    p_line = next(line for line in lines if line.startswith("rho_p="))
    assert p_line.startswith(f"rho_p={count / 6:.3f}") and "exact" in p_line
    ci_line = next(line for line in lines if line.startswith("rho_ci=["))
    lo, hi = (float(v) for v in ci_line.removeprefix("rho_ci=[").split("]")[0].split(","))
    assert -1.0 <= lo <= hi <= 1.0
    first_warning = next(i for i, line in enumerate(lines) if line.startswith("warning:"))
    assert first_warning < lines.index(f"spearman_rho={rho:.3f}")
    assert any("proxy comparison" in line for line in lines[:first_warning + 2])
    diffs = rows.join(paper.select("method", "setting", pl.col("error").alias("paper")), on=["method", "setting"])
    diffs = diffs.group_by("method", "setting").agg((pl.col("error").mean() - pl.col("paper").first()).alias("d"))
    for m in SEEDED_METHODS:
        mean = diffs.filter(pl.col("method") == m)["d"].mean()
        row = next(line for line in lines if line.strip().startswith(f"{m} ") and len(line.split()) == 7)
        assert row.split()[1] == "3" and row.split()[2] == f"{mean:+.1f}"
    md = (out / "compare_fmnist-c_vs_cifar10-c.md").read_text()
    assert "## Per method" in md and "rho_p=" in md and "rho_ci=[" in md


def test_profile_is_reported_and_warned(compared) -> None:
    out, stdout, stderr = compared
    assert "profile default" in stdout and "not 'reference'" in stdout
    # each warning once, beside the numbers it qualifies: not a second time on stderr (a terminal shows both)
    warned = [line for line in (stdout + stderr).splitlines() if line.startswith("warning:")]
    assert len(warned) == len(set(warned)) == 2 and "warning:" not in stderr
    assert "permutation permutation" not in stdout
    md = (out / "compare_fmnist-c_vs_cifar10-c.md").read_text()
    assert "**Warning: Profile default, not 'reference'" in md
    assert md.index("**Warning: Profile") < md.index("Ours:")  # warnings come first


def test_missing_cell_is_named_not_dropped(seeded_dir: Path, tmp_path: Path, capsys) -> None:
    copy = tmp_path / "run"
    shutil.copytree(seeded_dir, copy)
    (copy / "results.parquet").unlink(missing_ok=True)
    gone = load_results(copy).filter((pl.col("method") == "bn") & (pl.col("setting") == "nu11"))["cell_id"]
    for cell_id in gone:
        cell_path(copy, cell_id).unlink()
    assert main([str(copy), "--paper-dataset", "cifar10-c", "--out", str(tmp_path / "a")]) == 0
    cells = pl.read_csv(tmp_path / "a" / "compare_fmnist-c_vs_cifar10-c.csv")
    row = cells.filter((pl.col("method") == "bn") & (pl.col("setting") == "nu11")).row(0, named=True)
    assert row["ours_status"] == "missing" and row["note"] == "ours missing" and row["paper"] is not None
    assert "| bn | nu11 | — |" in (tmp_path / "a" / "compare_fmnist-c_vs_cifar10-c.md").read_text()
    # rho over the block without the hole: 3 methods x 2 settings (6 cells) beat 2 methods x 3 (too few for rho)
    assert "3 methods x 2 settings" in capsys.readouterr().out


def test_dataset_without_a_paper_table_exits_2(seeded_dir: Path, tmp_path: Path, capsys) -> None:
    assert main([str(seeded_dir), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--paper-dataset cifar10-c" in err and "fmnist-c" in err
    assert main([str(seeded_dir), "--out", str(tmp_path), "--tolerance", "-1"]) == 2


def test_two_methods_say_why_rho_is_undefined(seeded_dir: Path, tmp_path: Path, capsys) -> None:
    copy = tmp_path / "run"
    shutil.copytree(seeded_dir, copy)
    (copy / "results.parquet").unlink(missing_ok=True)
    for cell_id in load_results(copy).filter(pl.col("method") == "tent")["cell_id"]:
        cell_path(copy, cell_id).unlink()
    assert main([str(copy), "--paper-dataset", "cifar10-c", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert "spearman_rho=undefined (2 methods with both values; a rank correlation needs 3 or more)" in out
    assert "spearman_rho=undefined" in (tmp_path / "a" / "compare_fmnist-c_vs_cifar10-c.md").read_text()
