"""A resumed Optuna search continues its sequence: the trials done are replayed into the fresh searcher
(unitta/search/replay.py), so stopping and resuming gives the trials of an uninterrupted run with the same seed.
In-process (--local), real cells: the test method on 200-image exact streams."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from unitta.results import load_results
from unitta.run import RunOptions
from unitta.search.replay import DoneTrial, replay
from unitta.tune import run_tune
from unitta.tune.config import parse_tune_config

CELL = {"dataset": "fmnist-c", "setting": "nunu", "sampler": "exact", "length": 200, "n_per_domain": 20,
        "factors": {"domain_beta": 5.0}, "batch_size": 100}


def _cfg(num_samples: int, low: float = 0.5):
    # beta = 5 over 15 domains: alpha_1 >= 0.8133 is feasible (Cor. 1), so some points are infeasible trials
    return parse_tune_config({
        "name": "resumed", "cell": CELL, "methods": ["test"],
        "space": {"domain_alpha": {"low": low, "high": 0.99}},
        "search": {"algorithm": "optuna", "num_samples": num_samples, "seed": 0, "max_concurrent": 1}})


def _points(rows: pl.DataFrame) -> list[float]:
    return sorted(rows["param_domain_alpha"].to_list())


def _tune(cfg, out: Path) -> pl.DataFrame:
    return run_tune(cfg, out, opts=RunOptions(local=True, progress=False))


def test_stopped_and_resumed_equals_uninterrupted(tmp_path: Path, capsys) -> None:
    whole = _points(_tune(_cfg(5), tmp_path / "whole"))
    assert len(set(whole)) == 5
    _tune(_cfg(2), tmp_path / "parts")  # what a run stopped after 2 trials leaves on disk
    resumed = _tune(_cfg(5), tmp_path / "parts")  # raising num_samples continues the same sequence
    assert _points(resumed) == whole
    assert load_results(tmp_path / "parts", sweep="resumed").height == 5
    assert _points(_tune(_cfg(5), tmp_path / "parts")) == whole  # nothing more to run


def test_trials_outside_a_narrowed_space_are_left_out(tmp_path: Path, caplog) -> None:
    first = _tune(_cfg(4), tmp_path)
    outside = first.filter(pl.col("param_domain_alpha") < 0.8).height
    assert 0 < outside < 4
    caplog.clear()
    rows = _tune(_cfg(4, low=0.8), tmp_path)
    members = load_results(tmp_path, sweep="resumed")
    assert (members["param_domain_alpha"] >= 0.8).all()  # the run's record holds today's space only
    assert members.height == 4 and rows.filter(pl.col("param_domain_alpha") >= 0.8).height == 4


def test_replay_keeps_the_executors_order_of_asks_and_tells() -> None:
    """Two trials open at a time: the run asked 1, 2, told 1, asked 3, told 2; the replay does the same."""
    events: list[str] = []
    points = iter([{"x": 1.0}, {"x": 2.0}, {"x": 3.0}])

    def ask():
        p = next(points)
        events.append(f"ask {p['x']:g}")
        return p, f"h{p['x']:g}"

    done = [DoneTrial({"x": 1.0}, 0.5, finished="t1"), DoneTrial({"x": 2.0}, 0.4, finished="t2")]
    result = replay(done, ask, lambda h, v: events.append(f"tell {h}"), key=lambda p: str(p["x"]), window=2)
    assert events == ["ask 1", "ask 2", "tell h1", "ask 3", "tell h2"]
    assert result.prefetched == ({"x": 3.0}, "h3") and not result.unmatched and len(result.replayed) == 2


@pytest.mark.parametrize("window", [1, 3])
def test_replay_hands_back_trials_it_does_not_meet(window: int) -> None:
    done = [DoneTrial({"x": 9.0}, 0.1)]
    result = replay(done, lambda: ({"x": 1.0}, "h"), lambda h, v: None, key=lambda p: str(p["x"]), window=window)
    assert result.unmatched == done and result.prefetched == ({"x": 1.0}, "h")


def test_a_failed_trial_is_asked_again_and_run_again() -> None:
    """A trial whose cell failed (not an infeasible point) is reopened: resuming retries it, as a sweep does."""
    told: list[str] = []
    points = iter([{"x": 1.0}, {"x": 2.0}, {"x": 3.0}])

    def ask():
        p = next(points)
        return p, f"h{p['x']:g}"

    done = [DoneTrial({"x": 1.0}, float("nan"), finished="t1"), DoneTrial({"x": 2.0}, 0.4, finished="t2")]
    result = replay(done, ask, lambda h, v: told.append(h), key=lambda p: str(p["x"]),
                    reopen=lambda t: t.value != t.value)
    assert result.reopened == [({"x": 1.0}, "h1")] and told == ["h2"]
    assert result.prefetched is None and not result.unmatched  # the next point is asked as the run goes on
