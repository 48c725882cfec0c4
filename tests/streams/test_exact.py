"""The exact sampler: marginals, self-transitions, imbalance and stationarity match pi, alpha, beta (DESIGN.md).

Every test uses a fixed seed; tolerances come from the sample size: chi-square tests for i.i.d. draws,
exact binomial standard errors for self-transition rates (given the visits, stays are i.i.d. Bernoulli
in a Markov chain), and batch-means standard errors for correlated chains. Z = 4.5 keeps a correct
sampler's false-alarm rate far below 1e-4 per check while a real bias of a few percent still fails.
"""

import numpy as np
import pytest
from scipy import stats

from unitta.streams import make_stream, synthetic_labels, ulmm
from unitta.streams.exact import attribute_path, continual_counts

Z = 4.5
N = 150_000


@pytest.fixture(scope="module")
def cifar10():
    return synthetic_labels("cifar10")


def batch_means_z(seq: np.ndarray, n: int, target: np.ndarray, batches: int = 50) -> np.ndarray:
    """|empirical - target| / standard error, per state, with the SE from batch means (correlated chains)."""
    parts = np.array_split(seq, batches)
    freq = np.stack([np.bincount(p, minlength=n) / len(p) for p in parts])
    se = freq.std(axis=0, ddof=1) / np.sqrt(batches)
    return np.abs(freq.mean(axis=0) - target) / np.maximum(se, 1e-12)


def log_ratio_z(seq: np.ndarray, n: int, beta: float, batches: int = 50) -> float:
    """z-score of log(count_head / count_tail) against log(beta), delta method over batch means."""
    parts = np.array_split(seq, batches)
    head = np.array([np.count_nonzero(p == 0) for p in parts], dtype=float)
    tail = np.array([np.count_nonzero(p == n - 1) for p in parts], dtype=float)
    g = head / head.mean() - tail / tail.mean()  # linearised log ratio per batch
    se = g.std(ddof=1) / np.sqrt(batches)
    return abs(np.log(head.sum() / tail.sum()) - np.log(beta)) / se


def stay_rate_z(seq: np.ndarray, n: int, alpha: np.ndarray) -> np.ndarray:
    prev = seq[:-1]
    visits = np.bincount(prev, minlength=n)
    rate = ulmm.self_transition_rates(seq, n)
    se = np.sqrt(alpha * (1 - alpha) / np.maximum(visits, 1))
    return np.abs(rate - alpha) / np.maximum(se, 1e-12)


@pytest.mark.parametrize("alpha_1,beta,n", [(0.85, 5.0, 15), (0.95, 10.0, 10), (0.85, 1.0, 15), (0.95, 10.0, 100)])
def test_ulmm_chain_matches_pi_alpha_beta(alpha_1, beta, n):
    seq = attribute_path("n", alpha_1, beta, n, N, np.random.default_rng(11), name="class")
    alpha = ulmm.correlation_vector(alpha_1, beta, n)
    pi = ulmm.imbalance_ratios(beta, n)
    assert len(seq) == N
    assert batch_means_z(seq, n, pi).max() < Z
    assert stay_rate_z(seq, n, alpha).max() < Z
    if beta > 1:
        assert log_ratio_z(seq, n, beta) < Z


def test_ulmm_checks_can_fail():
    """The same checks reject a chain with the wrong alpha or the wrong beta."""
    n, alpha_1, beta = 15, 0.85, 5.0
    wrong_alpha = attribute_path("n", 0.83, beta, n, N, np.random.default_rng(11), name="domain")
    assert stay_rate_z(wrong_alpha, n, ulmm.correlation_vector(alpha_1, beta, n)).max() > Z
    wrong_beta = attribute_path("n", alpha_1, 3.0, n, N, np.random.default_rng(11), name="domain")
    assert log_ratio_z(wrong_beta, n, beta) > Z


@pytest.mark.parametrize("beta,n", [(5.0, 15), (10.0, 10), (1.0, 10), (10.0, 1000)])
def test_iid_draws_follow_pi(beta, n):
    seq = attribute_path("i", 1.0 / n, beta, n, N, np.random.default_rng(3), name="class")
    pi = ulmm.imbalance_ratios(beta, n)
    counts = np.bincount(seq, minlength=n)
    assert stats.chisquare(counts, N * pi).pvalue > 1e-4
    # i.i.d.: the self-transition rate of state j is pi_j
    visits = np.bincount(seq[:-1], minlength=n)
    seen = visits * pi >= 20  # enough expected stays for the normal approximation
    z = np.abs(ulmm.self_transition_rates(seq, n) - pi)[seen] / np.sqrt(pi * (1 - pi) / np.maximum(visits, 1))[seen]
    assert n == 1000 or z.max() < Z  # for 1000 classes no state has enough expected stays


def test_no_drift_every_quarter_has_the_same_marginals(cifar10):
    """Chi-square homogeneity of the 4 quarters for i.i.d. imbalanced attributes (where the reference drifts)."""
    for code in ("iuiu", "iui1"):
        exact = make_stream(*cifar10, code, sampler="exact", seed=5)
        for attr in ("class", "domain"):
            table = np.array(exact.summary()[f"{attr}_counts_per_quarter"])
            assert stats.chi2_contingency(table).pvalue > 1e-4, (code, attr)
        official = make_stream(*cifar10, code).summary()
        assert official["class_quarter_drift_tv"] > 0.2 > 0.01 > exact.summary()["class_quarter_drift_tv"]


def test_correlated_chain_quarters_match_pi(cifar10):
    stream = make_stream(*cifar10, "nunu", sampler="exact", seed=8)
    pi = ulmm.imbalance_ratios(10.0, 10)
    for quarter in np.array_split(stream.classes, 4):
        assert batch_means_z(quarter, 10, pi, batches=25).max() < Z


def test_continual_segments_contiguous_in_order_and_proportional():
    labels, domains = synthetic_labels("cifar10")
    for code, beta in (("n11u", 5.0), ("n111", 1.0)):
        s = make_stream(labels, domains, code, sampler="exact", length=100_001)
        steps = np.diff(s.domains)
        assert set(np.unique(steps)) <= {0, 1} and s.domains[0] == 0 and s.domains[-1] == 14
        counts = np.bincount(s.domains, minlength=15)
        assert np.all(np.abs(counts - 100_001 * ulmm.imbalance_ratios(beta, 15)) < 1)
        assert counts.sum() == 100_001
    assert continual_counts(np.array([0.5, 0.5]), 3).tolist() == [2, 1]


def test_stationary_start():
    """The first state is drawn from pi: chi-square over many seeds."""
    n, beta = 10, 10.0
    firsts = [attribute_path("n", 0.95, beta, n, 1, np.random.default_rng(s), name="class")[0] for s in range(3000)]
    assert stats.chisquare(np.bincount(firsts, minlength=n), 3000 * ulmm.imbalance_ratios(beta, n)).pvalue > 1e-4


def test_stream_fields_and_pools(cifar10):
    labels, domains = cifar10
    s = make_stream(labels, domains, "nui1", sampler="exact")
    assert len(s) == len(labels) and s.S is None and s.sampler == "exact"
    assert np.array_equal(labels[s.indices], s.classes) and np.array_equal(domains[s.indices], s.domains)
    counts = np.bincount(s.domains * 10 + s.classes, minlength=150)
    assert s.n_reused == int(np.maximum(counts - 1000, 0).sum())
    # a pool is used without replacement before it cycles
    first = s.indices[(s.domains == 0) & (s.classes == 0)][:1000]
    assert len(np.unique(first)) == len(first)
    again = make_stream(labels, domains, "nui1", sampler="exact")
    assert np.array_equal(again.indices, s.indices)
    assert not np.array_equal(make_stream(labels, domains, "nui1", sampler="exact", seed=1).indices, s.indices)
    assert s.factors == {"domain_alpha": 1 / 15, "domain_beta": 1.0, "class_alpha": 0.95, "class_beta": 10.0}


def test_custom_and_domain_dependent_matrices(cifar10):
    """Paper 3.3 extensions: any transition matrix; class transitions that depend on the current domain."""
    labels, domains = cifar10
    rng = np.random.default_rng(0)
    t = rng.dirichlet(np.ones(10) * 0.5, size=10)
    s = make_stream(labels, domains, "nui1", sampler="exact", class_matrix=t, length=N)
    assert batch_means_z(s.classes, 10, ulmm.stationary(t)).max() < Z
    prev, nxt = s.classes[:-1], s.classes[1:]
    for k in range(10):
        m = prev == k
        observed = np.bincount(nxt[m], minlength=10)
        expected = m.sum() * t[k]
        keep = expected > 5
        assert stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue > 1e-4
    sticky, iid = ulmm.ulmm(np.full(10, 0.9)), ulmm.ulmm(np.full(10, 0.1))
    t3 = np.stack([sticky if d % 2 == 0 else iid for d in range(15)])
    s = make_stream(labels, domains, "n1i1", sampler="exact", class_matrix=t3, length=N)
    stay = s.classes[1:] == s.classes[:-1]
    even = s.domains[:-1] % 2 == 0
    for mask, a in ((even, 0.9), (~even, 0.1)):
        assert abs(stay[mask].mean() - a) < Z * np.sqrt(a * (1 - a) / mask.sum())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"class_alpha": 0.5}, r"class_alpha=0.5 with class_beta=10.0 \(n=10\) is infeasible.*\[0.91, 1\)"),
        ({"domain_alpha": 0.5}, r"domain_alpha=0.5 with domain_beta=5.0 \(n=15\) is infeasible.*\[0.813333, 1\)"),
        ({"S": 100}, "S=100"),
        ({"length": 0}, "length=0"),
        ({"class_matrix": np.full((10, 10), 0.2)}, "sum to 1"),
        ({"class_matrix": np.eye(3)}, r"shape \(10, 10\)"),
    ],
)
def test_bad_input(cifar10, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_stream(*cifar10, "nunu", sampler="exact", **kwargs)


def test_fixed_correlation_overrides_are_refused(cifar10):
    with pytest.raises(ValueError, match="domain_alpha=0.2.*i.i.d."):
        make_stream(*cifar10, "nui1", sampler="exact", domain_alpha=0.2)
    with pytest.raises(ValueError, match="empty"):
        labels, domains = cifar10
        keep = ~((labels == 3) & (domains == 4))
        make_stream(labels[keep], domains[keep], "nui1", sampler="exact")
