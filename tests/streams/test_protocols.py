"""The other benchmark's correlated orders as samplers: sorted and dirichlet (unitta.streams.protocols)."""

from __future__ import annotations

import numpy as np
import pytest

from unitta.streams import PROTOCOL_SETTINGS, make_stream, synthetic_labels
from unitta.streams.__main__ import main
from unitta.streams.protocols import DEFAULT_DELTA, check_delta
from unitta.streams.stream import mean_run_length

LABELS, DOMAINS = synthetic_labels("cifar10")  # 15 domains x 10,000 images, 1,000 per (domain, class)
N, K = len(LABELS), 10


def _window_tv(classes: np.ndarray, num_classes: int, windows: int) -> float:
    """Mean total-variation distance between each window's class marginal and the uniform one."""
    tv = [
        0.5 * np.abs(np.bincount(w, minlength=num_classes) / len(w) - 1 / num_classes).sum()
        for w in np.array_split(classes, windows)
    ]
    return float(np.mean(tv))


def test_sorted_is_domains_in_order_each_sorted_by_class() -> None:
    s = make_stream(LABELS, DOMAINS, "1111", sampler="sorted", seed=3)
    assert np.array_equal(np.sort(s.indices), np.arange(N)) and s.n_reused == 0  # every image exactly once
    assert np.array_equal(s.domains, DOMAINS[s.indices]) and np.array_equal(s.classes, LABELS[s.indices])
    assert np.all(np.diff(s.domains) >= 0)  # domains one after another, in id (continual) order
    for d in range(15):
        assert np.all(np.diff(s.classes[s.domains == d]) >= 0)  # each domain sorted by class
    assert mean_run_length(s.classes) == N / (15 * K)  # one run per (domain, class)
    # within a class the order is random, and the seed decides it
    again, other = (make_stream(LABELS, DOMAINS, "1111", sampler="sorted", seed=sd) for sd in (3, 4))
    assert np.array_equal(again.indices, s.indices) and not np.array_equal(other.indices, s.indices)
    assert not np.all(np.diff(s.indices[:1000]) > 0)


@pytest.mark.parametrize("delta", [0.01, 1.0, 1000.0])
def test_dirichlet_uses_every_image_once_and_mixes_domains(delta: float) -> None:
    s = make_stream(LABELS, DOMAINS, "n1i1", sampler="dirichlet", seed=5, delta=delta)
    assert np.array_equal(np.sort(s.indices), np.arange(N)) and s.n_reused == 0
    assert s.meta["delta"] == delta and sum(s.meta["chunk_sizes"]) == N and min(s.meta["chunk_sizes"]) >= 10
    # domains mixed i.i.d.: a domain run lasts 1 / (1 - 1/15) = 1.071 positions on average; 150,000 positions
    # give a standard error far below 0.01
    assert mean_run_length(s.domains) == pytest.approx(15 / 14, abs=0.01)
    # classes come in contiguous blocks inside each of the K chunks: at most K * K runs
    runs = 1 + np.count_nonzero(np.diff(s.classes))
    assert runs <= K * K


def test_dirichlet_small_delta_is_correlated_large_delta_is_balanced_per_chunk() -> None:
    tvs, runs = {}, {}
    for delta in (0.01, 1000.0):
        s = make_stream(LABELS, DOMAINS, "n1i1", sampler="dirichlet", seed=7, delta=delta)
        tvs[delta] = _window_tv(s.classes, K, K)
        runs[delta] = mean_run_length(s.classes)
    # delta 0.01: Dir(0.01) puts almost all of a class in one chunk, so each of the K windows of N/K is nearly
    # one class (TV near 0.9); delta 1000: each chunk gets N/K^2 +- a few of each class (TV of a few 0.001)
    assert tvs[0.01] > 0.6 and tvs[1000.0] < 0.02
    # runs: about one per class for small delta, K per chunk (N/K^2 = 1,500 images each) for large delta
    assert runs[0.01] > 4 * runs[1000.0] and runs[1000.0] == pytest.approx(N / K**2, rel=0.05)


def test_dirichlet_is_deterministic_per_seed() -> None:
    a, b, c = (make_stream(LABELS, DOMAINS, "n1i1", sampler="dirichlet", seed=sd, delta=0.1) for sd in (1, 1, 2))
    assert np.array_equal(a.indices, b.indices) and not np.array_equal(a.indices, c.indices)
    default = make_stream(LABELS, DOMAINS, "n1i1", sampler="dirichlet", seed=1)
    assert default.meta["delta"] == DEFAULT_DELTA


def test_dirichlet_on_a_tiny_dataset_lowers_the_chunk_threshold() -> None:
    labels = np.tile(np.arange(4), 6)  # 24 images, 4 classes: chunks of 6 < the reference's 10
    domains = np.repeat(np.arange(2), 12)
    s = make_stream(labels, domains, "n1i1", sampler="dirichlet", seed=0, delta=0.5)
    assert np.array_equal(np.sort(s.indices), np.arange(24)) and min(s.meta["chunk_sizes"]) >= 6


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"setting": "i111", "sampler": "sorted"}, "the 'sorted' sampler is setting '1111'"),
        ({"setting": "i1i1", "sampler": "dirichlet"}, "pass setting='n1i1'"),
        ({"setting": "n1i1", "sampler": "dirichlet", "delta": 0.0}, "delta=0.0: the Dirichlet concentration"),
        ({"setting": "n1i1", "sampler": "dirichlet", "delta": float("nan")}, "must be in [0.0001, 10000]"),
        ({"setting": "1111", "sampler": "sorted", "delta": 0.1}, "only the 'dirichlet' sampler"),
        ({"setting": "1111", "sampler": "sorted", "S": 5}, "S: the 'sorted' sampler"),
        ({"setting": "n1i1", "sampler": "dirichlet", "class_alpha": 0.5}, "class_alpha: the 'dirichlet'"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs: dict, expected: str) -> None:
    setting = kwargs.pop("setting")
    with pytest.raises(ValueError) as info:
        make_stream(LABELS, DOMAINS, setting, **kwargs)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_check_delta_and_settings() -> None:
    assert check_delta("0.5") == 0.5 and PROTOCOL_SETTINGS == {"sorted": "1111", "dirichlet": "n1i1", "gradual": "i111",
                                                               "gradual_correlated": "1111"}
    with pytest.raises(ValueError, match="expected a number"):
        check_delta("x")


def test_cli_defaults_to_the_samplers_setting(capsys) -> None:
    assert main(["--sampler", "dirichlet", "--delta", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "setting   n1i1" in out and "delta=0.1" in out and "reused    0 positions" in out
