"""ULMM math: Cor. 1 correlation vectors, Prop. 1 stationary distribution, consistency, quotas (spec 1.3-1.4)."""

import numpy as np
import pytest

from unitta.streams import ulmm
from unitta.streams.official import make_plan
from unitta.streams.settings import default_factors


def test_correlation_vectors_match_spec_examples():
    # spec 1.3 item 4: domain (n,u) and class (n,u) K=10, rounded to 4 decimals
    dom = ulmm.correlation_vector(0.85, 5.0, 15)
    expected = [0.85, 0.8317, 0.8112, 0.7882, 0.7624, 0.7335, 0.7010, 0.6646, 0.6237, 0.5779, 0.5265, 0.4688,
                0.4041, 0.3314, 0.25]
    np.testing.assert_allclose(dom, expected, atol=5e-5)
    cls = ulmm.correlation_vector(0.95, 10.0, 10)
    np.testing.assert_allclose(cls, [0.95, 0.9354, 0.9166, 0.8923, 0.8609, 0.8203, 0.7679, 0.7003, 0.6129, 0.5],
                               atol=5e-5)
    # inconsistent pairs keep alpha_1 everywhere
    np.testing.assert_array_equal(ulmm.correlation_vector(0.067, 5.0, 15), np.full(15, 0.067))
    np.testing.assert_array_equal(ulmm.correlation_vector(1.0, 1.0, 15), np.ones(15))


def test_consistency_follows_the_reference():
    # spec 1.3 item 3 with the run.sh factors
    assert ulmm.is_consistent(0.067, 1.0, 15)  # domain (i,1)
    assert ulmm.is_consistent(0.1, 1.0, 10)  # class (i,1): 0.9 <= 0.9 exactly
    assert ulmm.is_consistent(0.85, 5.0, 15) and ulmm.is_consistent(0.95, 10.0, 10)
    assert not ulmm.is_consistent(0.067, 5.0, 15)  # domain (i,u)
    assert not ulmm.is_consistent(0.1, 10.0, 10)  # class (i,u)
    assert not ulmm.is_consistent(1.0, 1.0, 15)  # continual


@pytest.mark.parametrize("alpha_1,beta,n", [(0.85, 5.0, 15), (0.95, 10.0, 10), (0.95, 10.0, 1000), (0.7, 2.0, 4)])
def test_stationary_distribution_is_pi_of_beta(alpha_1, beta, n):
    """Prop. 1 / Cor. 1: the ULMM's left eigenvector for eigenvalue 1 is pi_j ~ beta^(-j/(n-1))."""
    alpha = ulmm.correlation_vector(alpha_1, beta, n)
    t = ulmm.ulmm(alpha)
    pi = ulmm.imbalance_ratios(beta, n)
    np.testing.assert_allclose(pi @ t, pi, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ulmm.ulmm_stationary(alpha), pi, rtol=1e-10)
    if n <= 100:
        np.testing.assert_allclose(ulmm.stationary(t), pi, rtol=1e-8)
    assert pi[0] / pi[-1] == pytest.approx(beta)


def test_arbitrary_alpha_including_anti_correlation():
    """Beyond the reference: any alpha in [0, 1], e.g. alpha < 1/n (anti-correlated) or 0 (never stay)."""
    alpha = np.array([0.0, 0.05, 0.9, 0.5])
    t = ulmm.ulmm(alpha)
    np.testing.assert_allclose(t.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.diag(t), alpha)
    pi = ulmm.ulmm_stationary(alpha)
    np.testing.assert_allclose(ulmm.stationary(t), pi, rtol=1e-10)
    np.testing.assert_allclose(pi, (1 / (1 - alpha)) / (1 / (1 - alpha)).sum())


def test_stationary_of_a_non_uniform_matrix():
    rng = np.random.default_rng(0)
    t = rng.dirichlet(np.ones(6), size=6)
    pi = ulmm.stationary(t)
    np.testing.assert_allclose(pi @ t, pi, atol=1e-12)
    assert pi.min() > 0 and pi.sum() == pytest.approx(1.0)


def test_kron_row_is_bitwise_the_dense_kronecker_row():
    td = ulmm.ulmm(ulmm.correlation_vector(0.85, 5.0, 15))
    tc = ulmm.ulmm(ulmm.correlation_vector(0.95, 10.0, 10))
    dense = np.kron(td, tc)
    for d, k in [(0, 0), (3, 7), (14, 9)]:
        assert np.array_equal(ulmm.kron_row(td, tc, d, k), dense[d * 10 + k])
    # domain-dependent class matrices (paper 3.3)
    tc3 = np.stack([tc, ulmm.ulmm(np.full(10, 0.1))] * 7 + [tc])
    assert np.array_equal(ulmm.joint_matrix_row(td, tc3, 1, 2), np.kron(td, tc3[1])[12])


def test_quotas_match_spec_examples_and_totals():
    # spec 1.3 item 2: domain-u row for k=0 and class-u column for d=0 with S=1000
    plan = make_plan(15, 10, default_factors("nuiu", "cifar10"), 1000)
    assert plan.quota[:, 0].tolist() == [1000, 891, 795, 708, 631, 563, 502, 447, 399, 355, 317, 282, 252, 224, 200]
    assert plan.quota[0].tolist() == [1000, 774, 599, 464, 359, 278, 215, 167, 129, 100]
    totals = {  # sum of Q: both balanced / domain u / class u / both u (spec 1.3 item 2)
        ("cifar10", 10, 1000): (150000, 75660, 61275, 30923),
        ("cifar100", 100, 100): (150000, 75600, 58875, 29703),
        ("imagenet", 1000, 10): (150000, 76000, 58425, 29561),
    }
    for (ds, k, s), expected in totals.items():
        got = tuple(
            int(make_plan(15, k, default_factors(code, ds), s).quota.sum()) for code in ("i1i1", "i1iu", "iui1", "iuiu")
        )
        assert got == expected, ds
    zeros = make_plan(15, 1000, default_factors("iuiu", "imagenet"), 10).quota
    assert int((zeros == 0).sum()) == 1788  # spec 1.6: ImageNet both-u has 1788 zero quotas


def test_feasible_range():
    lo, hi = ulmm.feasible_alpha_range(10.0, 10)
    assert lo == pytest.approx(0.91) and hi == 1.0
    assert ulmm.is_consistent(lo + 1e-9, 10.0, 10) and not ulmm.is_consistent(lo - 1e-6, 10.0, 10)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: ulmm.check_factors(0.01, 1.0, 15, name="domain"), r"domain_alpha=0.01.*\[0.0666667, 1\]"),
        (lambda: ulmm.check_factors(1.5, 1.0, 15, name="domain"), "domain_alpha=1.5"),
        (lambda: ulmm.check_factors(0.5, 0.5, 15, name="domain"), r"domain_beta=0.5.*>= 1"),
        (lambda: ulmm.check_factors(0.5, 1.0, 1), "n=1"),
        (lambda: ulmm.ulmm(np.array([0.5, 1.2])), r"\[0, 1\]"),
        (lambda: ulmm.check_transition_matrix(np.array([[0.5, 0.4], [0.5, 0.5]])), "sum to 1"),
    ],
)
def test_bad_input_is_a_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
