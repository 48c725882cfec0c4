"""Uniformly-leaving Markov matrices (ULMMs): the math under the UniTTA benchmark.

A ULMM over n states stays in state j with probability alpha_j and otherwise leaves to one of
the other n - 1 states uniformly (paper section 3.2, docs/streams.md). Its stationary distribution
is pi_j proportional to 1 / (1 - alpha_j) (paper Prop. 1), so an imbalance factor beta (head/tail
ratio of pi) and a correlation factor alpha_1 (the head state's self-transition probability) fix
the whole correlation vector: alpha_j = 1 - (1 - alpha_1) * beta^(j/(n-1)) (paper Cor. 1).

Beyond the reference, everything here also accepts arbitrary per-state alpha vectors (including
temporal anti-correlation, alpha_j < 1/n), arbitrary row-stochastic matrices, and class matrices
that depend on the current domain (paper section 3.3's extensions); see ``joint_matrix_row``.
"""

from __future__ import annotations

import numpy as np


def check_num_states(n: int, name: str = "n") -> int:
    """An attribute needs at least two states (the ratio formulas divide by n - 1)."""
    if int(n) != n or n < 2:
        raise ValueError(f"{name}={n!r}: a ULMM needs an integer number of states >= 2")
    return int(n)


def check_factors(alpha_1: float, beta: float, n: int, *, name: str = "") -> None:
    """Validate a (correlation, imbalance) factor pair: alpha_1 in [1/n, 1], beta >= 1 (docs/streams.md)."""
    check_num_states(n)
    pre = f"{name}_" if name else ""  # e.g. domain_alpha
    if not np.isfinite(beta) or beta < 1.0:
        raise ValueError(f"{pre}beta={beta!r}: the imbalance factor must be a finite number >= 1")
    # 0.067 for 15 domains is the reference's i.i.d. value and lies a hair above 1/15 = 0.0667.
    if not np.isfinite(alpha_1) or not (1.0 / n - 1e-12 <= alpha_1 <= 1.0):
        raise ValueError(
            f"{pre}alpha={alpha_1!r}: the correlation factor must lie in [1/n, 1] = [{1.0 / n:.6g}, 1] for n={n}"
        )


def imbalance_ratios(beta: float, n: int) -> np.ndarray:
    """Head-to-tail ratio list r_j = rho^(-j) / sum_i rho^(-i), rho = beta^(1/(n-1)) (docs/streams.md).

    Index 0 is the head, index n-1 the tail, r_0 / r_{n-1} = beta. This is the stationary
    distribution pi that Cor. 1 realises.
    """
    n = check_num_states(n)
    rho = beta ** (1.0 / (n - 1))
    r = np.array([rho ** (-j) for j in range(n)], dtype=np.float64)
    return r / r.sum()


def is_consistent(alpha_1: float, beta: float, n: int) -> bool:
    """The reference's consistency test: (1 - alpha_1) * beta <= 1 - 1/n and alpha_1 < 1 (docs/streams.md).

    The paper writes a strict '<'; the reference uses '<=', which makes class (i,1) with alpha_1 = 1/K
    consistent (0.9 <= 0.9 as the same float expression). A consistent pair is realised by a pure
    Markov chain (Cor. 1); an inconsistent one needs quotas (official sampler) or is refused (exact).
    """
    return bool((1.0 - alpha_1) * beta <= 1.0 - 1.0 / n and alpha_1 < 1.0)


def feasible_alpha_range(beta: float, n: int) -> tuple[float, float]:
    """The alpha_1 interval for which a ULMM with imbalance beta exists with every alpha_j >= 1/n.

    From Cor. 1: alpha_{n-1} = 1 - beta (1 - alpha_1) >= 1/n  <=>  alpha_1 >= 1 - (1 - 1/n) / beta;
    alpha_1 < 1 so that the chain can leave (alpha_1 = 1 is the continual setting).
    """
    return 1.0 - (1.0 - 1.0 / n) / beta, 1.0


def correlation_vector(alpha_1: float, beta: float, n: int) -> np.ndarray:
    """Per-state self-transition probabilities alpha_j as the reference computes them (docs/streams.md).

    Consistent pairs: alpha_j = 1 - (1 - alpha_1) * beta^(j/(n-1)) (Cor. 1), whose stationary
    distribution is ``imbalance_ratios(beta, n)``. Inconsistent pairs: alpha_j = alpha_1 for all j
    (the reference then controls imbalance through quotas).
    """
    n = check_num_states(n)
    if is_consistent(alpha_1, beta, n):
        return np.array([1.0 - (1.0 - alpha_1) * beta ** (j / (n - 1)) for j in range(n)], dtype=np.float64)
    return np.full(n, float(alpha_1), dtype=np.float64)


def ulmm(alpha: np.ndarray) -> np.ndarray:
    """The uniformly-leaving matrix T[i,i] = alpha_i, T[i,j] = (1 - alpha_i)/(n - 1) (docs/streams.md).

    Any alpha in [0, 1]^n is allowed, including anti-correlated states (alpha_i < 1/n) and alpha_i = 0.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim != 1:
        raise ValueError(f"alpha: expected a 1-d vector, got shape {alpha.shape}")
    n = check_num_states(len(alpha), "len(alpha)")
    if np.any(~np.isfinite(alpha)) or np.any(alpha < 0) or np.any(alpha > 1):
        raise ValueError(f"alpha={alpha.tolist()}: every self-transition probability must lie in [0, 1]")
    t = np.repeat(((1.0 - alpha) / (n - 1))[:, None], n, axis=1)
    np.fill_diagonal(t, alpha)
    return t


def ulmm_stationary(alpha: np.ndarray) -> np.ndarray:
    """Stationary distribution of a ULMM in closed form: pi_j proportional to 1/(1 - alpha_j) (Prop. 1).

    Requires alpha_j < 1 for all j (a state with alpha_j = 1 is absorbing).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if np.any(alpha >= 1.0):
        raise ValueError(f"alpha={alpha.tolist()}: a stationary distribution needs every alpha_j < 1")
    w = 1.0 / (1.0 - alpha)
    return w / w.sum()


def stationary(t: np.ndarray) -> np.ndarray:
    """Stationary distribution of any irreducible row-stochastic matrix (left eigenvector for eigenvalue 1)."""
    t = check_transition_matrix(t)
    vals, vecs = np.linalg.eig(t.T)
    v = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return v / v.sum()


def check_transition_matrix(t: np.ndarray, name: str = "matrix") -> np.ndarray:
    """A square, non-negative, row-stochastic float64 matrix of at least 2 states, or a ValueError."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"{name}: expected a square matrix, got shape {t.shape}")
    check_num_states(t.shape[0], f"{name}.shape[0]")
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"{name}: entries must be finite and >= 0")
    sums = t.sum(axis=1)
    if not np.allclose(sums, 1.0, atol=1e-9):
        raise ValueError(f"{name}: every row must sum to 1 (row sums range {sums.min():.6g}..{sums.max():.6g})")
    return t


def kron_row(t_domain: np.ndarray, t_class: np.ndarray, d: int, k: int) -> np.ndarray:
    """Row s = d*K + k of kron(T_D, T_C), computed alone: P((d,k) -> (d',k')) = T_D[d,d'] * T_C[k,k'] (docs/streams.md).

    Each entry is the same single float64 product as in the dense Kronecker matrix, so the values are
    bit-identical to it, without the DK x DK memory (1.8 GB for ImageNet).
    """
    return np.multiply.outer(t_domain[d], t_class[k]).ravel()


def joint_matrix_row(t_domain: np.ndarray, t_class: np.ndarray, d: int, k: int) -> np.ndarray:
    """Like ``kron_row`` but ``t_class`` may be (D, K, K): the class matrix used depends on the current domain.

    This is paper section 3.3's extension where class transitions are domain-specific.
    """
    tc = t_class[d] if t_class.ndim == 3 else t_class
    return np.multiply.outer(t_domain[d], tc[k]).ravel()


def self_transition_rates(states: np.ndarray, n: int) -> np.ndarray:
    """Empirical P(s_{t+1} = j | s_t = j) per state j (NaN for a state never left from); for tests and summaries."""
    states = np.asarray(states)
    prev, nxt = states[:-1], states[1:]
    visits = np.bincount(prev, minlength=n).astype(np.float64)
    stays = np.bincount(prev[prev == nxt], minlength=n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(visits > 0, stays / np.maximum(visits, 1), np.nan)
