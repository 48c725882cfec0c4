"""The driver's feed of finished rows to the trackers, on a background thread (docs/tracking.md).

Parquet stays the source of truth: the executor writes a cell's row first and then hands it to ``add``, which
never blocks (a bounded queue; a full queue drops the row for the trackers, not from Parquet). The thread opens
the trackers, logs each row's ``CellRun`` to each, and ends the parent runs. A tracker that cannot be reached
or fails a write is one warning line and logs nothing more in this run; ``close`` waits for the queue to drain
as long as the trackers keep taking rows (a tracker that takes none for ``CLOSE_WAIT_S`` is left behind) and then
says, in one line per tracker, how many cells it missed and the ``unitta track`` command that logs them.

Besides rows: the thread opens each sweep's parent run when it starts (``Tracker.begin``: system metrics while it
runs), passes running cells' errors so far (``live``: dropped, never waited on, when the queue is full or the
cell's row is already there) and, at the end, gives the parent run the run's config and summary table from the
output folder (``log_sweep``, ``unitta.track.sweep_run``) before ending it.
"""

from __future__ import annotations

import contextlib
import math
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unitta.results.tracking_record import write_tracking_record
from unitta.track.cell_run import cell_run
from unitta.track.sweep_run import LiveValue, sweep_run
from unitta.track.tracker import Tracker, short_reason

__all__ = ["TrackerFeed", "QUEUE_ROWS", "CLOSE_WAIT_S"]

QUEUE_ROWS = 10_000  # rows waiting for the trackers at most (a few MB); more are left to ``unitta track``
CLOSE_WAIT_S = 30.0  # the end of a run waits for the last rows while the trackers take one at least this often
HURRY_S = 2.0  # the wait of a run that ends on an error or an interrupt
_STOP = object()


class TrackerFeed:
    """Rows -> ``trackers`` on one daemon thread; ``sweep``: the parent run's name (the run config's name)."""

    def __init__(self, trackers: list[Tracker], out: Path, sweep: str, warn: Callable[[str], None] | None = None,
                 capacity: int = QUEUE_ROWS, close_wait_s: float = CLOSE_WAIT_S) -> None:
        self.trackers, self.out, self.sweep = trackers, Path(out), sweep
        # the driver's stderr as it is now: a --local cell redirects sys.stderr into its log while it runs
        stream = sys.stderr
        self.warn = warn or (lambda line: print(line, file=stream, flush=True))
        self.close_wait_s = close_wait_s
        self.queue: queue.Queue = queue.Queue(capacity)
        self.capacity = capacity
        self.missed = {t.name: 0 for t in trackers}
        self.logged = {t.name: 0 for t in trackers}
        self.broken: set[str] = set()
        self.dropped = 0
        self.lock = threading.Lock()
        self.moved = time.monotonic()  # when the thread last finished a step (opened the trackers, took a row)
        self.thread = threading.Thread(target=self._work, name="unitta-track", daemon=True) if trackers else None
        if self.thread is not None:
            self.thread.start()

    def add(self, row: dict[str, Any]) -> None:
        """Queue a written row for the trackers; returns at once."""
        if self.thread is None:
            return
        try:
            self.queue.put_nowait(dict(row))
        except queue.Full:
            with self.lock:
                self.dropped += 1
                first = self.dropped == 1
            if first:
                self.warn(f"tracking: the trackers are {self.capacity:,} rows behind; more stay in Parquet only")

    def live(self, value: LiveValue) -> None:
        """Queue a running cell's error so far; returns at once (dropped when the queue is full)."""
        if self.thread is not None:
            with contextlib.suppress(queue.Full):
                self.queue.put_nowait(value)

    def _fail(self, tracker: Tracker, exc: BaseException) -> None:
        with self.lock:
            self.broken.add(tracker.name)
        self.warn(f"tracking: {tracker.name}: {short_reason(exc)}; no more cells go there in this run "
                  "(they stay in Parquet)")

    def _work(self) -> None:
        done: dict[str, set[str]] = {}
        for tracker in self.trackers:
            try:
                done[tracker.name] = tracker.open()
            except Exception as exc:
                self._fail(tracker, exc)
        for tracker in self.trackers:
            self._step(tracker, "begin", self.sweep)
        self._record()
        self.moved = time.monotonic()
        while (row := self.queue.get()) is not _STOP:
            if isinstance(row, LiveValue):
                for tracker in self.trackers:
                    if tracker.name not in self.broken and row.cell_id not in done.get(tracker.name, ()):
                        self._step(tracker, "live", row)
                continue
            self._log_row(row, done)
            self.moved = time.monotonic()
        try:
            summary = sweep_run(self.out, self.sweep)
        except Exception as exc:  # the summary is a courtesy: the cells are logged
            self.warn(f"tracking: no summary for the parent run: {short_reason(exc)}")
            summary = None
        for tracker in self.trackers:
            if summary is not None:
                self._step(tracker, "log_sweep", summary)
            self._step(tracker, "finish")
        self._record()

    def _log_row(self, row: dict[str, Any], done: dict[str, set[str]]) -> None:
        """A finished row to every tracker that does not hold its cell yet."""
        try:
            run = cell_run(row, self.sweep)
        except Exception as exc:  # a row this code cannot read must not stop the rows after it
            self.warn(f"tracking: cell {row.get('cell_id')}: {short_reason(exc)}; not tracked (it is in Parquet)")
            run = None
        for tracker in self.trackers:
            if run is None or run.cell_id in done.get(tracker.name, ()):
                continue
            if tracker.name in self.broken:
                self.missed[tracker.name] += 1
                continue
            try:
                tracker.log(run)
                done[tracker.name].add(run.cell_id)
                self.logged[tracker.name] += 1
            except Exception as exc:
                self.missed[tracker.name] += 1
                self._fail(tracker, exc)

    def _step(self, tracker: Tracker, what: str, *args) -> None:
        """``tracker.what(*args)`` unless the tracker broke; a failure breaks it (one warning line)."""
        if tracker.name in self.broken:
            return
        try:
            getattr(tracker, what)(*args)
        except Exception as exc:
            self._fail(tracker, exc)

    def _record(self) -> None:
        """Where the runs are, in ``<out>/tracking.json`` (the trackers that opened)."""
        entries = {t.name: t.where() for t in self.trackers if t.name not in self.broken}
        if entries:
            try:
                write_tracking_record(self.out, entries)
            except OSError as exc:
                self.warn(f"tracking: cannot write {self.out / 'tracking.json'}: {short_reason(exc)}")

    def close(self, hurry: bool = False) -> None:
        """Let the thread take what is queued while it keeps moving (see the module docstring); then one line per
        tracker that missed cells. hurry: the run is ending on an error or an interrupt: wait ``HURRY_S`` at most."""
        if self.thread is None:
            return
        self.moved = max(self.moved, time.monotonic())
        wait = min(self.close_wait_s, HURRY_S) if hurry else self.close_wait_s
        deadline = time.monotonic() + wait if hurry else math.inf
        stopped = False
        while (self.thread.is_alive() and time.monotonic() - self.moved < wait
               and time.monotonic() < deadline):
            if not stopped:
                try:
                    self.queue.put(_STOP, timeout=1.0)
                    stopped = True
                except queue.Full:
                    continue
            self.thread.join(1.0)
        left = max(0, self.queue.qsize() - stopped) if self.thread.is_alive() else 0  # rows never taken
        if self.thread.is_alive():
            self.warn(f"tracking: the trackers took no row for {wait:.0f} s; the last rows stay in Parquet")
        for tracker in self.trackers:
            missed = self.missed[tracker.name] + self.dropped + left
            if missed or tracker.name in self.broken:
                self.warn(f"tracking: {tracker.name} holds {self.logged[tracker.name]} new cell(s) of this run, "
                          f"{missed} more are in Parquet only; to log them: {tracker.track_command(self.out)}")
