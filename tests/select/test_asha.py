"""Early stopping with Ray Tune's ASHA: the arbiter's decisions, and a --local selection whose validation trials
report along the stream (stopped trials are recorded as 'stopped', never chosen, and their batches counted)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from unitta.results import load_results
from unitta.run import RunOptions
from unitta.select import parse_select_config, run_select
from unitta.select.asha import AshaArbiter, AshaHook, first_rung

CELL = {"dataset": "fmnist-c", "n_per_domain": 20, "S": 2, "batch_size": 4}


def test_first_rung_gives_three_rungs_and_skips_the_first_batch() -> None:
    assert first_rung(27, 3) == 2 and first_rung(270, 3) == 10 and first_rung(5, 3) == 1


def test_arbiter_stops_the_worse_trials_at_each_rung() -> None:
    """27 trials, error = their index at every report: ASHA (rf 3) keeps the best third at each rung."""
    arbiter = AshaArbiter(3.0)
    arbiter.add_group("g", max_t=27, grace=1)
    reached = {}
    for trial in range(27):
        batches = 0
        for batches in range(1, 27):
            if arbiter.decide("g", str(trial), batches, float(trial)):
                break
        else:
            arbiter.complete("g", str(trial), 27, float(trial))
            batches = 27
        reached[trial] = batches
    assert reached[0] == 27  # the best trial is never stopped
    assert sum(reached.values()) <= 27 * 27 / 3  # at most a third of running every trial to the end
    assert all(reached[t] <= reached[s] for s, t in zip(range(26), range(1, 27)) if t > 2)  # worse stops sooner


def _stopped_by_tied_errors(nll_of) -> int:
    """27 trials whose error is the same 50 % at every report (ASHA via the hook, as a cell calls it)."""
    arbiter = AshaArbiter(3.0)
    arbiter.add_group("g", max_t=27, grace=1)
    stopped = 0
    for trial in range(27):
        hook = AshaHook(arbiter, "g", str(trial))
        stopped += any(hook(batches, {"error": 50.0, "nll": nll_of(trial)}) for batches in range(1, 27))
    return stopped


def test_tied_errors_are_broken_by_the_nll() -> None:
    """Without a tie-break ASHA stops no trial of a tie (none is strictly worse than the cutoff); the NLL so far
    ranks them, so about two thirds stop at the first rung, as with distinct errors."""
    assert _stopped_by_tied_errors(lambda trial: float("nan")) == 0
    assert _stopped_by_tied_errors(lambda trial: 0.5 + trial / 27) >= 27 // 2


def test_asha_selection_records_stopped_trials_and_never_chooses_them(tmp_path: Path) -> None:
    cfg = parse_select_config({
        "name": "asha_tiny", "cell": CELL, "methods": ["tent"],
        "space": {"tent": {"lr": {"low": 1e-5, "high": 0.1, "log": True, "num": 9}}},
        "search": {"scheduler": "asha"}, "protocols": ["default", "holdout"],
    })
    outcome, sel = run_select(cfg, tmp_path, RunOptions(local=True, progress=False))
    rows = load_results(tmp_path)
    validation = rows.filter(pl.col("corruptions").is_not_null())
    stopped = validation.filter(pl.col("status") == "stopped")
    assert validation.height == 9 and stopped.height >= 1
    assert stopped["error"].null_count() == stopped.height and (stopped["stopped_at_batch"] >= 1).all()
    holdout = sel.filter(pl.col("protocol") == "holdout").row(0, named=True)
    chosen_validation = validation.filter(pl.col("status") == "ok").sort("error")
    assert holdout["selection_score"] == pytest.approx(chosen_validation["error"][0])
    full = validation["n_samples"].drop_nulls()[0] // 4
    assert holdout["trials"] == 9 and holdout["batches_spent"] < 9 * full
    assert holdout["test_error"] is not None and outcome.n_failed == 0
    # resume: stopped trials are not run again (they were decided), nothing reruns
    again, sel2 = run_select(cfg, tmp_path, RunOptions(local=True, progress=False))
    assert again.n_skipped == again.n_cells and sel2["chosen"].to_list() == sel["chosen"].to_list()
