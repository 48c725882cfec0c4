"""analysis/stats.py: intervals against scipy's own, and the best-vs-runner-up verdicts on a real seeded sweep."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from analysis.stats import best_vs_runner_up, binomial_halfwidth, complete_block, t_interval, uncertainty
from unitta.results import load_results


def test_t_interval_matches_scipy() -> None:
    xs = [31.2, 29.8, 33.1, 30.4]
    mean, hw = t_interval(xs)
    lo, hi = stats.t.interval(0.95, df=len(xs) - 1, loc=sum(xs) / len(xs), scale=stats.sem(xs))
    assert mean == pytest.approx((lo + hi) / 2) and hw == pytest.approx((hi - lo) / 2)
    assert t_interval([5.0]) == (5.0, None)


def test_binomial_halfwidth_and_uncertainty_basis() -> None:
    assert binomial_halfwidth(50.0, 100) == pytest.approx(1.959964 * 5.0, rel=1e-5)  # sqrt(.25/100) = 5 points
    assert binomial_halfwidth(0.0, 300) > 0  # a perfect score still has an interval (rule of three)
    assert uncertainty([40.0], [1000])[1] == "binomial"
    hw, basis = uncertainty([40.0, 42.0, 41.0], [1000, 1000, 1000])
    assert basis == "seeds" and hw == pytest.approx(t_interval([40.0, 42.0, 41.0])[1])


def test_complete_block_prefers_most_cells() -> None:
    s4 = {"a", "b", "c", "d"}
    # one method lacks 3 settings: dropping it keeps 4 settings x 3 methods = 12 cells > 4 x 1 = 4
    methods, settings = complete_block({"x": s4, "y": s4, "z": s4, "w": {"a"}})
    assert methods == ["x", "y", "z"] and settings == sorted(s4)
    # one method of 5 lacks 1 setting of 4: 4 methods x 4 settings = 16 cells beat 5 x 3 = 15
    five = {"p": s4, "q": s4, "r": s4, "s": s4, "t": s4 - {"d"}}
    assert complete_block(five) == (["p", "q", "r", "s"], sorted(s4))
    # with two more such methods, 7 x 3 = 21 cells beat 4 x 4 = 16
    assert complete_block({**five, "u": s4 - {"d"}, "v": s4 - {"d"}}) == (sorted("pqrstuv"), ["a", "b", "c"])


def test_best_vs_runner_up_on_a_seeded_sweep(seeded_dir: Path) -> None:
    rows = load_results(seeded_dir).with_columns(pl.col("method").alias("method_label"))
    verdicts, overall = best_vs_runner_up(rows)
    assert {v.setting for v in verdicts} == set(rows["setting"].unique().to_list())
    for v in verdicts:
        sub = rows.filter(pl.col("setting") == v.setting)
        means = sub.group_by("method").agg(pl.col("error").mean()).sort(["error", "method"])  # ties (nu11: tent = bn) broken by name, as the analysis does
        assert [v.best, v.runner_up] == means["method"].head(2).to_list()
        # paired over the 2 seeds: the t-interval of the per-seed differences, by hand
        by_seed = {m: dict(sub.filter(pl.col("method") == m).select("seed", "error").rows())
                   for m in (v.best, v.runner_up)}
        d = [by_seed[v.runner_up][s] - by_seed[v.best][s] for s in sorted(by_seed[v.best])]
        assert v.basis == "paired seeds"
        assert v.diff == pytest.approx(sum(d) / 2)
        assert v.halfwidth == pytest.approx(stats.t.ppf(0.975, 1) * stats.sem(d))
        assert v.beats == (v.diff - v.halfwidth > 0)
    means = rows.group_by("method").agg(pl.col("error").mean()).sort("error")["method"].to_list()
    assert (overall.best, overall.runner_up) == tuple(means[:2])
    wide = rows.group_by("method", "setting").agg(pl.col("error").mean())
    d = [wide.filter((pl.col("method") == overall.runner_up) & (pl.col("setting") == s))["error"][0]
         - wide.filter((pl.col("method") == overall.best) & (pl.col("setting") == s))["error"][0]
         for s in sorted(rows["setting"].unique().to_list())]
    assert overall.p == pytest.approx(stats.wilcoxon(d).pvalue)
    nonzero = sum(x != 0 for x in d)  # bn and tent can tie on such short streams
    assert overall.min_p == pytest.approx(2 * 0.5**nonzero) and not overall.beats  # 3 settings never reach p < 0.05


def test_overall_line_names_methods_left_out_and_the_selection(seeded_dir: Path) -> None:
    from analysis.stats import overall_line

    rows = load_results(seeded_dir)
    # bn loses two of its three settings (missing cells): keeping it would leave 1 setting, so it is left out
    holes = rows.filter(~((pl.col("method") == "bn") & pl.col("setting").is_in(["n111", "nu11"])))
    _, overall = best_vs_runner_up(holes)
    assert overall.left_out == ("bn",) and overall.n_settings == 3
    line = overall_line(overall)
    assert "Left out for missing or failed cells (keeping them would cost more settings than they add): bn." in line
    assert "chosen on the same settings they are tested on" in line
    _, full = best_vs_runner_up(rows)
    assert full.left_out == () and "Left out" not in overall_line(full)
