"""Early stopping of validation trials with Ray Tune's ASHA (``AsyncHyperBandScheduler``; Li et al., "A System for
Massively Parallel Hyperparameter Tuning", MLSys'20), driven through its scheduler interface.

Every validation cell of a selection with ``search.scheduler: asha`` reports its error so far every
``report_every`` batches (``unitta.evaluate.adapt.Report``); the *arbiter* keeps one scheduler per (setting, seed,
method) and answers each report with continue or stop (the cell then ends with a 'stopped' row,
``unitta.evaluate.run_cell``). On Ray the arbiter is an actor every task asks; with ``--local`` it is an
object in the driver. A resumed selection replays the reports of the trials already run (their rows'
``report_values``), so the rungs hold what they held before.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

__all__ = ["AshaArbiter", "AshaHook", "asha_score", "first_rung", "milestones"]

_TIME, _METRIC = "batches", "error"
TIE_BREAK = 1e-5  # points of error per nat of NLL: far below one image's share of any stream's error


def asha_score(error: float, nll: float | None) -> float:
    """What ASHA ranks validation trials by: the error so far (%), ties broken by the NLL so far (nats).

    Points whose first batches give the same predictions (RoTTA's or SAR's learning rates hardly change the
    first rung's predictions) tie on the error, and ASHA never stops a trial that is not strictly worse than
    its rung's cutoff: without the tie-break none of them is stopped."""
    if nll is None or not math.isfinite(nll):
        return float(error) + TIE_BREAK * 1e3
    return float(error) + TIE_BREAK * min(float(nll), 1e3)


def _score(values: dict[str, float]) -> float:
    return asha_score(values[_METRIC], values.get("nll"))


def first_rung(max_t: int, reduction_factor: float, rungs: int = 3) -> int:
    """ASHA's grace period: the stream's batches / rf^rungs, so that there are ``rungs`` rungs; at least 2 where
    the stream is long enough (the first batch is scored before most methods adapt on it: every point ties)."""
    return max(2 if max_t >= 2 * reduction_factor else 1, int(math.floor(max_t / reduction_factor**rungs)))


def milestones(max_t: int, grace: int, reduction_factor: float) -> tuple[int, ...]:
    """ASHA's rungs (grace x rf^k below max_t), rounded up to whole report intervals: the only reports at which
    the scheduler can decide anything, so the only ones a cell asks about."""
    out, t = [], float(grace)
    while t < max_t:
        out.append(int(math.ceil(t / grace) * grace))
        t *= reduction_factor
    return tuple(out)


class AshaArbiter:
    """One ``AsyncHyperBandScheduler`` per group (stopping on the validation error, lower is better)."""

    def __init__(self, reduction_factor: float) -> None:
        self.rf = reduction_factor
        self.schedulers: dict[str, Any] = {}
        self.trials: dict[str, set[str]] = {}
        self.stopped = 0

    def add_group(self, group: str, max_t: int, grace: int) -> None:
        from ray.tune.schedulers import AsyncHyperBandScheduler

        if group in self.schedulers:
            return
        self.schedulers[group] = AsyncHyperBandScheduler(
            time_attr=_TIME, metric=_METRIC, mode="min", max_t=max(max_t, grace), grace_period=grace,
            reduction_factor=self.rf, brackets=1, stop_last_trials=False,
        )
        self.trials[group] = set()

    def _trial(self, group: str, trial: str) -> SimpleNamespace:
        handle = SimpleNamespace(trial_id=trial)  # the scheduler reads only trial_id
        if trial not in self.trials[group]:
            self.trials[group].add(trial)
            self.schedulers[group].on_trial_add(None, handle)
        return handle

    def decide(self, group: str, trial: str, batches: int, score: float) -> bool:
        """Whether the trial stops now, given its ``asha_score`` after ``batches`` batches."""
        from ray.tune.schedulers import TrialScheduler

        result = {_TIME: batches, _METRIC: score}
        action = self.schedulers[group].on_trial_result(None, self._trial(group, trial), result)
        stop = action == TrialScheduler.STOP
        self.stopped += int(stop)
        return stop

    def complete(self, group: str, trial: str, batches: int, score: float) -> None:
        """A trial ran to the end of its stream with this ``asha_score``."""
        handle = self._trial(group, trial)
        self.schedulers[group].on_trial_complete(None, handle, {_TIME: batches, _METRIC: score})

    def replay(self, group: str, trial: str, reports_json: str | None, final: tuple[int, float] | None) -> None:
        """Feed a trial already run (its rows' ``report_values``, and its end if it completed) to the scheduler."""
        for batches, values in json.loads(reports_json) if reports_json else []:
            self.decide(group, trial, int(batches), _score(values))
        if final is not None:
            self.complete(group, trial, *final)


@dataclass
class AshaHook:
    """A validation cell's report hook (picklable): asks the arbiter, an object here or a Ray actor's handle."""

    arbiter: Any
    group: str
    trial: str
    milestones: tuple[int, ...] | None = None  # None: ask at every report

    def __call__(self, batches: int, values: dict[str, float]) -> bool:
        if self.milestones is not None and batches not in self.milestones:
            return False  # between rungs the scheduler only says continue: no round trip to the actor
        decide = self.arbiter.decide
        if hasattr(decide, "remote"):
            import ray

            return bool(ray.get(decide.remote(self.group, self.trial, batches, _score(values))))
        return decide(self.group, self.trial, batches, _score(values))
