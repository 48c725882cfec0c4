"""Progress inside running cells: how many of its stream's images a cell has adapted on, sent to the driver's
progress line and written in the cell's log (docs/results.md, "Progress").

A cell's adaptation loop calls ``reporter(done, total)`` after every batch (``unitta.evaluate.adapt_stream``'s
``progress``); the reporter passes it on at most every ``SEND_EVERY_S`` to an ``ImagesBoard`` (a plain object
under ``--local``, a Ray actor on a cluster, so that it works across nodes) and writes a line in the cell's log
at most every ``LOG_EVERY_S``. The driver reads the board and turns images into a rate and an ETA.

With it goes the cell's error so far when the loop has one (``errors=(positions, wrong)``, read at the loop's host
checks every few batches: no extra synchronisation): the driver passes it to the experiment trackers as the
cell's live ``error_so_far`` (docs/tracking.md, "Live metrics"), as throttled as the images.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["SEND_EVERY_S", "LOG_EVERY_S", "ImagesBoard", "cell_reporter", "images_eta"]

SEND_EVERY_S = 2.0  # a cell tells the driver at most this often (one small Ray call)
LOG_EVERY_S = 60.0  # and writes a line in its log at most this often


class ImagesBoard:
    """The running cells' images: cell id -> (images done, images in its stream)."""

    def __init__(self) -> None:
        self.cells: dict[str, tuple[int, int]] = {}
        self.errors: dict[str, tuple[int, int]] = {}  # cell id -> (stream positions, wrong predictions among them)

    def put(self, cell_id: str, done: int, total: int, errors: tuple[int, int] | None = None) -> None:
        self.cells[cell_id] = (done, total)
        if errors is not None:
            self.errors[cell_id] = errors

    def drop(self, cell_id: str) -> None:
        self.cells.pop(cell_id, None)
        self.errors.pop(cell_id, None)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        return dict(self.cells)

    def read(self) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
        """(the cells' images, their errors so far) in one call (one Ray round trip)."""
        return dict(self.cells), dict(self.errors)


def cell_reporter(cell_id: str, send: Callable[..., None] | None,
                  log: Callable[[str], None] | None, clock: Callable[[], float] = time.monotonic
                  ) -> Callable[..., None]:
    """The ``progress(done, total, errors=None)`` callback of one cell: ``send(cell_id, done, total, errors)`` at
    most every SEND_EVERY_S (``errors``: the newest (positions, wrong) the loop gave, None before the first), and
    ``log('images 12,000/64,000 (19 %), 210 images/s, ETA 200 s')`` at most every LOG_EVERY_S (the rate over the
    cell's adaptation so far); the last batch is always sent."""
    started = clock()
    last_sent = last_logged = started
    newest: tuple[int, int] | None = None
    sent: tuple[int, int] | None = None

    def report(done: int, total: int, errors: tuple[int, int] | None = None) -> None:
        nonlocal last_sent, last_logged, newest, sent
        now = clock()
        newest = errors if errors is not None else newest
        if send is not None and (now - last_sent >= SEND_EVERY_S or done >= total):
            send(cell_id, done, total, newest if newest != sent else None)
            last_sent, sent = now, newest
        if log is not None and now - last_logged >= LOG_EVERY_S and done < total:
            rate = done / max(now - started, 1e-9)
            eta = (total - done) / rate if rate > 0 else float("inf")
            log(f"images {done:,}/{total:,} ({100 * done / total:.0f} %), {rate:,.0f} images/s, ETA {eta:,.0f} s")
            last_logged = now

    return report


def images_eta(finished_images: int, finished_cells: int, running: dict[str, tuple[int, int]], waiting_cells: int,
               elapsed_s: float, rate: float | None = None) -> tuple[float, float | None]:
    """(images per second, seconds left): ``rate`` (e.g. over a recent window), by default the rate of every image
    adapted on in this run (finished cells' streams and running cells' progress); what is left is the running
    cells' remaining images plus, for each cell not started yet, the mean stream length of the cells seen so far.
    None while no image is done."""
    done = finished_images + sum(d for d, _ in running.values())
    if done <= 0 or elapsed_s <= 0:
        return 0.0, None
    rate = done / elapsed_s if rate is None else rate
    if rate <= 0:
        return 0.0, None
    lengths = finished_cells + len(running)
    mean_length = (finished_images + sum(t for _, t in running.values())) / lengths if lengths else 0.0
    left = sum(t - d for d, t in running.values()) + waiting_cells * mean_length
    return rate, left / rate
