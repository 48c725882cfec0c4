"""The interface every experiment tracker implements (MLflow, Weights & Biases, TensorBoard; docs/tracking.md).

A tracker is opened once (connect, find the cells it already holds: a run is found by its cell id, so a resumed
sweep or a repeated ``unitta track`` adds no duplicate), then logs one ``CellRun`` per finished cell under the
parent run of its sweep, and is finished at the end. Around that, as deep as Ray Tune's logger callbacks: ``begin``
opens the parent run when a sweep starts (system metrics while it runs), ``live`` takes a running cell's error so
far, ``log_sweep`` gives the parent run the config and the summary table at the end, and ``attach`` adds files
(heatmaps, tables, the report) to it later. Any problem is a ``TrackerError`` with a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from unitta.track.cell_run import CellRun
from unitta.track.sweep_run import LiveValue, SweepRun

__all__ = ["Tracker", "TrackerError", "short_reason"]


class TrackerError(RuntimeError):
    """A tracker that cannot be reached, refuses a value or fails a write; the message is one line."""


def short_reason(exc: BaseException) -> str:
    """An exception as one short line (trackers' errors can span pages: HTML bodies, tracebacks)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class Tracker(Protocol):
    name: str  # 'mlflow', 'wandb', 'tensorboard': the key of the ``tracking:`` section and of ``--track``

    def open(self) -> set[str]:
        """Connect; the ids of the cells this tracker already holds a complete run of."""

    def begin(self, sweep: str) -> None:
        """A sweep starts: its parent run opens (system metrics while it runs, unless switched off)."""

    def live(self, value: LiveValue) -> None:
        """A running cell's error so far (its final row follows as ``log``)."""

    def log(self, run: CellRun) -> None:
        """One finished cell as one run (under its sweep's parent run)."""

    def log_sweep(self, run: SweepRun) -> None:
        """The parent run's config (parameters and file) and summary metrics."""

    def attach(self, sweep: str, files: list[Path], folder: str | None = None) -> None:
        """Files as the parent run's artifacts (under ``folder``); attaching a file again replaces it."""

    def finish(self) -> None:
        """End the parent runs, flush files."""

    def where(self) -> dict[str, Any]:
        """Where the runs are (written to ``<out>/tracking.json``; the HTML report links them)."""

    def track_command(self, out: Path) -> str:
        """The ``unitta track`` command that logs the cells this run could not."""
