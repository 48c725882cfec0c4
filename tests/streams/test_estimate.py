"""estimate_factors: round trips through both samplers, setting codes, standard errors and noisy labels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unitta.streams import SETTINGS_36, estimate_factors, make_stream, synthetic_labels
from unitta.streams.estimate import estimate_attribute

LABELS, DOMAINS = synthetic_labels("cifar10")


def _exact(code: str, length: int, seed: int = 0, **factors: float):
    return make_stream(LABELS, DOMAINS, code, dataset="cifar10", sampler="exact", length=length, seed=seed, **factors)


@pytest.mark.parametrize("alpha,beta", [(0.7, 1.0), (0.9, 3.0), (0.97, 10.0), (0.95, 1.0)])
def test_markov_round_trip_within_four_standard_errors(alpha: float, beta: float) -> None:
    # Standard errors shrink as 1/sqrt(length); test_standard_errors_match_spread checks they are honest.
    s = _exact("n1i1", 40_000, class_alpha=alpha, class_beta=beta)
    c = estimate_factors(s.classes).classes
    assert c.family == "markov"
    assert abs(c.alpha - alpha) <= 4 * c.alpha_se
    if beta > 1.0:
        assert abs(c.beta - beta) <= 4 * c.beta_se
    else:  # on the boundary beta >= 1 the estimate sits at or just above 1
        assert 1.0 <= c.beta <= 1.0 + 4 * c.beta_se


@pytest.mark.parametrize("beta", [1.0, 4.0, 10.0])
def test_iid_and_continual_round_trip(beta: float) -> None:
    s = _exact("iu11" if beta > 1 else "i111", 40_000, class_beta=beta, domain_beta=beta)
    f = estimate_factors(s.classes, s.domains)
    assert f.classes.family == "iid" and f.classes.alpha == pytest.approx(0.1)
    assert f.domains.family == "continual" and f.domains.alpha == 1.0
    # exact i.i.d. draws: the Fisher standard error is exact up to O(1/length)
    assert abs(f.classes.beta - beta) <= 4 * f.classes.beta_se
    # continual segment lengths are deterministic (largest remainder): only rounding is left
    assert f.domains.beta == pytest.approx(beta, rel=15 / 40_000 * 4)


def test_standard_errors_match_spread() -> None:
    """Across 16 seeds the reported standard error matches the spread of the estimates (chi2 bounds, 16 draws)."""
    est = [estimate_attribute(_exact("nui1", 20_000, seed=k).classes) for k in range(16)]
    for name in ("alpha", "beta"):
        values = np.array([getattr(e, name) for e in est])
        se = np.mean([getattr(e, f"{name}_se") for e in est])
        ratio = values.std(ddof=1) / se
        # sd / sigma of 16 normal draws lies in [0.58, 1.41] with probability 0.99 (chi2 with 15 dof)
        assert 0.58 * 0.9 <= ratio <= 1.41 * 1.1, (name, ratio)
        assert abs(values.mean() - {"alpha": 0.95, "beta": 10.0}[name]) <= 3 * se / 4


def test_balanced_stream_is_not_made_imbalanced_by_ranking() -> None:
    # Ranking and fitting on the same counts would give beta ~ 1 + 3 standard errors here; cross-fitting does not.
    betas = [estimate_attribute(_exact("i1i1", 20_000, seed=k).classes).beta for k in range(8)]
    se = 1.0 / math.sqrt(20_000 * (99 / 972))  # Fisher information of log beta at beta = 1, K = 10
    assert np.mean(betas) - 1.0 <= 2 * se


@pytest.mark.parametrize("setting", SETTINGS_36, ids=lambda s: s.code)
def test_every_setting_code_recovered_from_exact_streams(setting) -> None:
    s = _exact(setting.code, 20_000, seed=3)
    assert estimate_factors(s.classes, s.domains).setting == setting.code


@pytest.mark.parametrize("code", ["i1i1", "iuiu", "i111", "iui1", "nunu", "nu1u", "n1iu"])
def test_setting_code_recovered_from_official_streams(code: str) -> None:
    # CC, QQ (quota drift), DQ continual and CQ modes of the reference sampler
    s = make_stream(LABELS, DOMAINS, code, dataset="cifar10", sampler="official")
    f = estimate_factors(s.classes, s.domains)
    assert f.setting == code
    ref = s.factors
    for attr, est in (("class", f.classes), ("domain", f.domains)):
        if est.family == "markov":
            assert abs(est.alpha - ref[f"{attr}_alpha"]) <= 4 * est.alpha_se


def test_noisy_labels_flatten_and_label_error_undoes_it() -> None:
    s = _exact("nui1", 60_000, seed=5)
    rng = np.random.default_rng(0)
    eps, k = 0.2, 10
    flip = rng.random(len(s)) < eps
    noisy = s.classes.copy()
    noisy[flip] = (noisy[flip] + rng.integers(1, k, flip.sum())) % k
    raw = estimate_attribute(noisy)
    lam = 1 - eps * k / (k - 1)
    # flattened: the observed head stay rate is far below 0.95 and the head/tail ratio far below 10
    assert raw.alpha < 1 / k + lam * (0.95 - 1 / k) and raw.beta < 10 ** lam
    fixed = estimate_attribute(noisy, label_error=eps)
    assert fixed.code == "nu"
    assert abs(fixed.alpha - 0.95) <= 4 * fixed.alpha_se
    assert abs(fixed.beta - 10.0) <= 4 * fixed.beta_se


def test_balanced_noise_shrinks_correlation_by_lambda_squared() -> None:
    s = _exact("n1i1", 60_000, seed=6)
    rng = np.random.default_rng(1)
    eps, k = 0.3, 10
    flip = rng.random(len(s)) < eps
    noisy = s.classes.copy()
    noisy[flip] = (noisy[flip] + rng.integers(1, k, flip.sum())) % k
    raw = estimate_attribute(noisy)
    lam = 1 - eps * k / (k - 1)
    expected = 1 / k + lam**2 * (0.95 - 1 / k)
    # the stays are binomial over 60,000 positions: se <= sqrt(0.25 / 60000) ~ 0.002; ranking adds a little
    assert raw.alpha == pytest.approx(expected, abs=0.01)


def test_class_only_and_code_placeholder() -> None:
    s = _exact("nun1", 10_000)
    f = estimate_factors(s.classes)
    assert f.domains is None and f.setting == "nu**"
    assert f.as_dict()["domain_alpha"] is None


@pytest.mark.parametrize(
    "classes,domains,match",
    [
        ([0.5, 1.0, 2.0], None, "integers"),
        ([1], None, "at least 2"),
        ([0, 0, 0], None, "at least 2 states"),
        ([0, 1, -1], None, ">= 0"),
        ([0, 1, 2], [0, 1], "length"),
    ],
)
def test_bad_input_is_a_value_error(classes, domains, match) -> None:
    with pytest.raises(ValueError, match=match):
        estimate_factors(np.array(classes), None if domains is None else np.array(domains))
