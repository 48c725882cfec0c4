"""compare_paper.py --reference mariodoebler on a real Fashion-MNIST-C sweep over the other benchmark's protocols."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from analysis.common import AnalysisError
from analysis.compare_paper import main
from analysis.mariodoebler_tables import compare_mariodoebler
from unitta.paper import load_mariodoebler_table
from unitta.paper.mariodoebler import MARIODOEBLER_METHODS, protocol_of
from unitta.results import load_results
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

METHODS = ("test", "bn", "tent", "lame")


@pytest.fixture(scope="module")
def protocols_dir(tmp_path_factory) -> Path:
    """4 methods x (official i111, i1i1 + sorted + dirichlet 0.01), 20 images per domain: 16 small cells."""
    out = tmp_path_factory.mktemp("protocols")
    cfg = parse_config(
        {
            "name": "tiny_protocols",
            "datasets": ["fmnist-c"],
            "methods": list(METHODS),
            "sampler": ["official", "sorted", "dirichlet"],
            "delta": [0.01],
            "settings": ["i111", "i1i1"],
            "n_per_domain": 20,
            "S": 2,
            "seeds": [425],
            "resources": {"num_cpus": 1, "num_gpus": 0},
        }
    )
    outcome = run_sweep(cfg, out, local=True, progress=False, log=lambda _: None)
    assert outcome.n_failed == 0 and outcome.n_ok == 16
    return out


@pytest.fixture(scope="module")
def compared(protocols_dir: Path, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("reference")
    o = io.StringIO()
    with contextlib.redirect_stdout(o):
        assert main([str(protocols_dir), "--reference", "mariodoebler", "--out", str(out)]) == 0
    return out, o.getvalue()


def test_loader_maps_every_printed_name() -> None:
    ref = load_mariodoebler_table()
    assert ref.height == 338 and set(ref["method"].to_list()) == set(MARIODOEBLER_METHODS)
    assert ref["method_name"].null_count() == 0 and ref["setting"].null_count() == 0
    tent = ref.filter(
        (pl.col("protocol") == "Continual") & (pl.col("dataset") == "CIFAR10-C") & (pl.col("method") == "TENT")
    )
    assert tent.row(0, named=True)["error"] == 20.0 and tent["model_name"][0] == "Standard"
    assert sorted(set(ref.filter(pl.col("sampler") == "dirichlet")["delta"].to_list())) == [0.01, 0.1]
    assert protocol_of("exact", "i1i1") == "Mixed domains" and protocol_of("official", "nui1") is None
    assert protocol_of("sorted", "1111") == "Correlated" and protocol_of("dirichlet", "n1i1", 0.1)


def test_cells_are_matched_by_protocol_dataset_architecture_and_method(protocols_dir: Path, compared) -> None:
    out, _ = compared
    cells = pl.read_csv(out / "reference_mariodoebler.csv")
    assert cells.height == len(METHODS) * 4  # every cell of ours is in one of the four protocols
    rows = load_results(protocols_dir)
    ref = load_mariodoebler_table().filter(pl.col("dataset") == "CIFAR10-C")
    for protocol, sampler, setting in (("Continual", "official", "i111"), ("Mixed domains", "official", "i1i1")):
        for m in METHODS:
            r = cells.filter((pl.col("protocol") == protocol) & (pl.col("method") == m)).row(0, named=True)
            ours = rows.filter(
                (pl.col("method") == m) & (pl.col("setting") == setting) & (pl.col("sampler") == sampler)
            )["error"][0]
            printed = {v: k for k, v in MARIODOEBLER_METHODS.items()}[m]
            theirs = ref.filter(
                (pl.col("protocol") == protocol) & (pl.col("architecture") == "WRN-28") & (pl.col("method") == printed)
            )["error"][0]
            assert r["ours"] == pytest.approx(ours) and r["reference"] == pytest.approx(theirs)
            assert r["diff"] == pytest.approx(ours - theirs) and r["proxy"] == "dataset+architecture"
    corr = cells.filter(pl.col("protocol") == "Correlated")
    assert set(corr["ref_architecture"].to_list()) == {"RN-26 GN"}  # the only architecture published there
    assert corr.filter(pl.col("method") == "bn")["note"][0] == "no published bn figure here"  # no BN-1 row
    assert corr.filter(pl.col("method") == "lame")["reference"][0] == pytest.approx(11.3)
    mixed = cells.filter(pl.col("protocol") == "Mixed domains, correlated")
    assert mixed["reference"].null_count() == len(METHODS)
    assert set(mixed["note"].to_list()) == {"no published figure for Mixed domains, correlated on CIFAR10-C"}


def test_spearman_lines_match_scipy(compared) -> None:
    out, stdout = compared
    cells = pl.read_csv(out / "reference_mariodoebler.csv").filter(pl.col("diff").is_not_null())
    assert cells.height == 4 + 4 + 3  # Continual, Mixed domains, Correlated without bn
    rho = stats.spearmanr(cells["ours"].to_list(), cells["reference"].to_list()).statistic
    lines = stdout.splitlines()
    pooled = [line for line in lines if line.startswith("spearman_rho_pooled=")]
    assert len(pooled) == 1 and pooled[0].startswith(f"spearman_rho_pooled={rho:.3f} (pooled over 11 cells of 3 "
                                                     "protocols and reference architectures RN-26 GN, WRN-28")
    assert not any(line.startswith("spearman_rho=") for line in lines)  # no unlabelled pooled headline
    headline = [line for line in lines if line.startswith("spearman_rho[")]
    assert lines.index(headline[0]) < lines.index(pooled[0])  # per protocol first
    for protocol, arch in (("Continual", "WRN-28"), ("Mixed domains", "WRN-28"), ("Correlated", "RN-26 GN")):
        sub = cells.filter(pl.col("protocol") == protocol)
        expected = stats.spearmanr(sub["ours"].to_list(), sub["reference"].to_list()).statistic
        line = next(x for x in headline if x.startswith(f"spearman_rho[{protocol}]="))
        assert line.startswith(f"spearman_rho[{protocol}]={expected:.3f} ({sub.height} cells, rho_p=")
        assert f"reference {arch}; proxy: dataset+architecture)" in line
    # no matched cell: said, not hidden
    assert "spearman_rho[Mixed domains, correlated]=nan (no matched cell)  " in lines


def test_every_line_is_printed_once_and_the_test_named_once(compared) -> None:
    _, stdout = compared
    said = [line.strip() for line in stdout.splitlines() if line.strip() and not line.startswith(("|", "#"))]
    assert len(said) == len(set(said)), [line for line in said if said.count(line) > 1]
    assert "permutation permutation" not in stdout and "exact permutation test" in stdout


def test_proxies_are_said_in_the_table(compared) -> None:
    out, stdout = compared
    md = (out / "reference_mariodoebler.md").read_text()
    assert "**Proxy comparison** (dataset+architecture)" in md and "Fashion-MNIST-C with CIFAR10-C" in md
    assert "| Continual | fmnist-c / resnet20 / official | tent |" in md and "| CIFAR10-C / WRN-28 | 20.0 |" in md
    assert "| Correlated | fmnist-c / resnet20 / sorted | lame |" in stdout
    assert "dirichlet delta=0.01" in md


def test_settings_outside_the_protocols_are_counted_and_bad_input_refused(seeded_dir: Path, tmp_path: Path) -> None:
    c = compare_mariodoebler([seeded_dir])  # settings i111, n111, nu11: only i111 is a protocol of the other benchmark
    assert set(c.cells["protocol"].to_list()) == {"Continual"}
    assert any("6 cell(s) in settings that are none of" in s for s in c.skipped)
    with pytest.raises(AnalysisError, match="publishes cifar10-c, cifar100-c, imagenet-c"):
        compare_mariodoebler([seeded_dir], paper_dataset="fmnist-c")
    assert main([str(tmp_path / "absent"), "--reference", "mariodoebler"]) == 2


def test_the_unitta_paper_comparison_skips_the_other_benchmarks_orders(protocols_dir: Path, tmp_path: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main([str(protocols_dir), "--paper-dataset", "cifar10-c", "--out", str(tmp_path)]) == 0
    assert "the sorted sampler's streams are not the paper's" in err.getvalue()
    assert "the dirichlet sampler's streams are not the paper's" in err.getvalue()
    (compared,) = tmp_path.glob("compare_*.csv")  # only the official panel, whose n1i1 is the paper's n1i1
    assert set(pl.read_csv(compared)["setting"].to_list()) == {"i111", "i1i1"}


def test_the_stream_orders_are_compared_in_one_table_and_figure(protocols_dir: Path, tmp_path: Path) -> None:
    """The official, sorted and dirichlet streams land in separate panels; orders_<group> puts them side by side
    with the same numbers as the panels."""
    from analysis import heatmaps

    assert heatmaps.main([str(protocols_dir), "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("table_*.md"))) == 3  # one panel per sampler, as before
    md = (tmp_path / "orders_fmnist-c.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method |"))
    # the paper's setting order (unitta.streams.settings.setting_order), as every other table and the console
    assert header == "| method | i1i1:official | i111:official | n1i1:dirichlet@0.01 | 1111:sorted | Avg |"
    rows = load_results(protocols_dir)
    for method in METHODS:
        line = next(x for x in md.splitlines() if x.startswith(f"| {method} |"))
        shown = [float(v.strip(" *")) for v in line.split("|")[2:6]]
        for value, (sampler, setting) in zip(shown, [("official", "i1i1"), ("official", "i111"), ("dirichlet", "n1i1"),
                                                     ("sorted", "1111")]):
            row = rows.filter((pl.col("method") == method) & (pl.col("sampler") == sampler)
                              & (pl.col("setting") == setting))
            assert value == pytest.approx(row["error"][0], abs=0.05)
    assert (tmp_path / "orders_fmnist-c.png").stat().st_size > 10_000
