"""How sure is a rank correlation between two tables of errors: Spearman's rho with a p-value and an interval.

* ``spearman_p``: the permutation p-value of Spearman's rho (two-sided, H0: the pairing is random), exact
  (every permutation enumerated, ``scipy.stats.permutation_test``) up to ``EXACT_MAX_N`` items, a seeded
  Monte Carlo estimate above. With 5 methods and rho = 0.6 it is 0.35: a rho that size often comes by chance.
* ``bootstrap_rho_interval``: a two-way bootstrap of the rho between the methods' mean errors (ours vs a
  reference table), resampling the methods and the settings with replacement (Efron & Tibshirani 1993,
  "An Introduction to the Bootstrap", ch. 13, percentile interval): both the choice of methods and the choice
  of settings move the rho of a small grid.

docs/analysis.md ("Comparing with the paper") says how to read them.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

__all__ = ["EXACT_MAX_N", "N_PERMUTATIONS", "N_BOOTSTRAP", "RESAMPLING_SEED", "spearman_p", "p_kind_text",
           "bootstrap_rho_interval"]

EXACT_MAX_N = 8  # 8! = 40,320 permutations: enumerated in well under a second
N_PERMUTATIONS = 9_999  # Monte Carlo permutations above EXACT_MAX_N
N_BOOTSTRAP = 2_000
RESAMPLING_SEED = 0  # the resampling's fixed seed: the same results give the same p-value and interval


def _rho_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho along the last axis of ``x`` and ``y`` (average ranks for ties); nan where one is constant."""
    rx, ry = stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def spearman_p(a: list[float], b: list[float], seed: int = RESAMPLING_SEED) -> tuple[float, str]:
    """(two-sided p-value, 'exact' | 'permutation') of Spearman's rho of the pairs (a_i, b_i); nan for n < 3.

    H0: every pairing of ``a`` with ``b`` is equally likely. Exact enumeration of the n! pairings up to
    ``EXACT_MAX_N``, else ``N_PERMUTATIONS`` random ones from a generator seeded with ``seed``.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, "none"
    exact = n <= EXACT_MAX_N
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.permutation_test(
            (x,),
            lambda u, axis=-1: _rho_rows(u, y),
            permutation_type="pairings",
            vectorized=True,
            n_resamples=math.factorial(n) if exact else N_PERMUTATIONS,
            alternative="two-sided",
            rng=np.random.default_rng(seed),
        )
    return float(res.pvalue), "exact" if exact else "permutation"


def p_kind_text(kind: str) -> str:
    """How ``spearman_p``'s p-value of ``kind`` was computed, in words: 'exact permutation test' or 'Monte
    Carlo permutation test (9999 pairings)'; 'no test' for 'none'."""
    return {"exact": "exact permutation test",
            "permutation": f"Monte Carlo permutation test ({N_PERMUTATIONS} pairings)"}.get(kind, "no test")


def bootstrap_rho_interval(
    ours: np.ndarray,
    reference: np.ndarray,
    n_boot: int = N_BOOTSTRAP,
    seed: int = RESAMPLING_SEED,
    confidence: float = 0.95,
) -> tuple[float, float, int]:
    """(low, high, replicates used) of the percentile interval of rho between the methods' mean errors.

    ``ours`` and ``reference``: (methods, settings) error matrices, complete. Each replicate draws the methods
    and the settings with replacement, averages each drawn method over the drawn settings on both sides and
    takes Spearman's rho; replicates where a side is constant (rho undefined) are left out and counted.
    """
    ours, reference = np.asarray(ours, dtype=float), np.asarray(reference, dtype=float)
    m, s = ours.shape
    if m < 3 or s < 1:
        return math.nan, math.nan, 0
    rng = np.random.default_rng(seed)
    mi = rng.integers(0, m, size=(n_boot, m))
    si = rng.integers(0, s, size=(n_boot, s))
    rows = mi[:, :, None]
    cols = si[:, None, :]
    rho = _rho_rows(ours[rows, cols].mean(-1), reference[rows, cols].mean(-1))
    rho = rho[np.isfinite(rho)]
    if rho.size == 0:
        return math.nan, math.nan, 0
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(rho, [tail, 100 - tail])
    return float(lo), float(hi), int(rho.size)
