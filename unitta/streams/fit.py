"""Does the fitted ULMM describe the stream? Two checks on an observed label sequence and its estimate.

``estimate_factors`` fits the benchmark's model (paper section 3.2: a uniformly-leaving Markov chain, or i.i.d.
draws) whatever the stream; these checks say when that model is wrong, so that a recommendation built on it
can say so (docs/recommend.md):

* ``transition_fit``: the observed transition counts against the ones the fitted model implies, a G-test
  (likelihood ratio against the saturated first-order chain) with a parametric Monte Carlo p-value: every
  row's transitions redrawn from the fitted row given its visit count. A ULMM leaves every state uniformly;
  a stream whose runs always return to one class, say, does not.
* ``drift``: each state's share in the first and in the second half of the stream, a z-test per state whose
  variance is inflated for the chain's own correlation (an indicator with lag-1 autocorrelation rho has
  variance factor (1 + rho) / (1 - rho); rho_j = (alpha_j - pi_j) / (1 - pi_j) for a ULMM state), with a
  Bonferroni correction over the states. The benchmark's streams have no drift (docs/streams.md).

Neither is run on a continual attribute (one segment per state, a change by design) nor through label noise
(the observed labels are no Markov chain; ``estimate`` scores them with a composite likelihood).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from unitta.streams.estimate import AttributeFactors, ranks_by_count
from unitta.streams.ulmm import imbalance_ratios, ulmm

__all__ = ["FIT_ALPHA", "MAX_FIT_STATES", "FitCheck", "drift", "transition_fit"]

FIT_ALPHA = 0.01  # a check below this p-value is a warning: 1 false warning in 100 streams that fit
N_SIMULATIONS = 999
MONTE_CARLO_SEED = 0  # the Monte Carlo's fixed seed: the same stream gets the same p-value
# The transition test simulates N_SIMULATIONS tables of n x n counts: its work grows as n squared. Up to this many
# states it runs (200: 40,000 cells a table, a few seconds); beyond, it is not run and says what it would need
# (docs/recommend.md). Simulated tables are held CHUNK_BYTES at a time, so memory stays bounded below the limit.
MAX_FIT_STATES = 200
CHUNK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class FitCheck:
    """One check of one attribute: its p-value (nan when not run), whether it warns, and what it found."""

    check: str
    attribute: str
    p_value: float
    detail: str

    @property
    def warns(self) -> bool:
        return math.isfinite(self.p_value) and self.p_value < FIT_ALPHA

    def as_dict(self) -> dict[str, Any]:
        p = self.p_value if math.isfinite(self.p_value) else None
        return {
            "check": self.check,
            "attribute": self.attribute,
            "p_value": p,
            "warns": self.warns,
            "detail": self.detail,
        }


def _untestable(check: str, f: AttributeFactors, label_error: float) -> FitCheck | None:
    if f.family == "continual":
        return FitCheck(check, f.attribute, math.nan, "not tested: a continual stream changes by design")
    if label_error > 0:
        return FitCheck(check, f.attribute, math.nan, "not tested: predicted labels are no Markov chain")
    return None


def _implied_rows(f: AttributeFactors) -> np.ndarray:
    """The fitted model's transition matrix over the states ranked by count (rank 0 = most visited)."""
    n = f.n_states
    if f.family == "iid":
        return np.repeat(imbalance_ratios(f.beta, n)[None, :], n, axis=0)
    alpha = 1.0 - (1.0 - f.alpha) * f.beta ** (np.arange(n) / (n - 1))  # paper Cor. 1
    return ulmm(np.clip(alpha, 0.0, 1.0))


def _deviance(observed: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """2 (O ln(O / E) - (O - E)) elementwise (0 ln 0 = 0): G's terms, valid when the totals differ too."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(observed > 0, observed * np.log(observed / np.maximum(expected, 1e-300)), 0.0)
    return 2.0 * (terms - (observed - expected))


def _g(observed: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """G over the last two axes (the whole transition table)."""
    return _deviance(observed, expected).sum(axis=(-2, -1))


def _entries(counts: np.ndarray) -> np.ndarray:
    """Per state, the transitions into it from another state (the destinations of the leaves), last axis."""
    off = counts.copy()
    idx = np.arange(counts.shape[-1])
    off[..., idx, idx] = 0.0
    return off.sum(axis=-2)


def _g1(observed: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """G over the last axis (the leave destinations)."""
    return _deviance(observed, expected).sum(axis=-1)


def transition_fit(
    seq: Any, f: AttributeFactors, *, label_error: float = 0.0, seed: int = MONTE_CARLO_SEED, n_sim: int = N_SIMULATIONS
) -> FitCheck:
    """Observed vs implied transition counts of ``seq`` under the fitted ``f`` (Monte Carlo p-values).

    Two G statistics, both against the fitted model's transitions given each state's visit count: over the
    whole transition table, and over where the leaves go (the transitions into each state from another,
    pooled over their sources: the ULMM's uniform leaving, testable with few leaves). The p-value is the
    smaller of the two, doubled (Bonferroni).
    """
    skip = _untestable("transition_fit", f, label_error) or _too_large(f, n_sim)
    if skip is not None:
        return skip
    arr = np.asarray(seq, dtype=np.int64)
    n = f.n_states
    counts = np.bincount(arr, minlength=n)
    rank = ranks_by_count(counts)[arr]
    observed = np.zeros((n, n))
    np.add.at(observed, (rank[:-1], rank[1:]), 1.0)
    visits = observed.sum(1)
    rows = _implied_rows(f)
    expected = visits[:, None] * rows
    stats = (lambda c: _g(c, expected), lambda c: _g1(_entries(c), _entries(expected)))
    observed_stats = [float(stat(observed)) for stat in stats]
    exceed = [0, 0]
    rng = np.random.default_rng(seed)
    chunk = max(1, CHUNK_BYTES // (8 * 4 * n * n))  # the tables and their temporaries, float64
    for start in range(0, n_sim, chunk):  # the same draws as one call of size (n_sim, n)
        sims = rng.multinomial(visits.astype(np.int64), rows, size=(min(chunk, n_sim - start), n)).astype(np.float64)
        for i, stat in enumerate(stats):
            exceed[i] += int(np.sum(stat(sims) >= observed_stats[i] - 1e-9))
    p_values = [(1.0 + e) / (n_sim + 1.0) for e in exceed]
    p = min(1.0, 2.0 * min(p_values))
    label = np.argsort(-counts, kind="stable")  # rank -> label
    into, implied = _entries(observed), _entries(expected)
    k = int(np.argmax(np.abs(into - implied) / np.sqrt(np.maximum(implied, 1.0))))
    leaves = int(into.sum())
    detail = (
        f"{leaves} changes of state in {int(visits.sum())} transitions; {int(into[k])} of the changes go to "
        f"{label[k]}, the fitted {f.family} model implies {implied[k]:.1f} (uniform leaving); "
        f"p = {p:.3g} (table and leave-destination G-tests, {n_sim} simulations)"
    )
    return FitCheck("transition_fit", f.attribute, p, detail)


def _too_large(f: AttributeFactors, n_sim: int) -> FitCheck | None:
    """A 'not tested' check saying what the transition test would need, beyond MAX_FIT_STATES states."""
    n = f.n_states
    if n <= MAX_FIT_STATES:
        return None
    gib = n_sim * n * n * 8 / 2**30
    return FitCheck("transition_fit", f.attribute, math.nan,
                    f"not tested: {n:,} states would need {n_sim} simulated {n:,} x {n:,} transition tables "
                    f"({gib:,.1f} GiB of counts); the test runs up to {MAX_FIT_STATES} states")


def drift(seq: Any, f: AttributeFactors, *, label_error: float = 0.0) -> FitCheck:
    """Each state's share, first vs second half of ``seq``, against the fitted chain's own variability."""
    from scipy import stats  # lazy: `import unitta.streams` stays numpy-only

    skip = _untestable("drift", f, label_error)
    if skip is not None:
        return skip
    arr = np.asarray(seq, dtype=np.int64)
    n, half = f.n_states, arr.size // 2
    first = np.bincount(arr[:half], minlength=n) / half
    second = np.bincount(arr[half:], minlength=n) / (arr.size - half)
    share = np.bincount(arr, minlength=n) / arr.size
    rows = _implied_rows(f)
    pi = imbalance_ratios(f.beta, n)[ranks_by_count(np.bincount(arr, minlength=n))]  # per label, by its rank
    stay = np.diag(rows)[ranks_by_count(np.bincount(arr, minlength=n))]
    rho = np.clip((stay - pi) / np.maximum(1.0 - pi, 1e-12), 0.0, 0.999)
    var = share * (1.0 - share) * (1.0 + rho) / (1.0 - rho) * (1.0 / half + 1.0 / (arr.size - half))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0, (first - second) / np.sqrt(var), 0.0)
    k = int(np.argmax(np.abs(z)))
    p = min(1.0, n * 2.0 * float(stats.norm.sf(abs(z[k]))))
    detail = (
        f"state {k}: {100 * first[k]:.0f} % of the first half, {100 * second[k]:.0f} % of the second "
        f"(z = {z[k]:.1f}, allowing for the fitted correlation)"
    )
    return FitCheck("drift", f.attribute, p, detail)
