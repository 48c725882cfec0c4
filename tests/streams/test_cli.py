"""Inspection: the CLI prints a readable summary and draws the stream; Stream.summary() fields."""

import subprocess
import sys

import numpy as np
import pytest

from unitta.streams import (
    SETTINGS_24,
    SETTINGS_36,
    Setting,
    default_factors,
    default_state_cap,
    make_stream,
    synthetic_labels,
)
from unitta.streams.__main__ import main
from unitta.streams.stream import draw_from_pools, mean_run_length, quarter_counts


def test_settings_notation():
    assert len(SETTINGS_24) == 24 and len(SETTINGS_36) == 36 and len({s.code for s in SETTINGS_36}) == 36
    assert [s.code for s in SETTINGS_24[:6]] == ["i1i1", "i1iu", "i1n1", "i1nu", "i111", "i11u"]  # npz key order
    s = Setting.parse("nui1")
    assert (s.code, s.class_notation, s.domain_notation) == ("nui1", "(n,u)", "(i,1)")
    assert s.name == "class non-i.i.d. imbalanced, domain i.i.d. balanced"
    assert Setting.parse(s) is s and all(x.class_corr != "1" for x in SETTINGS_24)
    with pytest.raises(ValueError, match="class_corr='x'"):
        Setting.parse("x1i1")


def test_default_factors_and_cap():
    assert default_factors("iuiu", "cifar100-c") == {
        "domain_alpha": 0.067, "domain_beta": 5.0, "class_alpha": 0.01, "class_beta": 10.0}
    assert default_factors("n11u", "imagenet")["domain_alpha"] == 1.0
    caps = {c: default_state_cap(c, "imagenet") for c in ("nunu", "n1n1", "nui1", "nuiu", "nu11", "i1n1")}
    assert caps == {"nunu": 100, "n1n1": 100, "nui1": 50, "nuiu": 10, "nu11": 10, "i1n1": 10}
    assert default_state_cap("nunu", "cifar100") == 100 and default_state_cap("nunu", "fmnist-c") == 1000


def test_summary_fields():
    labels, domains = synthetic_labels("cifar10")
    s = make_stream(labels, domains, "nunu").summary()
    assert s["length"] == 33418 and sum(s["domain_counts"]) == 33418 == sum(s["class_counts"])
    assert s["domain_head_tail_ratio"] == pytest.approx(4144 / 943)  # spec 1.8: realised 4.4x for beta 5
    assert s["class_head_tail_ratio"] == pytest.approx(7347 / 805)
    assert 3.0 < s["domain_mean_run_length"] < 3.7  # spec 1.8: about 3.35 for domain (n,u)
    assert np.array(s["class_counts_per_quarter"]).sum(axis=0).tolist() == s["class_counts"]
    assert mean_run_length(np.array([1, 1, 2, 2, 2, 1])) == 2.0
    assert quarter_counts(np.array([0, 0, 1, 1, 1, 1, 0, 0]), 2).tolist() == [[2, 0], [0, 2], [0, 2], [2, 0]]


def test_pools_cycle_round_robin():
    pools = np.array([10, 11, 12, 20])  # state 0: [10, 11, 12], state 1: [20]
    starts = np.array([0, 3, 4])
    idx, reused = draw_from_pools(np.array([0, 1, 0, 0, 1, 0, 0]), pools, starts)
    assert idx.tolist() == [10, 20, 11, 12, 20, 10, 11] and reused == 3


def test_cli_prints_summary_and_plots(tmp_path, capsys):
    png = tmp_path / "stream.png"
    assert main(["--dataset", "cifar10", "--setting", "nunu", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for text in ("length    33,418", "head/tail ratio 4.39", "mean run length", "re-used", "Q4:", "S=1000"):
        assert text in out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert main(["--dataset", "fmnist-c", "--setting", "iuiu", "--sampler", "exact", "--length", "5000"]) == 0
    assert "length    5,000" in capsys.readouterr().out


def test_cli_errors_exit_2():
    run = subprocess.run(
        [sys.executable, "-m", "unitta.streams", "--setting", "nunu", "--sampler", "exact", "--class-alpha", "0.5"],
        capture_output=True, text=True,
    )
    assert run.returncode == 2 and "infeasible" in run.stderr and "[0.91, 1)" in run.stderr
    run = subprocess.run([sys.executable, "-m", "unitta.streams", "--setting", "abcd"], capture_output=True, text=True)
    assert run.returncode == 2 and "abcd" in run.stderr


def test_plot_names_domains_and_refuses_a_wrong_name_count(tmp_path):
    from unitta.data import CORRUPTIONS
    from unitta.streams.plot import plot_stream

    labels, domains = synthetic_labels("cifar10")
    stream = make_stream(labels, domains, "nunu", dataset="cifar10", sampler="exact", length=2000, seed=0)
    png = plot_stream(stream, tmp_path / "s.png", domain_names=list(CORRUPTIONS))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="domain_names: 3 names for 15 domains"):
        plot_stream(stream, tmp_path / "t.png", domain_names=["fog", "snow", "frost"])
