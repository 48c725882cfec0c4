"""The likelihoods ``unitta.streams.estimate`` maximises: the i.i.d. family (class frequencies pi_r proportional
to beta^(-r/(n-1))) and the uniformly-leaving Markov family (paper section 3.2, Cor. 1), each through symmetric
label noise, with their standard errors from the Fisher information."""

from __future__ import annotations

import math

import numpy as np

_U_MAX = math.log(1e6)  # log beta is searched in [0, log 1e6]: beyond that a tail state is never seen


def _log_pi(u: float, n: int) -> np.ndarray:
    """log pi_r for ranks r = 0..n-1 with beta = exp(u) (``ulmm.imbalance_ratios``)."""
    z = -u * np.arange(n) / (n - 1)
    return z - np.logaddexp.reduce(z)


def _observed(pi: np.ndarray, alpha: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Marginal and self-transition rate of the labels seen through symmetric noise, C = lam I + (1-lam) J/n.

    P(o_t = a) = lam pi_a + (1-lam)/n and P(o_t = o_t+1 = a) = lam^2 pi_a alpha_a + 2 lam (1-lam) pi_a / n
    + (1-lam)^2 / n^2, from the diagonal of C^T diag(pi) T C for any chain T with stationary pi and
    self-transition rates alpha. lam = 1 gives (pi, alpha) back.
    """
    n = len(pi)
    marginal = lam * pi + (1.0 - lam) / n
    pair = lam**2 * pi * alpha + 2.0 * lam * (1.0 - lam) * pi / n + (1.0 - lam) ** 2 / n**2
    return marginal, pair / marginal


def fit_iid(counts_by_rank: np.ndarray, lam: float = 1.0) -> tuple[float, float, float]:
    """(log beta, its standard error, log-likelihood) of counts under pi_r proportional to beta^(-r/(n-1)).

    With label noise (lam < 1) the counts follow the observed marginal lam pi + (1-lam)/n.
    """
    from scipy import optimize  # lazy: `import unitta.streams` stays numpy-only

    n, total = len(counts_by_rank), float(counts_by_rank.sum())
    t = np.arange(n) / (n - 1)

    def loglik(u: float) -> float:
        log_p = _log_pi(u, n) if lam == 1.0 else np.log(lam * np.exp(_log_pi(u, n)) + (1.0 - lam) / n)
        return float(counts_by_rank @ log_p)

    res = optimize.minimize_scalar(lambda u: -loglik(u), bounds=(0.0, _U_MAX), method="bounded",
                                   options={"xatol": 1e-10})
    u = float(res.x)
    if loglik(0.0) >= -res.fun:  # Brent never evaluates the bound itself; beta = 1 may be the maximum
        u = 0.0
    pi = np.exp(_log_pi(u, n))
    d_obs = lam * pi * (float(pi @ t) - t)  # d(observed marginal) / du
    info = total * float(np.sum(d_obs**2 / (lam * pi + (1.0 - lam) / n)))
    se = 1.0 / math.sqrt(info) if info > 0 else float("nan")
    return u, se, loglik(u)


def _markov_loglik(alpha: np.ndarray, stays: np.ndarray, visits: np.ndarray, n: int) -> float:
    leaves = visits - stays
    with np.errstate(divide="ignore"):
        ll = np.where(stays > 0, stays * np.log(np.maximum(alpha, 1e-300)), 0.0)
        ll += np.where(leaves > 0, leaves * np.log(np.maximum((1.0 - alpha) / (n - 1), 1e-300)), 0.0)
    return float(ll.sum())


def _markov_rates(y: float, u: float, n: int, lam: float) -> np.ndarray:
    """Observed self-transition rates of the ULMM with alpha_1 = 1 - y, beta = e^u (Cor. 1), through noise lam."""
    alpha = 1.0 - y * np.exp(u * np.arange(n) / (n - 1))
    if lam == 1.0:
        return alpha
    return _observed(np.exp(_log_pi(u, n)), alpha, lam)[1]


def fit_markov(stays: np.ndarray, visits: np.ndarray, lam: float = 1.0) -> tuple[float, float, float, float, float]:
    """(alpha_1, se, beta, se, log-likelihood) of a ULMM with Cor. 1's alpha profile, alpha_j >= 1/n.

    With u = log beta fixed, alpha_j = 1 - y e^(u t_j) (y = 1 - alpha_1, t_j = j / (n-1)); the feasible y
    form the interval (0, (1 - 1/n) / beta] and the log-likelihood is concave in y there (without noise).
    It is maximised in y for each u, and the profile over u by a coarse grid then a bounded Brent search
    around the best grid point. With label noise the stays are scored with the observed self-transition
    rates (``_observed``): a pairwise composite likelihood, since the observed labels are no Markov chain.
    """
    from scipy import optimize  # lazy: `import unitta.streams` stays numpy-only

    n = len(stays)

    def best_y(u: float) -> tuple[float, float]:
        hi = (1.0 - 1.0 / n) * math.exp(-u)
        res = optimize.minimize_scalar(
            lambda y: -_markov_loglik(_markov_rates(y, u, n, lam), stays, visits, n), bounds=(1e-12, hi),
            method="bounded", options={"xatol": 1e-12},
        )
        y, best = float(res.x), float(res.fun)
        for edge in (1e-12, hi):  # Brent never evaluates the bounds; the optimum may lie on one
            nll = -_markov_loglik(_markov_rates(edge, u, n, lam), stays, visits, n)
            if nll < best:
                y, best = edge, nll
        return y, -best

    grid = _U_MAX * np.linspace(0.0, 1.0, 25) ** 2
    profile = [best_y(u)[1] for u in grid]
    k = int(np.argmax(profile))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(lambda u: -best_y(u)[1], bounds=(lo, hi), method="bounded", options={"xatol": 1e-9})
    u = float(res.x) if -res.fun > profile[k] else float(grid[k])
    y, ll = best_y(u)
    a, b = 1.0 - y, math.exp(u)
    # Fisher information for (alpha_1, beta) given the visit counts: sum_j v_j g_j g_j^T / (r_j (1 - r_j)),
    # r_j the (observed) self-transition rate, g_j its gradient (central differences).
    rates = _markov_rates(y, u, n, lam)
    h = 1e-6
    g = np.stack([
        (_markov_rates(y - h, u, n, lam) - _markov_rates(y + h, u, n, lam)) / (2 * h),
        (_markov_rates(y, math.log(b + h), n, lam) - _markov_rates(y, math.log(max(b - h, 1.0 - h)), n, lam))
        / (b + h - max(b - h, 1.0 - h)),
    ], axis=1)
    w = visits / np.maximum(rates * (1.0 - rates), 1e-300)
    info = (g * w[:, None]).T @ g
    try:
        cov = np.linalg.inv(info)
        a_se, b_se = (math.sqrt(v) if v > 0 else float("nan") for v in np.diag(cov))
    except np.linalg.LinAlgError:
        a_se = b_se = float("nan")
    return a, a_se, b, b_se, ll
