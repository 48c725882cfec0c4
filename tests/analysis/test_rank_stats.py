"""analysis/rank_stats.py: Spearman's rho p-value against full enumeration, the two-way bootstrap against a loop."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis.rank_stats import EXACT_MAX_N, N_PERMUTATIONS, bootstrap_rho_interval, spearman_p


def _enumerated_p(a, b) -> float:
    """P(|rho| >= |observed|) over every pairing of a with b (ties: average ranks, as scipy)."""
    rho = stats.spearmanr(a, b).statistic
    perms = np.array(list(itertools.permutations(b)))
    rx = stats.rankdata(a) - (len(a) + 1) / 2
    ry = stats.rankdata(perms, axis=1)
    ry = ry - ry.mean(1, keepdims=True)
    rs = ry @ rx / np.sqrt((ry**2).sum(1) * (rx**2).sum())
    return float(np.mean(np.abs(rs) >= abs(rho) - 1e-12))


def test_five_methods_rho_0_6_has_p_0_35() -> None:
    rho = stats.spearmanr([1, 2, 3, 4, 5], [3, 1, 2, 5, 4]).statistic
    assert rho == pytest.approx(0.6)
    assert spearman_p([1, 2, 3, 4, 5], [3, 1, 2, 5, 4]) == (pytest.approx(42 / 120), "exact")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_p_equals_full_enumeration_with_and_without_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=6)
    b = a + rng.normal(size=6)
    assert spearman_p(a, b)[0] == pytest.approx(_enumerated_p(a, b))
    tied = np.round(b)  # ties: average ranks on both sides
    assert spearman_p(a, tied)[0] == pytest.approx(_enumerated_p(a, tied))


def test_above_the_exact_limit_the_permutation_p_is_within_monte_carlo_error() -> None:
    rng = np.random.default_rng(3)
    n = EXACT_MAX_N + 1  # 9! = 362,880 pairings: enumerable here, sampled by spearman_p
    a = rng.normal(size=n)
    b = a + 1.5 * rng.normal(size=n)
    p, kind = spearman_p(a, b)
    exact = _enumerated_p(a, b)
    assert kind == "permutation"
    assert abs(p - exact) < 4 * math.sqrt(exact * (1 - exact) / N_PERMUTATIONS) + 1 / N_PERMUTATIONS
    assert spearman_p(a, b) == (p, kind)  # seeded: the same p every time


def test_undefined_cases_are_nan() -> None:
    assert math.isnan(spearman_p([1, 2], [2, 1])[0])
    assert math.isnan(spearman_p([1, 1, 1], [1, 2, 3])[0])


def test_bootstrap_resamples_methods_and_settings_together() -> None:
    rng = np.random.default_rng(4)
    ours = rng.uniform(10, 40, size=(6, 5))
    paper = ours + rng.normal(0, 4, size=(6, 5))
    lo, hi, used = bootstrap_rho_interval(ours, paper, n_boot=500, seed=11)
    # the same replicates by a plain loop: methods, then settings drawn from one generator
    g = np.random.default_rng(11)
    mi, si = g.integers(0, 6, size=(500, 6)), g.integers(0, 5, size=(500, 5))
    rhos = []
    for m, s in zip(mi, si):
        a, b = ours[np.ix_(m, s)].mean(1), paper[np.ix_(m, s)].mean(1)
        if np.ptp(a) > 0 and np.ptp(b) > 0:
            rhos.append(stats.spearmanr(a, b).statistic)
    assert used == len(rhos)
    assert (lo, hi) == pytest.approx(tuple(np.percentile(rhos, [2.5, 97.5])))
    point = stats.spearmanr(ours.mean(1), paper.mean(1)).statistic
    assert lo <= point <= hi


def test_bootstrap_of_a_perfect_agreement_is_one() -> None:
    ours = np.arange(12, dtype=float).reshape(4, 3) * 3
    lo, hi, used = bootstrap_rho_interval(ours, ours + 5.0, n_boot=200)
    assert (lo, hi) == (pytest.approx(1.0), pytest.approx(1.0)) and 0 < used <= 200
