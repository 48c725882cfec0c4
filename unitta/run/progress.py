"""The progress bar of a run: cells done / failed / running, ETA from tqdm."""

from __future__ import annotations

import sys

from unitta.evaluate import STATUS_FAILED, STATUS_OK

__all__ = ["Progress"]


class Progress:
    """tqdm bar over the cells to run: done / failed / running in the postfix, ETA from tqdm."""

    def __init__(self, total: int, name: str, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.ok = self.failed = 0
        # not a terminal (e.g. `ray job submit` logs): at most a line every 30 s instead of a live bar
        self.interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            desc=name,
            unit="cell",
            disable=not enabled,
            dynamic_ncols=True,
            mininterval=0.1 if self.interactive else 30.0,
            maxinterval=10.0 if self.interactive else 1e9,
        )

    def grow(self, total: int) -> None:
        """A planner that learns its size as it goes (a search) raises the bar's total."""
        if total > (self.bar.total or 0):
            self.bar.total = total

    def update(self, status: str | None, running: int) -> None:
        if status == STATUS_OK:
            self.ok += 1
        elif status == STATUS_FAILED:
            self.failed += 1
        self.bar.set_postfix_str(f"done={self.ok} failed={self.failed} running={running}", refresh=False)
        if status is not None:
            self.bar.update(1)  # tqdm prints only when mininterval has passed
        elif self.interactive:
            self.bar.refresh()

    def write(self, line: str) -> None:
        """A line on stderr that does not break the bar."""
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()
