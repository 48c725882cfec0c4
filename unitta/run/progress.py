"""The progress of a run: cells done / failed / running, images adapted on and their rate, and an ETA from images
(``unitta.run.cell_progress``), on a terminal or in a log."""

from __future__ import annotations

import sys
import time
from collections import deque

from unitta.durations import duration_text
from unitta.results import STATUS_FAILED, STATUS_OK
from unitta.run.cell_progress import images_eta

__all__ = ["Progress", "LINE_EVERY_S"]

LINE_EVERY_S = 30.0  # off a terminal: at most one progress line this often
RATE_WINDOW_S = 60.0  # images/s over the last minute (over the run while it is younger)


class Progress:
    """Progress over the cells to run: done / failed / running, the images adapted on (finished cells' streams and
    the running cells' progress, ``images``), their rate and an ETA from images.

    On a terminal a live tqdm bar; elsewhere (``ray job submit`` logs, a file, CI) whole lines, at most one
    every ``LINE_EVERY_S`` seconds (also while a long cell runs) and one at the end, never a carriage return.
    """

    def __init__(self, total: int, name: str, enabled: bool) -> None:
        self.ok = self.failed = 0
        self.finished_images = self.cells_with_images = 0
        self.running_images: dict[str, tuple[int, int]] = {}
        self.total, self.name, self.enabled = total, name, enabled
        # the stderr of the run: a --local cell's output is captured (sys.stderr swapped) while it sends progress
        self.stream = sys.stderr
        self.interactive = self.stream.isatty()
        self.started = self.last_line = time.monotonic()
        self.samples: deque[tuple[float, int]] = deque([(self.started, 0)])  # (time, images done) for the rate
        self.bar = None
        if self.interactive:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                file=self.stream,
                desc=name,
                unit="cell",
                disable=not enabled,
                dynamic_ncols=True,
                mininterval=0.1,
                maxinterval=10.0,
            )

    def grow(self, total: int) -> None:
        """A planner that learns its size as it goes (a search) raises the total."""
        if total > self.total:
            self.total = total
            if self.bar is not None:
                self.bar.total = total

    def update(self, status: str | None, running: int, images: int | None = None, cell_id: str | None = None) -> None:
        """A cell finished with ``status`` (``images``: its stream's length; ``cell_id``: it leaves the running
        cells' board, so its images count once), or (status None) time passed."""
        if cell_id is not None:
            self.running_images.pop(cell_id, None)
        if status == STATUS_OK:
            self.ok += 1
        elif status == STATUS_FAILED:
            self.failed += 1
        if images:
            self.finished_images += images
            self.cells_with_images += 1
        self._sample()
        if self.bar is None:
            self._line(running)
            return
        self.bar.set_postfix_str(self._counts(running) + self._images(), refresh=False)
        if status is not None:
            self.bar.update(1)  # tqdm prints only when mininterval has passed
        else:
            self.bar.refresh()

    def images(self, running: dict[str, tuple[int, int]]) -> None:
        """The running cells' progress: cell id -> (images done, images in its stream) (``ImagesBoard``)."""
        self.running_images = running
        self.update(None, len(running))

    def _sample(self) -> None:
        """Note the images done now (finished cells' streams and running cells' progress, each counted once),
        keeping the samples of the last ``RATE_WINDOW_S`` and one before them."""
        now = time.monotonic()
        self.samples.append((now, self.finished_images + sum(d for d, _ in self.running_images.values())))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW_S:
            self.samples.popleft()

    def _recent_rate(self) -> float:
        """Images per second over the last ``RATE_WINDOW_S`` or so (over the run while it is younger)."""
        (then, done_then), (now, done) = self.samples[0], self.samples[-1]
        return (done - done_then) / (now - then) if now > then else 0.0

    def _eta(self) -> tuple[float, float | None]:
        """(images per second over the recent window, seconds left at that rate; ``images_eta``)."""
        finished = self.ok + self.failed
        waiting = max(self.total - finished - len(self.running_images), 0)
        now = self.samples[-1][0]
        rate, left = images_eta(self.finished_images, self.cells_with_images, self.running_images, waiting,
                                now - self.started, rate=self._recent_rate())
        if left is None and 0 < finished < self.total:  # no image count yet (old rows): from cells
            left = (now - self.started) / finished * (self.total - finished)
        return rate, left

    def _counts(self, running: int) -> str:
        return f"done={self.ok} failed={self.failed} running={running}"

    def _images(self) -> str:
        """', 1,234 images/s, running cells at 3,000/9,000 images, ETA 12 min' (what is known of it)."""
        rate, left = self._eta()
        parts = [f"{rate:,.0f} images/s"] if rate > 0 else []
        if self.running_images and self.ok + self.failed < self.total:
            done, total = (sum(v[i] for v in self.running_images.values()) for i in (0, 1))
            parts.append(f"running cells at {done:,}/{total:,} images")
        if left is not None and self.ok + self.failed < self.total:
            parts.append(f"ETA {duration_text(left)}")
        return "".join(f", {p}" for p in parts)

    def _line(self, running: int) -> None:
        finished = self.ok + self.failed
        now = time.monotonic()
        if not self.enabled or (now - self.last_line < LINE_EVERY_S and finished < self.total):
            return
        if finished >= self.total and self.last_line < 0:
            return  # the final line is out already
        elapsed = now - self.started
        counts = self._counts(running)
        print(f"{self.name}: {finished}/{self.total} cells ({counts}) in {elapsed:.0f} s{self._images()}",
              file=self.stream, flush=True)
        self.last_line = now if finished < self.total else -1.0

    def write(self, line: str) -> None:
        """A line on stderr that does not break the bar."""
        if self.bar is None:
            print(line, file=self.stream, flush=True)
        else:
            self.bar.write(line, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
