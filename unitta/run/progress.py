"""The progress of a run: cells done / failed / running and an ETA, on a terminal or in a log."""

from __future__ import annotations

import sys
import time

from unitta.results import STATUS_FAILED, STATUS_OK

__all__ = ["Progress", "LINE_EVERY_S"]

LINE_EVERY_S = 30.0  # off a terminal: at most one progress line this often


class Progress:
    """Progress over the cells to run: done / failed / running, and an ETA.

    On a terminal a live tqdm bar; elsewhere (``ray job submit`` logs, a file, CI) whole lines, at most one
    every ``LINE_EVERY_S`` seconds and one at the end, never a carriage return.
    """

    def __init__(self, total: int, name: str, enabled: bool) -> None:
        self.ok = self.failed = 0
        self.total, self.name, self.enabled = total, name, enabled
        self.interactive = sys.stderr.isatty()
        self.started = self.last_line = time.monotonic()
        self.bar = None
        if self.interactive:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
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

    def update(self, status: str | None, running: int) -> None:
        if status == STATUS_OK:
            self.ok += 1
        elif status == STATUS_FAILED:
            self.failed += 1
        if self.bar is None:
            if status is not None:  # a line when a cell finishes (rate-limited), as tqdm did off a terminal
                self._line(running)
            return
        self.bar.set_postfix_str(f"done={self.ok} failed={self.failed} running={running}", refresh=False)
        if status is not None:
            self.bar.update(1)  # tqdm prints only when mininterval has passed
        else:
            self.bar.refresh()

    def _line(self, running: int) -> None:
        finished = self.ok + self.failed
        now = time.monotonic()
        if not self.enabled or (now - self.last_line < LINE_EVERY_S and finished < self.total):
            return
        if finished >= self.total and self.last_line < 0:
            return  # the final line is out already
        elapsed = now - self.started
        eta = f", ETA {elapsed / finished * (self.total - finished):.0f} s" if 0 < finished < self.total else ""
        print(
            f"{self.name}: {finished}/{self.total} cells (done={self.ok} failed={self.failed} running={running}) "
            f"in {elapsed:.0f} s{eta}",
            file=sys.stderr,
            flush=True,
        )
        self.last_line = now if finished < self.total else -1.0

    def write(self, line: str) -> None:
        """A line on stderr that does not break the bar."""
        if self.bar is None:
            print(line, file=sys.stderr, flush=True)
        else:
            self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
