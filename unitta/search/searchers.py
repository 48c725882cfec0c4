"""Where a search's points come from: a grid, or Ray Tune's Optuna searcher (the one Optuna driver).

Both answer ``ask()`` with the next (point, handle), or None when they have no more to offer, and take the
trial's objective with ``tell(handle, value)`` (NaN: the trial failed, was stopped or could not run).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from unitta.search.distributions import inside, point_key
from unitta.search.replay import DoneTrial, replay

__all__ = ["GridSearcher", "OptunaSearcher"]

_log = logging.getLogger("unitta.search")

_METRIC = "objective"


class GridSearcher:
    """Every point of a list, in order; the planner knows them all before it runs (``points``)."""

    def __init__(self, points: list[dict[str, Any]]) -> None:
        self.points = list(points)
        self._next = 0

    def ask(self) -> tuple[dict[str, Any], None] | None:
        if self._next >= len(self.points):
            return None
        self._next += 1
        return self.points[self._next - 1], None

    def tell(self, handle: Any, value: float) -> None:
        pass

    def left(self) -> int:
        """Points still to be asked whose cells the planner does not know yet (a grid's are all known)."""
        return 0


class OptunaSearcher:
    """Ray Tune's Optuna searcher (``ray.tune.search.optuna.OptunaSearch``: TPE seeded by ``seed``) driven through
    its suggest / on_trial_complete interface, for ``num_samples`` points.

    distributions: the searcher's space (``unitta.search.distributions.distribution``); mode: 'min' or 'max'.
    to_point / from_point: a searcher's point as a trial's point and back (None: outside the searcher's space),
    for a space the searcher samples in other coordinates (tune's ``search.feasible_only``).
    """

    def __init__(self, distributions: dict[str, Any], mode: str, seed: int, num_samples: int, *, name: str = "trial",
                 to_point: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 from_point: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None) -> None:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.distributions = distributions
        self.searcher = OptunaSearch(space=distributions, metric=_METRIC, mode=mode,
                                     sampler=optuna.samplers.TPESampler(seed=seed))
        self.name, self.num_samples = name, num_samples
        self.to_point = to_point or (lambda p: p)
        self.from_point = from_point or (lambda p: p)
        self.asked = 0
        self.budget = num_samples  # asks left to the run
        self.queued: list[tuple[dict[str, Any], str]] = []  # asked by the replay, to be run first

    def _suggest(self) -> tuple[dict[str, Any], str]:
        self.asked += 1
        handle = f"{self.name}_{self.asked:05d}"
        suggested = self.searcher.suggest(handle)
        assert suggested is not None, "the searcher suggested no point"
        return self.to_point(dict(suggested)), handle

    def ask(self) -> tuple[dict[str, Any], str] | None:
        if self.budget <= 0:
            return None
        self.budget -= 1
        return self.queued.pop(0) if self.queued else self._suggest()

    def tell(self, handle: str, value: float) -> None:
        if math.isfinite(value):
            self.searcher.on_trial_complete(handle, result={_METRIC: value})
        else:  # failed, stopped or not run: the searcher records it as failed
            self.searcher.on_trial_complete(handle, error=True)

    def left(self) -> int:
        return self.budget

    def searcher_point(self, point: dict[str, Any]) -> dict[str, Any] | None:
        """A done trial's point as the searcher's space has it, None if it lies outside that space."""
        if any(v is None for v in point.values()):
            return None
        mapped = self.from_point(point)
        return mapped if mapped is not None and inside(mapped, self.distributions) else None

    def resume(self, done: list[DoneTrial], window: int) -> tuple[list[DoneTrial], list[DoneTrial]]:
        """Replay the done trials (``unitta.search.replay``): (the done trials that are part of this search, those
        outside today's space). A trial with a cell to run again is asked again and queued, as is the first new
        point; trials the replay did not meet are handed over as evaluated points."""
        kept = [t for t in done if self.searcher_point(t.point) is not None]
        result = replay(kept, self._suggest, self.tell, point_key, window,
                        reopen=lambda t: not t.immediate and not t.complete, limit=self.num_samples)
        for t in result.unmatched:  # met out of order (a concurrent run): a warm start
            value = t.value if math.isfinite(t.value) else 0.0
            point = self.searcher_point(t.point)
            assert point is not None  # kept: inside the space
            self.searcher.add_evaluated_point(point, value, error=not math.isfinite(t.value))
        self.queued = [*result.reopened, *([result.prefetched] if result.prefetched else [])]
        self.budget = max(0, self.num_samples - len(result.replayed) - len(result.unmatched))
        _log.info("optuna (Ray Tune searcher): %d points in total, %d answered from earlier rows, %d to ask",
                 self.num_samples, len(result.replayed) + len(result.unmatched), self.budget)
        outside = [t for t in done if self.searcher_point(t.point) is None]
        return kept, outside
