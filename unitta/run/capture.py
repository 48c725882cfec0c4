"""One cell run with its output captured: the row and the text of ``<out>/logs/<cell_id>.log``.

``execute`` wraps ``unitta.evaluate.run_cell`` (which never raises) and records what the cell printed,
where it ran and how it ended; ``cell_task`` is the same as a Ray task body (docs/results.md, "Logs").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
from typing import Any

from unitta.cell import Cell
from unitta.evaluate import run_cell
from unitta.evaluate.provenance import now
from unitta.results import STATUS_OK
from unitta.run.cell_progress import cell_reporter

__all__ = ["TASK_NAME", "execute", "cell_task"]

TASK_NAME = "unitta_cell"  # Ray names each cell's task (and its worker's process title) after this


class _Tee(io.TextIOBase):
    """Write to a buffer and to the original stream (so Ray's own worker logs keep the output)."""

    def __init__(self, buffer: io.StringIO, original) -> None:
        self.buffer_, self.original = buffer, original

    def write(self, text: str) -> int:
        self.buffer_.write(text)
        with contextlib.suppress(Exception):
            self.original.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self.original.flush()


def _niceness() -> int | None:
    """This process's niceness (a Ray worker's is ``resources.niceness``; cluster/README.md, "Worker priority")."""
    return os.nice(0) if hasattr(os, "nice") else None


def execute(
    cell: Cell, dataset, extra: dict[str, Any], echo: bool = True, report=None, send_images=None
) -> tuple[dict[str, Any], str]:
    """run_cell with its stdout/stderr captured: (row, log text) for ``<out>/logs/<cell_id>.log``; ``report``: the
    cell's progress-report hook (``unitta.evaluate.adapt.Report``), if any; ``send_images(cell_id, done, total,
    errors)``: where its progress in images and its error so far go (``unitta.run.cell_progress``; the log gets a
    line a minute too)."""
    buffer = io.StringIO()
    buffer.write(f"cell {cell.cell_id()}\n{json.dumps(cell.identity(), sort_keys=True, default=str)}\n")
    buffer.write(
        f"host {socket.gethostname()} pid {os.getpid()} nice {_niceness()} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}\n"
    )
    out = _Tee(buffer, sys.stdout) if echo else buffer
    err = _Tee(buffer, sys.stderr) if echo else buffer
    def log(line: str) -> None:
        buffer.write(f"{now():%H:%M:%S} {line}\n")

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        progress = cell_reporter(cell.cell_id(), send_images, log)
        row = run_cell(cell, dataset, report=report, progress=progress, **extra)
    buffer.write(
        f"status {row['status']} in {row['duration_s']:.2f} s"
        + (f": {row['error_text']}" if row["status"] != STATUS_OK else f", error {row['error']:.2f} %")
        + "\n"
    )
    return row, buffer.getvalue()


def cell_task(
    cell: Cell, dataset, extra: dict[str, Any], plugins: tuple[str, ...] = (), report=None, board=None
) -> tuple[dict[str, Any], str]:
    """The Ray task of one cell; ``dataset`` arrives from the object store (numpy arrays zero-copy).

    ``plugins`` (the config's) are imported first: the cell's method may be one of theirs (unitta/plugins.py).
    ``board``: the driver's ``ImagesBoard`` actor, told the cell's progress in images (never waited on).
    """
    if plugins:
        from unitta.plugins import import_on_worker

        import_on_worker(plugins)

    def send(cell_id: str, done: int, total: int, errors: tuple[int, int] | None = None) -> None:
        with contextlib.suppress(Exception):  # progress is a courtesy: a lost board never fails the cell
            board.put.remote(cell_id, done, total, errors)

    return execute(cell, dataset, extra, report=report, send_images=send if board is not None else None)
