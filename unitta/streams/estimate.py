"""Estimate a stream's factors (correlation alpha_1, imbalance beta) from an observed label sequence.

The inverse of ``make_stream``: given the class sequence (and optionally the domain sequence) of a
stream, find the factors that, passed to ``make_stream``, would generate a stream like it, with standard
errors, and the nearest benchmark setting code. Each attribute (class, domain) is fitted on its own,
since the benchmark's domain and class chains are independent (paper section 3.2, the Kronecker
product of two ULMMs). ``make_stream`` draws an attribute's sequence from one of three families, and
each gets its own estimator (docs/recommend.md derives them):

* ``markov`` (correlation ``n``): a uniformly-leaving Markov matrix with alpha_j = 1 - (1 - alpha_1)
  beta^(j/(n-1)) for the state of rank j (paper Cor. 1). The likelihood of the transitions factorises into
  one binomial per state: stays with probability alpha_j, leaves with 1 - alpha_j, and a leave's target
  is uniform so it carries no information. Maximum likelihood over (alpha_1, beta) within the feasible
  region alpha_j >= 1/n (Cor. 1), standard errors from the Fisher information given the visit counts.
* ``iid`` (correlation ``i``): independent draws from pi_j proportional to beta^(-j/(n-1)) (paper Prop. 1):
  a one-parameter exponential family in log beta, fitted by maximum likelihood; alpha_1 is 1/n, the value
  ``make_stream`` uses (an i.i.d. imbalanced stream is *not* a ULMM: its rows are not uniformly leaving).
* ``continual`` (correlation ``1``): each state is one contiguous segment, segment lengths proportional to
  pi (both samplers). Recognised structurally (every visited state forms exactly one run); alpha_1 = 1
  and beta is fitted to the segment lengths as if they were multinomial counts (a conservative standard
  error: the samplers' segment lengths are deterministic).

A non-continual sequence is fitted under both ``markov`` and ``iid`` on the same transitions; ``markov`` is
kept when its log-likelihood gain passes a 5% likelihood-ratio test (1.92 = chi2_1(0.95) / 2). The two
families meet at beta = 1, alpha_1 = 1/n (the balanced i.i.d. stream).

Which state is the head (``make_stream``'s state 0)? The observed states are ranked by visit count,
most visited first: the maximum-likelihood assignment for pi, and for a ULMM the stickiest states are
also the most visited (pi_j proportional to 1 / (1 - alpha_j), Prop. 1). Ranking by observed counts
biases beta slightly upwards when the stream is balanced (sorted counts always decrease); the bias is of
the order of the standard error.

Predicted labels (a deployed model's pseudo-labels) with error rate eps, errors spread uniformly over
the other classes, flatten both factors: the observed marginal is lam * pi + (1 - lam) / n and, for a
balanced chain, the observed self-transition rate is 1/n + lam^2 (alpha_1 - 1/n), with
lam = 1 - eps * n / (n - 1). Given eps (``label_error``), the likelihoods model the labels as seen
through that noise, which removes the bias (the Markov fit then scores the stays with the observed rates,
a pairwise composite likelihood). Noise also breaks a continual stream's segments into many runs, so a
continual class stream seen through noisy labels is estimated as a very sticky Markov chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from unitta.streams.likelihood import fit_iid, fit_markov
from unitta.streams.settings import default_factors

__all__ = [
    "AttributeFactors",
    "Factors",
    "LR_THRESHOLD",
    "corr_position",
    "estimate_attribute",
    "estimate_factors",
    "imb_position",
    "ranks_by_count",
    "reference_factors",
]

# Half the 95% quantile of chi2 with 1 degree of freedom: the likelihood-ratio test at 5% for the extra
# correlation parameter of the Markov family over the i.i.d. family.
LR_THRESHOLD = 1.92
# The most states (classes or domains) an estimate takes: the estimator allocates O(n) arrays, so one stray
# label (1e8, 1e12) must be an error before anything is allocated, not gigabytes. ImageNet-21k has ~21,800
# classes; 10^6 leaves room and costs a few MB.
MAX_STATES = 1_000_000
_N_BLOCKS = 20  # blocks alternating between the two halves of the cross-fitted ranking


@dataclass(frozen=True)
class AttributeFactors:
    """One attribute's estimate in ``make_stream``'s parameterisation, with its nearest setting half.

    alpha, beta: the correlation factor alpha_1 (the head state's self-transition probability) and the
    imbalance factor beta (head/tail ratio of pi); alpha_se, beta_se: their standard errors (NaN where the
    family fixes the value: alpha = 1/n for ``iid``, alpha = 1 for ``continual``, or where the information
    is singular). family: 'iid', 'markov' or 'continual'. corr, imb: the nearest setting characters
    (``corr_position`` / ``imb_position`` give the thresholds). n_states: n; length: the sequence length;
    loglik_iid, loglik_markov: the two fits' log-likelihoods of the transitions (NaN for continual).
    """

    attribute: str
    alpha: float
    alpha_se: float
    beta: float
    beta_se: float
    family: str
    corr: str
    imb: str
    n_states: int
    length: int
    loglik_iid: float = float("nan")
    loglik_markov: float = float("nan")

    @property
    def code(self) -> str:
        """The setting half, e.g. 'nu'."""
        return self.corr + self.imb

    def interval(self, name: str, z: float = 1.96) -> tuple[float, float]:
        """A Wald interval for 'alpha' (clipped to [1/n, 1]) or 'beta' (on the log scale, >= 1)."""
        value, se = (self.alpha, self.alpha_se) if name == "alpha" else (self.beta, self.beta_se)
        if not math.isfinite(se):
            return value, value
        if name == "alpha":
            return max(1.0 / self.n_states, value - z * se), min(1.0, value + z * se)
        # delta method: se(log beta) = se(beta) / beta; the interval stays above 1.
        half = z * se / value
        if half > 50:  # an estimate from a handful of labels: anything above 1 (and exp would overflow)
            return 1.0, math.inf
        return max(1.0, value * math.exp(-half)), value * math.exp(half)


@dataclass(frozen=True)
class Factors:
    """The estimated factors of a stream: the class attribute, and the domain attribute when domains were given."""

    classes: AttributeFactors
    domains: AttributeFactors | None = None

    @property
    def setting(self) -> str:
        """The nearest 4-character setting code; '**' stands for the domain half when domains were not given."""
        return self.classes.code + (self.domains.code if self.domains is not None else "**")

    def as_dict(self) -> dict[str, float | None]:
        """``make_stream``'s keyword names -> values (None for the domain factors when not estimated)."""
        d = self.domains
        return {
            "domain_alpha": d.alpha if d else None,
            "domain_beta": d.beta if d else None,
            "class_alpha": self.classes.alpha,
            "class_beta": self.classes.beta,
        }

    def summary(self) -> dict[str, Any]:
        """JSON-ready details: per attribute value, standard error, 95% interval, family and code."""
        out: dict[str, Any] = {}
        for attr in (self.domains, self.classes):
            if attr is None:
                continue
            out[attr.attribute] = {
                "family": attr.family,
                "code": attr.code,
                "n_states": attr.n_states,
                "length": attr.length,
                **{
                    name: {
                        "value": getattr(attr, name),
                        "se": _finite_or_none(getattr(attr, f"{name}_se")),
                        "interval95": list(attr.interval(name)),
                    }
                    for name in ("alpha", "beta")
                },
            }
        return out


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def reference_factors(attribute: str, n: int) -> dict[str, float]:
    """The benchmark's default factors for one attribute: alpha of 'i', 'n', and beta of 'u' (``default_factors``).

    The i.i.d. alpha is 1/n (the reference prints 0.067 for 15 domains and 1/K with 3 decimals for classes).
    """
    f = default_factors("nunu")  # the 'n' and 'u' values are the same for every dataset
    return {"alpha_i": 1.0 / n, "alpha_n": f[f"{attribute}_alpha"], "beta_u": f[f"{attribute}_beta"]}


def corr_position(alpha: float, attribute: str, n: int, *, continual: bool | None = None) -> float:
    """Where alpha_1 sits on the ladder i = 0, n = 1, continual = 2, on the scale of log mean run length.

    The mean run length of the head state is 1 / (1 - alpha_1); its log is mapped linearly so that the
    default i.i.d. alpha (1/n) lands on 0 and the default non-i.i.d. alpha (0.85 domains, 0.95 classes) on 1.
    The 'i'/'n' threshold is 0.5: the geometric mean of the two defaults' run lengths (alpha_1 = 0.626 for
    15 domains, 0.788 for 10 classes). Continual (alpha = 1, or ``continual=True``) is 2: a Markov chain is
    never called continual however sticky, since it revisits states and a continual stream does not.
    """
    if continual or (continual is None and alpha >= 1.0):
        return 2.0
    ref = reference_factors(attribute, n)
    log_r = -math.log(max(1.0 - alpha, 1e-12))
    lo, hi = -math.log(1.0 - ref["alpha_i"]), -math.log(1.0 - ref["alpha_n"])
    return max(0.0, (log_r - lo) / (hi - lo))


def imb_position(beta: float, attribute: str) -> float:
    """log beta / log beta_u: 0 balanced, 1 the default imbalance (5 domains, 10 classes); threshold 0.5."""
    return math.log(max(beta, 1.0)) / math.log(reference_factors(attribute, 2)["beta_u"])


def _codes(alpha: float, beta: float, family: str, attribute: str, n: int) -> tuple[str, str]:
    if family == "continual":
        corr = "1"
    else:  # a chain that revisits states is never continual, however sticky
        corr = "n" if corr_position(alpha, attribute, n, continual=False) >= 0.5 else "i"
    return corr, ("u" if imb_position(beta, attribute) >= 0.5 else "1")


def _check_state_count(arr: np.ndarray, name: str, n: int, observed: int) -> None:
    """Labels must be 0..n-1 for the declared n (or the observed largest label + 1), n at most MAX_STATES."""
    if n < observed:
        where = int(np.argmax(arr >= n))
        raise ValueError(f"{name}: label {int(arr[where])} at position {where} is out of range for {n} states "
                         f"(labels are 0..{n - 1})")
    if n > MAX_STATES:
        where = int(np.argmax(arr))
        what = f"the largest label, {int(arr[where])} at position {where}, implies" if n == observed else "asks for"
        raise ValueError(f"{name}: {what} {n:,} states; at most {MAX_STATES:,} are supported (labels are class or "
                         "domain indices 0..n-1: map them to indices first)")


def _check_sequence(seq: Any, name: str, n: int | None) -> tuple[np.ndarray, int]:
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d sequence of integer labels, got shape {arr.shape}")
    if arr.size < 2:
        raise ValueError(f"{name}: expected at least 2 labels, got {arr.size}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name}: labels must be integers")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name}: labels must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 0:
        raise ValueError(f"{name}: labels must be >= 0, got {int(arr.min())}")
    observed = int(arr.max()) + 1
    n = observed if n is None else int(n)
    _check_state_count(arr, name, n, observed)
    if n < 2:
        raise ValueError(f"{name}: at least 2 states are needed (all labels are 0); pass the number of states")
    return arr, n


def ranks_by_count(counts: np.ndarray) -> np.ndarray:
    """Each state's rank by count, most frequent first (ties by state index)."""
    rank_of = np.empty(len(counts), dtype=np.int64)
    rank_of[np.argsort(-counts, kind="stable")] = np.arange(len(counts))
    return rank_of


def _crossfit_ranks(arr: np.ndarray, n: int, n_blocks: int = _N_BLOCKS) -> np.ndarray:
    """The rank of every position's state, taken from the counts of the other half of the stream.

    The stream is cut into ``n_blocks`` consecutive blocks; positions in even blocks are ranked by the counts
    of the odd blocks and vice versa. Ranking and fitting on the same counts would sort sampling noise into
    a spurious decreasing profile (beta > 1 for a balanced stream, by a few standard errors); alternating
    blocks keep both halves alike when the stream drifts, and far apart for a Markov chain.
    """
    half = (np.arange(arr.size) * n_blocks // arr.size) % 2
    ranks = np.empty(arr.size, dtype=np.int64)
    for h in (0, 1):
        mine = half == h
        ranks[mine] = ranks_by_count(np.bincount(arr[~mine], minlength=n))[arr[mine]]
    return ranks


def estimate_attribute(
    seq: Any, *, n: int | None = None, attribute: str = "class", label_error: float = 0.0
) -> AttributeFactors:
    """Estimate one attribute's factors from its observed state sequence (``estimate_factors`` for both)."""
    if attribute not in ("class", "domain"):
        raise ValueError(f"attribute={attribute!r}: allowed values are 'class', 'domain'")
    name = "classes" if attribute == "class" else "domains"
    arr, n = _check_sequence(seq, name, n)
    eps = float(label_error)
    if not 0.0 <= eps < (n - 1) / n:
        raise ValueError(
            f"label_error={label_error!r}: expected an error rate in [0, {(n - 1) / n:.4g}) for {n} states"
        )
    lam = 1.0 - eps * n / (n - 1)
    counts = np.bincount(arr, minlength=n)
    ranks = _crossfit_ranks(arr, n)
    n_runs = 1 + int(np.count_nonzero(arr[1:] != arr[:-1]))
    visited = int(np.count_nonzero(counts))
    common = {"attribute": attribute, "n_states": n, "length": int(arr.size)}

    if n_runs == visited:  # every visited state is one contiguous segment: continual
        if visited == 1:
            beta, beta_se = 1.0, float("nan")  # one segment: the imbalance is not identified
        else:
            seg = np.sort(counts[counts > 0])[::-1].astype(np.float64)
            u, u_se, _ = fit_iid(seg)
            # The profile over the m visited segments has step u / (m - 1); over n states beta = exp(step (n-1)).
            scale = (n - 1) / (visited - 1)
            beta, beta_se = math.exp(u * scale), math.exp(u * scale) * u_se * scale
        corr, imb = _codes(1.0, beta, "continual", attribute, n)
        return AttributeFactors(alpha=1.0, alpha_se=float("nan"), beta=beta, beta_se=beta_se, family="continual",
                                corr=corr, imb=imb, **common)

    prev, nxt = ranks[:-1], ranks[1:]
    visits = np.bincount(prev, minlength=n).astype(np.float64)
    stays = np.bincount(prev[prev == nxt], minlength=n).astype(np.float64)
    u_i, u_i_se, ll_i = fit_iid(np.bincount(nxt, minlength=n).astype(np.float64), lam)
    a_m, a_m_se, b_m, b_m_se, ll_m = fit_markov(stays, visits, lam)
    if ll_m - ll_i > LR_THRESHOLD:
        family, alpha, alpha_se, beta, beta_se = "markov", a_m, a_m_se, b_m, b_m_se
    else:
        family, alpha, alpha_se, beta, beta_se = "iid", 1.0 / n, float("nan"), math.exp(u_i), math.exp(u_i) * u_i_se
    corr, imb = _codes(alpha, beta, family, attribute, n)
    return AttributeFactors(alpha=alpha, alpha_se=alpha_se, beta=beta, beta_se=beta_se, family=family, corr=corr,
                            imb=imb, loglik_iid=ll_i, loglik_markov=ll_m, **common)


def estimate_factors(
    classes: Any,
    domains: Any = None,
    *,
    num_classes: int | None = None,
    num_domains: int | None = None,
    label_error: float = 0.0,
) -> Factors:
    """The factors of an observed stream, in ``make_stream``'s parameterisation, by maximum likelihood.

    classes: the class label of every stream position (true labels, or a model's predictions); domains: the
    domain id of every position, or None to estimate the class part only. num_classes / num_domains: the
    number of states n (default: the largest label + 1); a state never observed still counts towards n.
    label_error: the error rate of predicted class labels (errors spread uniformly over the other classes);
    the likelihoods then describe the labels as seen through that noise, which undoes its flattening.
    Returns a ``Factors``: ``.as_dict()`` gives make_stream's keywords, ``.setting`` the nearest code.
    """
    cls = estimate_attribute(classes, n=num_classes, attribute="class", label_error=label_error)
    dom = None
    if domains is not None:
        d_arr = np.asarray(domains)
        if d_arr.ndim == 1 and d_arr.size != cls.length:
            raise ValueError(f"domains: length {d_arr.size} differs from the {cls.length} class labels")
        dom = estimate_attribute(d_arr, n=num_domains, attribute="domain")
    return Factors(classes=cls, domains=dom)
