"""Resuming a sequential search: replay the trials already done into a fresh searcher, then continue.

A seeded searcher (Optuna's TPE) is deterministic given what it was told and in which order. A resumed search
therefore asks the fresh searcher for its points again, in the same order, and tells it each done trial's
recorded outcome instead of running it: the searcher ends in the state an uninterrupted run had, and the next
point it suggests is the one that run would have run next (docs/analysis.md, "Resume"). Killing a search and
resuming it gives the same set of trials as running it through; raising ``num_samples`` continues the sequence.

The order of asks and tells is that of the executor (``unitta.run``): up to ``window`` trials open at a time,
each told when it finishes (the recorded ``finished_at`` order), a trial whose cells were not run (an
infeasible point) told at once. This is exact for a sequential search (``max_concurrent: 1``) and for
Optuna's random start-up trials; a concurrent search's later points depend on which trial finished first,
and done trials the replay does not meet again are handed over as evaluated points (a warm start).

The functions take the searcher as two callables, so that any planner over a seeded searcher (tune's Optuna
search, a selection protocol built on it) can reuse them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DoneTrial", "Replay", "done_trials", "point_key", "replay"]


@dataclass
class DoneTrial:
    """A trial of an earlier run: its point (as its rows record it), objective (NaN: failed or infeasible),
    whether it was told at once (infeasible: nothing ran), when its last cell finished, its cells."""

    point: dict[str, Any]
    value: float
    immediate: bool = False
    finished: str = ""
    cell_ids: list[str] = field(default_factory=list)


@dataclass
class Replay:
    """What a replay did: trials told in sequence, trials it did not meet (to be added as evaluated points),
    and the first new point the searcher suggested (point, handle), to be run before asking again."""

    replayed: list[DoneTrial]
    unmatched: list[DoneTrial]
    prefetched: tuple[dict[str, Any], str] | None = None
    reopened: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # asked again, to be run again


def point_key(point: dict[str, Any], names: Iterable[str]) -> str:
    """A text key of ``point``'s values of ``names``, equal for a suggested point and the rows it produced."""
    def norm(v: Any) -> Any:
        return float(f"{float(v):.12g}") if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    return json.dumps({n: norm(point.get(n)) for n in sorted(names)}, sort_keys=True)


def done_trials(rows: Iterable[dict[str, Any]], names: list[str]) -> list[DoneTrial]:
    """The trials of result ``rows`` (one tune run's rows, any status), grouped by ``trial_id``."""
    trials: dict[str, DoneTrial] = {}
    for row in rows:
        tid = row.get("trial_id")
        if tid is None:
            continue
        value = row.get("tune_objective_value")
        value = float("nan") if value is None else float(value)
        finished = str(row.get("finished_at") or "")
        if tid not in trials:
            point = {n: row.get(f"param_{n}") for n in names}
            trials[tid] = DoneTrial(point, value, row.get("tune_feasible") is False, finished)
        trial = trials[tid]
        trial.finished = max(trial.finished, finished)
        trial.cell_ids.append(row["cell_id"])
    return list(trials.values())


def replay(trials: list[DoneTrial], ask: Callable[[], tuple[dict[str, Any], str]],
           tell: Callable[[str, float], None], key: Callable[[dict[str, Any]], str], window: int = 1,
           reopen: Callable[[DoneTrial], bool] | None = None) -> Replay:
    """Ask the searcher for points as the earlier run did and tell each the done trial's value.

    ask(): the searcher's next (point, handle); tell(handle, value): a NaN value is a failed trial. key: a
    point's identity (``point_key``). reopen(trial): a done trial to run again (a failed cell: resuming
    retries it); it is asked, not told, and returned in ``reopened`` (a sampler such as TPE ignores failed and
    running trials alike, so the sequence stays the same). Stops at the first suggested point no done trial
    has (returned as ``prefetched``) or when every done trial has been told.
    """
    pending = {key(t.point): t for t in trials}
    open_: list[tuple[str, DoneTrial]] = []
    replayed: list[DoneTrial] = []
    reopened: list[tuple[dict[str, Any], str]] = []
    prefetched = None
    while prefetched is None:
        while len(open_) < max(1, window) and (pending or open_) and prefetched is None:
            point, handle = ask()
            trial = pending.pop(key(point), None)
            if trial is None:
                prefetched = (point, handle)
            elif reopen is not None and reopen(trial):
                reopened.append((point, handle))
            elif trial.immediate:
                tell(handle, trial.value)
                replayed.append(trial)
            else:
                open_.append((handle, trial))
        if not open_:
            break
        first = min(open_, key=lambda o: o[1].finished)
        open_.remove(first)
        tell(first[0], first[1].value)
        replayed.append(first[1])
    for handle, trial in sorted(open_, key=lambda o: o[1].finished):
        tell(handle, trial.value)
        replayed.append(trial)
    return Replay(replayed, list(pending.values()), prefetched, reopened)

