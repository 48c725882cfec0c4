"""The ``exact`` sampler: two independent ULMM chains run for a fixed length with a stationary start.

The principled generator of docs/streams.md. Per attribute (domain with n = D, class with n = K):

* correlation ``n``: a ULMM with alpha_j = 1 - (1 - alpha_1) beta^(j/(n-1)) (paper Cor. 1), started
  from its stationary distribution pi (Prop. 1); pairs (alpha_1, beta) without a valid ULMM whose
  states are all at least as sticky as i.i.d. are refused with the feasible alpha_1 range;
* correlation ``i``: i.i.d. draws from pi (pi_j proportional to beta^(-j/(n-1)));
* correlation ``1`` (continual): the states in order 0..n-1, one contiguous segment each, with
  segment lengths proportional to pi (largest-remainder rounding to the exact length).

So the empirical marginals, self-transition rates and head/tail ratios match pi, alpha and beta within
sampling error everywhere in the stream: no quota exhaustion, no drift (unlike the reference, docs/streams.md).
Beyond the paper's settings, any row-stochastic domain matrix and class matrix can be given, and the
class matrix may be (D, K, K): class transitions that depend on the current domain (paper section 3.3).
"""

from __future__ import annotations

import numpy as np

from unitta.streams import ulmm


def continual_counts(pi: np.ndarray, length: int) -> np.ndarray:
    """Segment lengths proportional to pi summing to ``length`` (largest remainder, ties to the head)."""
    raw = pi * length
    counts = np.floor(raw).astype(np.int64)
    rest = length - int(counts.sum())
    if rest > 0:
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[:rest]] += 1
    return counts


def _ulmm_chain(alpha: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """A ULMM path of ``length`` steps from the stationary start, vectorised run by run.

    Runs: the embedded jump chain of a ULMM moves from s to (s + 1 + J) mod n with J uniform on
    {0..n-2}, so the run states are a cumulative sum; the run length in state s is geometric with
    success probability 1 - alpha_s.
    """
    n = len(alpha)
    pi = ulmm.ulmm_stationary(alpha)
    start = int(rng.choice(n, p=pi))
    # Expected run length sum_j pi_j / (1 - alpha_j); draw a few more runs than needed, then top up.
    mean_run = float(np.sum(pi / (1.0 - alpha)))
    parts, total, state = [], 0, start
    while total < length:
        runs = int((length - total) / mean_run * 1.1) + 16
        steps = 1 + rng.integers(0, n - 1, size=runs)
        steps[0] = 0
        states = (state + np.cumsum(steps)) % n
        p_leave = 1.0 - alpha[states]
        lengths = rng.geometric(p_leave)
        parts.append(np.repeat(states, lengths))
        total += int(lengths.sum())
        state = int((states[-1] + 1 + rng.integers(0, n - 1)) % n)
    return np.concatenate(parts)[:length]


def _matrix_chain(t: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """A path of any row-stochastic matrix from its stationary start, run by run (Python loop over runs)."""
    n = t.shape[0]
    pi = ulmm.stationary(t)
    pi = np.clip(pi, 0, None)
    pi /= pi.sum()
    stay = np.diag(t).copy()
    leave = t.copy()
    np.fill_diagonal(leave, 0.0)
    sums = leave.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        cdf = np.cumsum(np.where(sums > 0, leave / sums, 0.0), axis=1)
    out = np.empty(length, dtype=np.int64)
    s, t_pos = int(rng.choice(n, p=pi)), 0
    while t_pos < length:
        run = length - t_pos if stay[s] >= 1.0 else int(rng.geometric(1.0 - stay[s]))
        out[t_pos : t_pos + run] = s
        t_pos += run
        s = min(int(np.searchsorted(cdf[s], rng.random() * cdf[s, -1], side="right")), n - 1)
    return out


def conditional_class_path(
    class_matrix: np.ndarray, domains: np.ndarray, num_domains: int, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """A class path whose transition at step t uses the class matrix of domain d_t (paper section 3.3).

    ``class_matrix`` has shape (D, K, K), one row-stochastic matrix per domain; the start is drawn from
    the stationary distribution of the first domain's matrix.
    """
    t3 = np.asarray(class_matrix, dtype=np.float64)
    if t3.shape != (num_domains, num_classes, num_classes):
        raise ValueError(f"class_matrix: expected shape {(num_domains, num_classes, num_classes)}, got {t3.shape}")
    for d in range(num_domains):
        ulmm.check_transition_matrix(t3[d], f"class_matrix[{d}]")
    return _conditional_chain(t3, domains, rng)


def _conditional_chain(t_by_domain: np.ndarray, domains: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    length = len(domains)
    n_dom, n, _ = t_by_domain.shape
    cdf = np.cumsum(t_by_domain, axis=2)
    cdf /= cdf[:, :, -1:]
    pi0 = np.clip(ulmm.stationary(t_by_domain[domains[0]]), 0, None)
    out = np.empty(length, dtype=np.int64)
    k = int(rng.choice(n, p=pi0 / pi0.sum()))
    u = rng.random(length)
    doms = domains.tolist()
    for t in range(length):
        out[t] = k
        k = min(int(cdf[doms[t], k].searchsorted(u[t], side="right")), n - 1)
    return out


def attribute_path(
    corr: str,
    alpha_1: float,
    beta: float,
    n: int,
    length: int,
    rng: np.random.Generator,
    *,
    name: str,
    matrix: np.ndarray | None = None,
) -> np.ndarray:
    """One attribute's state path for a setting character pair (corr, imbalance factors), or a custom matrix."""
    if matrix is not None:
        t = ulmm.check_transition_matrix(matrix, f"{name}_matrix")
        if t.shape[0] != n:
            raise ValueError(f"{name}_matrix: expected shape ({n}, {n}) for {n} {name}s, got {t.shape}")
        return _matrix_chain(t, length, rng)
    ulmm.check_factors(alpha_1, beta, n, name=name)
    pi = ulmm.imbalance_ratios(beta, n)
    if corr == "1":
        return np.repeat(np.arange(n, dtype=np.int64), continual_counts(pi, length))
    if corr == "i":
        return rng.choice(n, size=length, p=pi).astype(np.int64)
    lo, hi = ulmm.feasible_alpha_range(beta, n)
    if not ulmm.is_consistent(alpha_1, beta, n):
        raise ValueError(
            f"{name}_alpha={alpha_1!r} with {name}_beta={beta!r} (n={n}) is infeasible for a ULMM (paper Cor. 1): "
            f"(1 - alpha) * beta must be <= 1 - 1/n, i.e. {name}_alpha in [{lo:.6g}, {hi:g}) for this beta"
        )
    return _ulmm_chain(ulmm.correlation_vector(alpha_1, beta, n), length, rng)
