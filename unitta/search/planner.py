"""A search as a planner of the one executor (``unitta.run``): points -> trials -> cells -> rows -> the searcher.

A *trial* is one point of a search space and runs the cells its front end gives it (``TrialSpace``: tune's one
cell per method, select's test and validation streams). Per search the planner keeps at most ``window`` trials
open and hands the executor their cells; when a trial's cells are all back it computes the trial's objective,
releases its rows to the executor's writer (with the front end's trial columns) and tells the searcher. A
planner holds any number of searches (select: one per method, setting and seed) and cells outside any trial
(select's default and chosen cells), and records every cell of the run in its membership record.

The one rule for what is not run: a cell whose row stands already (written before this run and reusable, or
finished earlier in this run) is answered from that row. A point the searcher suggests again (a space smaller
than ``num_samples``, a resumed search) runs nothing and is told at once; a resumed grid runs only the cells
without a row; a resumed Optuna search first replays its done trials into the fresh searcher
(``unitta.search.replay``), so it continues the sequence an uninterrupted run follows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from unitta.cell import Cell
from unitta.results import STATUS_OK
from unitta.search.replay import done_trials
from unitta.search.searchers import GridSearcher, OptunaSearcher

__all__ = ["TrialSpace", "Trial", "Search", "SearchPlanner"]

class TrialSpace:
    """What a front end says about its trials; the defaults suit a trial whose rows are written as they are."""

    width = 1  # cells per trial, to size the run before the searcher's points are known

    def trial_cells(self, point: dict[str, Any]) -> list[Cell]:
        """The trial's cells (the same for the same point)."""
        raise NotImplementedError

    def not_run(self, point: dict[str, Any], cells: list[Cell]) -> dict[str, tuple[dict[str, Any], str]]:
        """Rows (and log texts) of cells that are not run, by cell id (tune: an infeasible point's)."""
        return {}

    def reuses(self, cell: Cell, row: dict[str, Any]) -> bool:
        """Whether a row written before stands for the cell (a finished cell)."""
        return row.get("status") == STATUS_OK

    def objective(self, rows: list[dict[str, Any]]) -> float:
        """The trial's objective from its cells' rows (cells order); NaN when it has none."""
        raise NotImplementedError

    def finish(self, trial: Trial, value: float) -> list[dict[str, Any]]:
        """The trial's rows to write (cells order), with any trial columns."""
        return [trial.rows[c.cell_id()] for c in trial.cells]

    def point_of(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """The point a row's trial ran (resume), None for a row of no trial of this space."""
        return None

    def accept(self, point: dict[str, Any], cells: list[Cell]) -> None:
        """The point became part of the run (asked, replayed, or a grid's)."""


class Trial:
    """One point: its cells, the rows back so far (reused, not run, or run) and which of them to write."""

    def __init__(self, search: Search, point: dict[str, Any], handle: Any, cells: list[Cell]) -> None:
        self.search, self.point, self.handle, self.cells = search, point, handle, cells
        self.rows: dict[str, dict[str, Any]] = {}
        self.texts: dict[str, str] = {}  # rows to write, with their log text

    def pending(self) -> list[Cell]:
        return [c for c in self.cells if c.cell_id() not in self.rows]


class Search:
    """One searcher over one trial space, at most ``window`` trials open at a time."""

    def __init__(self, space: TrialSpace, searcher: GridSearcher | OptunaSearcher, window: int, key: str = "") -> None:
        self.space, self.searcher, self.window, self.key = space, searcher, max(1, window), key
        self.open: list[Trial] = []
        self.exhausted = False
        self.closed = False  # finished, and the planner's ``search_done`` has run

    def finished(self) -> bool:
        return self.exhausted and not self.open


class SearchPlanner:
    """The executor's planner (``unitta.run.executor.Planner``) over searches; see the module docstring.

    earlier: the rows already in the output folder, by cell id, any status (resume reads failed ones too);
    cells: cells of no trial, planned first.
    """

    def __init__(self, searches: list[Search], earlier: dict[str, dict[str, Any]], cells: Iterable[Cell] = ()) -> None:
        self.searches = searches
        self.earlier = earlier
        self.rows: dict[str, dict[str, Any]] = {}  # rows that answer a cell: reused or finished in this run
        self.planned: set[str] = set()
        self.running: dict[str, list[Trial | None]] = {}  # cell id -> who waits for it (None: a cell of no trial)
        self.queue: list[Cell] = []
        self.outbox: list[tuple[dict[str, Any], str]] = []
        self.written: set[str] = set()
        self.members: list[str] | None = []  # the run's cells known before it runs; the others join as planned
        self.added_members: list[str] = []
        self.notes: list[str] = []
        self.n_skipped = 0
        self._started = False
        for cell in cells:
            self.plan_cell(cell)
        for search in searches:
            self._start(search)
        self._started = True
        self._advance()

    @property
    def n_cells(self) -> int:
        """Cells planned so far, and those the searchers' points still to come will bring (an estimate)."""
        return len(self.planned) + sum(s.searcher.left() * s.space.width for s in self.searches)

    # ------------------------------------------------------------------ cells
    def _register(self, cell: Cell, space: TrialSpace | None) -> str:
        cid = cell.cell_id()
        if cid in self.planned:
            return cid
        self.planned.add(cid)
        if self._started:
            self.added_members.append(cid)
        elif self.members is not None:
            self.members.append(cid)
        row = self.earlier.get(cid)
        if row is not None and self._reuses(space, cell, row):
            self.rows[cid] = row
            self.n_skipped += 1
        return cid

    @staticmethod
    def _reuses(space: TrialSpace | None, cell: Cell, row: dict[str, Any]) -> bool:
        return space.reuses(cell, row) if space is not None else row.get("status") == STATUS_OK

    def _wait_for(self, cell: Cell, who: Trial | None) -> None:
        cid = cell.cell_id()
        if cid not in self.running:
            self.queue.append(cell)
        self.running.setdefault(cid, []).append(who)

    def plan_cell(self, cell: Cell) -> None:
        """A cell of no trial (written when it finishes); nothing when its row stands already."""
        cid = self._register(cell, None)
        if cid not in self.rows and cid not in self.running:
            self._wait_for(cell, None)

    # ------------------------------------------------------------------ searches
    def _start(self, search: Search) -> None:
        searcher = search.searcher
        if isinstance(searcher, GridSearcher):  # a grid's cells are known now
            for point in searcher.points:
                self._accept(search, point, search.space.trial_cells(point))
            return
        kept, outside = searcher.resume(done_trials(self.earlier.values(), search.space), search.window)
        for trial in kept:
            self._accept(search, trial.point, trial.cells)
            if trial.immediate:  # answered again without running or writing anything
                self.n_skipped += len(trial.cells)
        if outside:
            self.notes.append(f"{search.key or 'search'}: {len(outside)} earlier trial(s) lie outside today's search "
                              "space: not part of this search (their rows stay in the folder)")

    def _accept(self, search: Search, point: dict[str, Any], cells: list[Cell]) -> None:
        for cell in cells:
            self._register(cell, search.space)
        search.space.accept(point, cells)

    def _open(self, search: Search, point: dict[str, Any], handle: Any) -> None:
        cells = search.space.trial_cells(point)
        self._accept(search, point, cells)
        trial = Trial(search, point, handle, cells)
        for cid, (row, text) in search.space.not_run(point, cells).items():
            trial.rows[cid], trial.texts[cid] = row, text
        for cell in trial.pending():
            if cell.cell_id() in self.rows:
                trial.rows[cell.cell_id()] = self.rows[cell.cell_id()]
            else:
                self._wait_for(cell, trial)
        search.open.append(trial)
        self._close_if_complete(trial)

    def _close_if_complete(self, trial: Trial) -> None:
        if trial.pending():
            return
        search = trial.search
        search.open.remove(trial)
        value = search.space.objective([trial.rows[c.cell_id()] for c in trial.cells])
        for row in search.space.finish(trial, value):
            cid = row["cell_id"]
            if cid in trial.texts and cid not in self.written:
                self.written.add(cid)
                self.outbox.append((row, trial.texts[cid]))
        search.searcher.tell(trial.handle, value)

    def _advance(self) -> None:
        """Open trials up to each search's window; call ``search_done`` for each search that has just finished."""
        for search in self.searches:
            while not search.exhausted and len(search.open) < search.window:
                nxt = search.searcher.ask()
                if nxt is None:
                    search.exhausted = True
                else:
                    self._open(search, *nxt)
            if search.finished() and not search.closed:
                search.closed = True
                self.search_done(search)

    def search_done(self, search: Search) -> None:
        """A search has no more trials to run (select plans holdout's chosen cell here)."""

    # ------------------------------------------------------------------ the executor's interface
    def take(self) -> list[Cell]:
        cells, self.queue = self.queue, []
        return cells

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        cid = cell.cell_id()
        waiting = self.running.pop(cid, [])
        trials = [t for t in waiting if t is not None]
        if self._reuses(trials[0].search.space if trials else None, cell, row):
            self.rows[cid] = row  # a later trial with the same cell reuses it
        if None in waiting and cid not in self.written:
            self.written.add(cid)
            self.outbox.append((row, text))
        for trial in trials:
            trial.rows[cid], trial.texts[cid] = row, text
            self._close_if_complete(trial)
        self._advance()

    def drain(self) -> list[tuple[dict[str, Any], str]]:
        out, self.outbox = self.outbox, []
        return out

    def done(self) -> bool:
        return not self.queue and not self.running and not self.outbox and all(s.closed for s in self.searches)
