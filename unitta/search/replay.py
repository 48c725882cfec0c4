"""Resuming a seeded search: replay the trials already done into a fresh searcher, then continue.

A seeded searcher (Optuna's TPE) is deterministic given what it was told and in which order. A resumed search
therefore asks the fresh searcher for its points again, in the same order, and tells it each done trial's
outcome (read from the rows of its cells) instead of running it: the searcher ends in the state an
uninterrupted run had, and the next point it suggests is the one that run would have run next (docs/analysis.md,
first section). Killing a search and resuming it gives the same set of trials as running it through; raising
``num_samples`` continues the sequence. A point suggested again is answered again from the same rows, as the
planner answers it in a run (``unitta.search.planner``).

The order of asks and tells is that of the executor (``unitta.run``): up to ``window`` trials open at a time,
each told when it finishes (the recorded ``finished_at`` order), a trial whose cells were not run (an
infeasible point) told at once. This is exact for a sequential search (``max_concurrent: 1``) and for
Optuna's random start-up trials; a concurrent search's later points depend on which trial finished first,
and done trials the replay does not meet again are handed over as evaluated points (a warm start).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from unitta.search.distributions import point_key

__all__ = ["DoneTrial", "Replay", "done_trials", "replay"]


@dataclass
class DoneTrial:
    """A trial of an earlier run: its point (as its rows record it), objective (NaN: failed, stopped or not run),
    whether it was told at once (not run: an infeasible point), when its last cell finished, its cells, and
    whether every cell's row stands (else it is run again)."""

    point: dict[str, Any]
    value: float
    immediate: bool = False
    finished: str = ""
    cells: list[Any] = field(default_factory=list)
    complete: bool = True


@dataclass
class Replay:
    """What a replay did: asks told from done trials (a point asked twice is there twice), done trials it did not
    meet (to be added as evaluated points), the first new point the searcher suggested (point, handle), to be run
    before asking again, and done trials asked again to be run again."""

    replayed: list[DoneTrial]
    unmatched: list[DoneTrial]
    prefetched: tuple[dict[str, Any], str] | None = None
    reopened: list[tuple[dict[str, Any], str]] = field(default_factory=list)


def done_trials(rows: Iterable[dict[str, Any]], space: Any) -> list[DoneTrial]:
    """The trials of ``space`` (a ``unitta.search.planner.TrialSpace``) among result ``rows`` (any status): every
    point some row records (``space.point_of``) whose cells all have a row."""
    by_cell = {row["cell_id"]: row for row in rows}
    points: dict[str, dict[str, Any]] = {}
    for row in by_cell.values():
        point = space.point_of(row)
        if point is not None:
            points.setdefault(point_key(point), point)
    trials = []
    for point in points.values():
        cells = space.trial_cells(point)
        found = [r for c in cells if (r := by_cell.get(c.cell_id())) is not None]
        if len(found) < len(cells):
            continue  # a trial a kill interrupted: its point is asked again and its missing cells run
        immediate = bool(space.not_run(point, cells))
        complete = all(space.reuses(c, r) for c, r in zip(cells, found))
        value = space.objective(found) if complete and not immediate else math.nan
        finished = max(str(r.get("finished_at") or "") for r in found)
        trials.append(DoneTrial(point, value, immediate, finished, cells, complete))
    return trials


def replay(trials: list[DoneTrial], ask: Callable[[], tuple[dict[str, Any], str]],
           tell: Callable[[str, float], None], key: Callable[[dict[str, Any]], str] = point_key, window: int = 1,
           reopen: Callable[[DoneTrial], bool] | None = None, limit: int | None = None) -> Replay:
    """Ask the searcher for points as the earlier run did and tell each the done trial's value.

    ask(): the searcher's next (point, handle); tell(handle, value): a NaN value is a failed trial. key: a
    point's identity (``point_key``). reopen(trial): a done trial to run again (a failed cell: resuming
    retries it); it is asked, not told, and returned in ``reopened`` (a sampler such as TPE ignores failed and
    running trials alike, so the sequence stays the same). Stops at the first suggested point no done trial
    has (returned as ``prefetched``), when every done trial has been met and told, or after ``limit`` asks (the
    search's ``num_samples``: a small space keeps suggesting points already met).
    """
    by_key = {key(t.point): t for t in trials}
    met: set[str] = set()
    open_: list[tuple[str, DoneTrial]] = []
    replayed: list[DoneTrial] = []
    reopened: list[tuple[dict[str, Any], str]] = []
    prefetched = None
    asked = 0
    while prefetched is None:
        while len(open_) < max(1, window) and (len(met) < len(by_key) or open_) and prefetched is None:
            if limit is not None and asked >= limit:
                break
            asked += 1
            point, handle = ask()
            trial = by_key.get(key(point))
            if trial is None:
                prefetched = (point, handle)
                continue
            met.add(key(point))
            if reopen is not None and reopen(trial):
                reopened.append((point, handle))
            elif trial.immediate:
                tell(handle, trial.value)
                replayed.append(trial)
            else:
                open_.append((handle, trial))
        if not open_ or (limit is not None and asked >= limit):
            break
        first = min(open_, key=lambda o: o[1].finished)
        open_.remove(first)
        tell(first[0], first[1].value)
        replayed.append(first[1])
    for handle, trial in sorted(open_, key=lambda o: o[1].finished):
        tell(handle, trial.value)
        replayed.append(trial)
    return Replay(replayed, [t for k, t in by_key.items() if k not in met], prefetched, reopened)
