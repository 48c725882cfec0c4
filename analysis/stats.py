"""The uncertainty of a result and the tests that compare methods: what a reviewer asks of a table.

* ``t_interval``: mean and 95 % half-width of the t-interval over seeds (Student's t, n - 1 degrees of freedom);
* ``binomial_halfwidth``: one stream's own uncertainty, the normal approximation of the binomial standard
  error of an error rate measured on ``n`` images (each image right or wrong), times z = 1.96;
* ``uncertainty``: the seed interval where a cell has several seeds, else the binomial one;
* ``best_vs_runner_up``: per setting and overall, whether the best method beats the runner-up beyond the
  interval; the overall claim is a Wilcoxon signed-rank test over settings (Wilcoxon 1945; ``scipy.stats.wilcoxon``).

Errors are in percent throughout. docs/analysis.md ("Seeds and intervals") says how to read the outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl
from scipy import stats

__all__ = [
    "CONFIDENCE",
    "Z95",
    "t_interval",
    "binomial_halfwidth",
    "uncertainty",
    "SettingVerdict",
    "OverallVerdict",
    "best_vs_runner_up",
    "verdict_markdown",
    "overall_line",
    "complete_block",
]

CONFIDENCE = 0.95
Z95 = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))  # 1.96: the normal quantile of a two-sided 95 % interval


def t_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """(mean, half-width) of the two-sided t-interval for the mean of ``values``; half-width None for n < 2."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return math.nan, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    q = float(stats.t.ppf(0.5 + confidence / 2, df=len(xs) - 1))
    return mean, q * sd / math.sqrt(len(xs))


def binomial_halfwidth(error_pct: float, n: int) -> float | None:
    """Half-width (points) of the 95 % normal-approximation interval of an error rate measured on ``n`` images.

    Consecutive stream images are not independent (the paper's streams are Markov chains over classes and
    domains), so this is a lower bound on the true uncertainty; seeds give the honest interval.
    """
    if n is None or n <= 0 or error_pct is None or math.isnan(error_pct):
        return None
    p = min(max(error_pct / 100.0, 0.0), 1.0)
    # a rate of exactly 0 or 1 has zero binomial variance: use the rule of three's 3/n instead
    se = math.sqrt(p * (1 - p) / n) if 0.0 < p < 1.0 else 3.0 / n / Z95
    return 100.0 * Z95 * se


def uncertainty(errors: list[float], n_samples: list[int]) -> tuple[float | None, str]:
    """The 95 % half-width of a cell's mean error and where it comes from: 'seeds' (t-interval over the seeds'
    errors) when there are at least 2, else 'binomial' (one stream's binomial interval), else (None, 'none')."""
    ok = [(e, n) for e, n in zip(errors, n_samples) if e is not None and not math.isnan(e)]
    if len(ok) >= 2:
        return t_interval([e for e, _ in ok])[1], "seeds"
    if len(ok) == 1 and ok[0][1]:
        return binomial_halfwidth(ok[0][0], int(ok[0][1])), "binomial"
    return None, "none"


@dataclass(frozen=True)
class SettingVerdict:
    """Best vs runner-up in one setting. diff = runner-up - best (points, > 0); halfwidth = its 95 % interval;
    basis: 'paired seeds' (t-interval of the per-seed differences, same stream per seed) or 'binomial'
    (both streams' binomial intervals combined, a single seed); beats: the interval excludes 0."""

    setting: str
    best: str
    runner_up: str
    best_error: float
    runner_up_error: float
    diff: float
    halfwidth: float | None
    basis: str
    beats: bool


@dataclass(frozen=True)
class OverallVerdict:
    """Best vs runner-up by mean error over the settings both have: a two-sided Wilcoxon signed-rank test
    over those settings' differences. p is None when there are fewer than 2 non-zero differences;
    min_p is the smallest p-value the test can reach with that many settings; left_out: the methods with
    results left out because a missing or failed cell would have cost more settings than they add
    (``complete_block``). The two methods are chosen on the same settings they are tested on."""

    best: str
    runner_up: str
    best_mean: float
    runner_up_mean: float
    n_settings: int
    wins: int
    statistic: float | None
    p: float | None
    min_p: float | None
    beats: bool
    alpha: float
    left_out: tuple[str, ...] = ()


def complete_block(cells: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """The largest block of methods x settings in which every method has a value: (methods, settings).

    ``cells`` maps a method to the settings where it has a value. Averages over settings are comparable
    between methods only over the same settings, so a method with a failed or missing cell costs either the
    method or the setting: of the choices "the methods with values in at least k settings, and the settings
    where all of them have values", the one with the most cells wins (ties: the most methods). Sorted names.
    """
    best: tuple[int, int, list[str], list[str]] = (0, 0, [], [])
    for k in sorted({len(v) for v in cells.values()}, reverse=True):
        methods = sorted(m for m, v in cells.items() if len(v) >= k)
        settings = sorted(set.intersection(*(cells[m] for m in methods))) if methods else []
        score = (len(methods) * len(settings), len(methods))
        if score > best[:2]:
            best = (*score, methods, settings)
    return best[2], best[3]


def _per_setting(rows: pl.DataFrame) -> pl.DataFrame:
    ok = rows.filter((pl.col("status") == "ok") & pl.col("error").is_not_null())
    label = "method_label" if "method_label" in ok.columns else "method"
    return ok.rename({label: "m"}) if label != "m" else ok


def best_vs_runner_up(
    rows: pl.DataFrame, alpha: float = 1 - CONFIDENCE
) -> tuple[list[SettingVerdict], OverallVerdict | None]:
    """Per setting and overall, does the lowest-error method beat the second lowest beyond the interval?

    ``rows``: result rows of one panel (columns method_label or method, setting, seed, status, error,
    n_samples). Per setting, methods are ranked by mean error over their ok seeds; with >= 2 seeds both
    ran on, the difference is paired by seed (one seed = one stream, the same for every method); else the
    two binomial half-widths are combined as sqrt(h1^2 + h2^2). Overall, the two methods with the lowest mean
    error over the settings every method ran are compared by a Wilcoxon signed-rank test over settings.
    """
    ok = _per_setting(rows)
    if ok.height == 0:
        return [], None
    has_seed = "seed" in ok.columns
    verdicts = []
    for setting in ok["setting"].unique(maintain_order=True).to_list():
        sub = ok.filter(pl.col("setting") == setting)
        means = sub.group_by("m").agg(pl.col("error").mean().alias("e"), pl.col("n_samples").sum().alias("n"))
        means = means.sort(["e", "m"])
        if means.height < 2:
            continue
        (b, be, bn), (r, re_, rn) = means.head(2).select("m", "e", "n").rows()
        diff = re_ - be
        basis, hw = "binomial", None
        if has_seed:
            pb = dict(sub.filter(pl.col("m") == b).select("seed", "error").rows())
            pr = dict(sub.filter(pl.col("m") == r).select("seed", "error").rows())
            common = sorted(set(pb) & set(pr))
            if len(common) >= 2:
                basis = "paired seeds"
                diff, hw = t_interval([pr[s] - pb[s] for s in common])
        if basis == "binomial":
            hb, hr = binomial_halfwidth(be, bn), binomial_halfwidth(re_, rn)
            hw = math.sqrt(hb**2 + hr**2) if hb is not None and hr is not None else None
        beats = hw is not None and diff - hw > 0
        verdicts.append(SettingVerdict(setting, b, r, be, re_, diff, hw, basis, beats))
    return verdicts, _overall(ok, alpha)


def _overall(ok: pl.DataFrame, alpha: float) -> OverallVerdict | None:
    table = ok.group_by("m", "setting").agg(pl.col("error").mean())
    methods = table["m"].unique().to_list()
    if len(methods) < 2:
        return None
    have: dict[str, set[str]] = {}
    for m, setting in table.select("m", "setting").rows():
        have.setdefault(m, set()).add(setting)
    methods, settings = complete_block(have)
    if len(methods) < 2 or not settings:
        return None
    wide = table.filter(pl.col("m").is_in(methods) & pl.col("setting").is_in(settings)).pivot(
        on="m", index="setting", values="error")
    means = sorted(((wide[m].mean(), m) for m in methods), key=lambda t: (t[0], t[1]))
    (bm, b), (rm, r) = means[0], means[1]
    d = (wide[r] - wide[b]).to_list()
    nonzero = [x for x in d if x != 0]
    stat = p = min_p = None
    if len(nonzero) >= 1:
        # the exact null distribution's smallest two-sided p-value: every difference on one side
        min_p = min(1.0, 2 * 0.5 ** len(nonzero))
    if len(nonzero) >= 2:
        res = stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided")
        stat, p = float(res.statistic), float(res.pvalue)
    beats = p is not None and p < alpha and rm > bm
    left_out = tuple(sorted(set(have) - set(methods)))
    return OverallVerdict(b, r, bm, rm, wide.height, sum(x > 0 for x in d), stat, p, min_p, beats, alpha, left_out)


def verdict_markdown(verdicts: list[SettingVerdict], overall: OverallVerdict | None, caption: str = "") -> str:
    """The paired comparison as Markdown: one row per setting, then the overall Wilcoxon line."""
    lines = [f"**{caption}**", ""] if caption else []
    lines += ["| setting | best | runner-up | difference (points) | 95 % interval | basis | best beats runner-up? |",
              "|---|---|---|---:|---:|---|---|"]
    for v in verdicts:
        hw = "—" if v.halfwidth is None else f"± {v.halfwidth:.2f}"
        answer = "yes" if v.beats else "no (within the interval)"
        lines.append(f"| {v.setting} | {v.best} ({v.best_error:.2f}) | {v.runner_up} ({v.runner_up_error:.2f}) | "
                     f"{v.diff:.2f} | {hw} | {v.basis} | {answer} |")
    lines.append("")
    lines.append(overall_line(overall))
    lines += ["", "Difference = runner-up's error - best's error. paired seeds: 95 % t-interval of the per-seed "
              "differences (each seed is one stream, the same for both methods); binomial: one seed, the two "
              "streams' 95 % binomial intervals combined, a lower bound since stream images are correlated."]
    return "\n".join(lines) + "\n"


def overall_line(o: OverallVerdict | None) -> str:
    """One sentence: does the best method beat the runner-up over all settings?"""
    if o is None:
        return "Overall: fewer than two methods with results in a common setting; no comparison."
    head = (f"Overall: {o.best} (mean {o.best_mean:.2f}) vs {o.runner_up} (mean {o.runner_up_mean:.2f}) over "
            f"{o.n_settings} settings, lower in {o.wins}/{o.n_settings}; ")
    left = (f" Left out for missing or failed cells (keeping them would cost more settings than they add): "
            f"{', '.join(o.left_out)}." if o.left_out else "")
    if o.p is None:
        return head + "too few settings with a difference for a Wilcoxon signed-rank test." + left
    verdict = "beats the runner-up" if o.beats else "does not beat the runner-up"
    text = (head + f"Wilcoxon signed-rank (two-sided) W = {o.statistic:g}, p = {o.p:.3g}: {o.best} {verdict} "
            f"at alpha = {o.alpha:g}.")
    if o.min_p is not None and o.min_p >= o.alpha:
        text += f" (With {o.n_settings} settings the smallest attainable p is {o.min_p:.3g}: run more settings.)"
    text += (" Best and runner-up are chosen on the same settings they are tested on, so p is optimistic "
             "(a selection effect): confirm on other settings or seeds.")
    return text + left
