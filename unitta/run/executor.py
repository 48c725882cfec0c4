"""The one executor under ``unitta.sweep`` and ``unitta.tune``: a planner's cells -> backend -> cell files.

A *planner* says which cells to run (the sweep's grid, ``GridPlanner``; the tune's searches) and may hold
rows back until a group of cells is complete (a tune trial's objective needs all its cells). The
executor gives every run the same guarantees (docs/results.md): one writer per output directory
(``OutputLock``), resume (cells with an 'ok' file are not run again; unreadable files are moved
aside), the manifest, each finished cell written atomically as ``cells/<cell_id>.parquet`` with its log
``logs/<cell_id>.log``, retries and resubmission of lost cells, one line per lost node, the progress
bar, and a consolidated ``results.parquet`` at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from unitta.cell import Cell
from unitta.evaluate.inputs import DatasetUnavailable
from unitta.evaluate.provenance import git_commit
from unitta.results import STATUS_FAILED, STATUS_OK, consolidate, done_cells
from unitta.results.cell_files import cells_dir, compacted_dir, move_old_quarantine, temp_dir
from unitta.results.compaction import COMPACT_AT, Compactor, compact
from unitta.results.membership import add_to_membership, write_membership
from unitta.results.output_checks import OutputError, check_output_dir, is_writable, not_writable
from unitta.run.backends import LocalBackend, RayBackend
from unitta.run.outdir import (
    OutputBusy,
    OutputLock,
    fresh_output_dir,
    record,
    remove_stale_temp_files,
    removed_if_unused,
    set_aside_broken_manifest,
    write_manifest,
)
from unitta.run.progress import Progress
from unitta.run.ray_cluster import ClusterError
from unitta.schema import ConfigError
from unitta.track.destinations import make_trackers, with_flags
from unitta.track.feed import TrackerFeed
from unitta.track.sweep_run import live_value

__all__ = ["USAGE_ERRORS", "RunOptions", "RunOutcome", "Planner", "GridPlanner", "execute_plan"]

# problems found before any cell ran: one line, exit 2 (docs/results.md, "Exit codes")
USAGE_ERRORS = (ConfigError, ClusterError, OutputBusy, OutputError, DatasetUnavailable)


@dataclass
class RunOptions:
    """How to run (the shared flags of the sweep and tune commands, ``unitta.run.cli.add_run_arguments``).

    local: run cells in this process (no Ray). fresh: write into a new directory when the output
    already holds results. address: the Ray cluster to join (None: RAY_ADDRESS, a ``ray start`` cluster
    on this machine, or a new local Ray with ``num_cpus`` CPUs). wait_for_resources: seconds an
    autoscaling cluster may take to offer a node that fits one cell (``unitta.run.ray_cluster.check_fits``).
    """

    local: bool = False
    fresh: bool = False
    address: str | None = None
    num_cpus: int | None = None
    wait_for_resources: float = 0.0
    progress: bool = True
    argv: list[str] | None = None
    compact_at: int = COMPACT_AT  # cell files compacted into one part at this many (unitta.results.compaction)
    track: list[str] | None = None  # --track NAME=VALUE, on top of the config's 'tracking:' (unitta.track.destinations)


@dataclass
class RunOutcome:
    """What a run did: where it wrote, how many cells ran, were skipped or failed."""

    out_dir: Path
    n_cells: int = 0
    n_skipped: int = 0
    n_ok: int = 0
    n_failed: int = 0
    n_chance: int = 0  # rows whose source model is at chance on its stream (unitta.evaluate.chance)
    seconds: float = 0.0
    cell_seconds: list[float] = field(default_factory=list)
    results_path: Path | None = None
    cell_ids: list[str] = field(default_factory=list)  # the run's cells as planned (a grid's), for its report

    def count(self, row: dict[str, Any]) -> None:
        if row["status"] == STATUS_OK:
            self.n_ok += 1
        elif row["status"] == STATUS_FAILED:  # a 'stopped' row (early stopping) is neither
            self.n_failed += 1
        if row.get("duration_s") is not None:
            self.cell_seconds.append(float(row["duration_s"]))
        if chance_line(row):
            self.n_chance += 1


def chance_line(row: dict[str, Any]) -> str | None:
    """The console line of a row whose source model is at chance (its ``warnings``, unitta.evaluate.chance), naming
    the cell; None for any other row."""
    warnings = row.get("warnings") or ""
    if "at chance" not in warnings:
        return None
    keys = ("dataset", "model", "method", "setting", "seed")
    where = "/".join(str(row[k]) for k in keys if row.get(k) is not None)
    return f"warning: {where}: {warnings}"


class Planner(Protocol):
    """What the executor asks of a planner (the grid, a search)."""

    n_cells: int  # cells it expects to run or reuse (grows as a search learns its size)
    n_skipped: int  # of those, already done in the output directory
    members: list[str] | None  # the cell ids that make up the run (a sweep's grid), recorded before it runs
    added_members: list[str]  # cell ids a search adds to the run's record as it goes (flushed by the executor)
    notes: list[str]  # lines for the user before the run (e.g. rows that cannot be reused)

    def take(self) -> list[Cell]:
        """Cells to submit now (maybe none while the planner waits for results)."""

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        """A submitted cell finished (its row is not written yet)."""

    def drain(self) -> list[tuple[dict[str, Any], str]]:
        """Rows (and log texts) ready to be written now."""

    def done(self) -> bool:
        """Nothing more to submit or write."""

    # optional: ``attach(backend)`` once the backend started (e.g. to start a Ray actor), ``report_for(cell)``
    # the cell's progress-report hook (``unitta.evaluate.adapt.Report``; ``unitta select``'s ASHA)


class GridPlanner:
    """A fixed list of cells (the sweep's grid): every one without an 'ok' file, all at once."""

    def __init__(self, cells: list[Cell], finished: set[str]) -> None:
        self.members = [c.cell_id() for c in cells]  # each id once: it resolves the method's config and hashes
        self.todo = [c for c, cell_id in zip(cells, self.members) if cell_id not in finished]
        self.n_cells, self.n_skipped = len(cells), len(cells) - len(self.todo)
        self.added_members: list[str] = []
        self.outbox: list[tuple[dict[str, Any], str]] = []
        # rows from before the model weights were part of a cell's identity cannot say which weights they
        # came from, so they are not reused (docs/results.md, Resume)
        older = sum(1 for cell in self.todo if cell.cell_id_before_weights() in finished)
        self.notes = (
            [
                f"resume: {older} cell(s) have rows written before the model weights were part of a cell's identity; "
                "they run again (their old rows stay under their old ids; docs/results.md, Resume)"
            ]
            if older
            else []
        )

    def take(self) -> list[Cell]:
        todo, self.todo = self.todo, []
        return todo

    def on_result(self, cell: Cell, row: dict[str, Any], text: str) -> None:
        self.outbox.append((row, text))

    def drain(self) -> list[tuple[dict[str, Any], str]]:
        out, self.outbox = self.outbox, []
        return out

    def done(self) -> bool:
        return not self.todo and not self.outbox


def _flush_members(out: Path, name: str, planner: Planner) -> None:
    """Record the cells a search added to the run (``load_results(out, sweep=name)``)."""
    if planner.added_members:
        add_to_membership(out, name, planner.added_members)
        planner.added_members = []


def _loop(planner: Planner, backend, out: Path, bar: Progress, outcome: RunOutcome, name: str, compactor,
          feed: TrackerFeed) -> None:
    """Submit what the planner offers, write what it releases, until it is done and nothing runs."""
    while True:
        submitted = planner.take()
        report_for = getattr(planner, "report_for", None)
        for cell in submitted:
            backend.submit(cell, report_for(cell) if report_for else None)
        written = planner.drain()
        for row, text in written:
            record(out, row, text)
            feed.add(row)  # after the row is in Parquet; never blocks (docs/tracking.md)
            outcome.count(row)
            if line := chance_line(row):
                bar.write(line)
            bar.update(row["status"], backend.running(), images=row.get("n_samples"), cell_id=row.get("cell_id"))
            compactor.written()
        _flush_members(out, name, planner)
        bar.grow(planner.n_cells - planner.n_skipped)
        if not backend.pending:
            if planner.done():
                return
            if not submitted and not written:
                raise RuntimeError("the planner offers no cell, holds no row and is not done (a bug)")
            continue
        finished = backend.wait()
        for cell, row, text in finished:
            planner.on_result(cell, row, text)
        if not finished:
            bar.update(None, backend.running())


def execute_plan(
    cfg,
    out: Path,
    make_planner: Callable[[set[str]], Planner],
    opts: RunOptions,
    say: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run the cells ``make_planner(finished cell ids)`` offers into ``out``; see the module docstring.

    cfg: the validated run config (``unitta.schema.RunConfig``: name, resources, max_retries, plugins).
    A run that stops with a usage problem (``USAGE_ERRORS``: exit 2) leaves no folder it created behind.
    """
    say = say or (lambda text: print(text, file=sys.stderr))
    start = time.perf_counter()
    out = Path(out)
    check_output_dir(out)
    if opts.fresh:
        new = fresh_output_dir(out)
        if new != out:
            say(f"--fresh: writing into {new} (the results in {out} are kept)")
        out = new
    if not is_writable(out):
        return _read_only_outcome(out, make_planner, say, start)
    # one writer per directory; then any temp file left there is a dead writer's
    with removed_if_unused(out, USAGE_ERRORS), OutputLock(out):
        for directory in (temp_dir(out), cells_dir(out), compacted_dir(out), out):  # older writers' beside their files
            remove_stale_temp_files(directory)
        move_old_quarantine(out)
        set_aside_broken_manifest(out, say)  # like a broken cell file, whether or not cells are left to run
        planner = make_planner(done_cells(out, quarantine=True))
        if planner.members is not None:
            write_membership(out, cfg.name, planner.members)
        _flush_members(out, cfg.name, planner)
        outcome = RunOutcome(out_dir=out, n_cells=planner.n_cells, n_skipped=planner.n_skipped,
                             cell_ids=list(planner.members or []))
        if planner.n_skipped:
            say(f"resume: {planner.n_skipped} of {planner.n_cells} cells already done in {out}")
        for line in planner.notes:
            say(line)
        if not planner.done():
            _run(cfg, out, planner, opts, outcome)
        outcome.n_cells, outcome.n_skipped = planner.n_cells, planner.n_skipped
        compact(out, opts.compact_at, say)
        outcome.results_path = consolidate(out, compact_at=opts.compact_at)  # a large folder: results.parquet only
    outcome.seconds = time.perf_counter() - start
    return outcome


def _read_only_outcome(out: Path, make_planner, say: Callable[[str], None], start: float) -> RunOutcome:
    """A result directory this process cannot write: fine when every cell is done (nothing to write), else
    an ``OutputError`` saying how many cells still have to run."""
    planner = make_planner(done_cells(out) if out.is_dir() else set())
    if not planner.done():
        raise not_writable(out, planner.n_cells - planner.n_skipped, planner.n_cells)
    say(f"{out} is not writable; every cell is already done there, so nothing is written")
    consolidated = out / "results.parquet"
    return RunOutcome(
        out_dir=out,
        n_cells=planner.n_cells,
        n_skipped=planner.n_skipped,
        seconds=time.perf_counter() - start,
        results_path=consolidated if consolidated.is_file() else None,
    )


def _run(cfg, out: Path, planner: Planner, opts: RunOptions, outcome: RunOutcome) -> None:
    extra = {"sweep_name": cfg.name, "git_commit": git_commit()}
    backend: LocalBackend | RayBackend
    if opts.local:
        backend = LocalBackend(extra)
    else:
        backend = RayBackend(extra, cfg, out, opts.address, opts.num_cpus, opts.wait_for_resources)
    bar = None
    # experiment trackers get each written row on a background thread; a missing package is a config error here
    feed = TrackerFeed(make_trackers(with_flags(cfg.tracking, opts.track, _stderr_line), out, cfg.name), out, cfg.name)
    try:
        backend.start(lambda line: bar.write(line) if bar else print(line, file=sys.stderr))
        if hasattr(planner, "attach"):
            planner.attach(backend)
        write_manifest(out, cfg, planner.n_cells, backend.mode, opts.argv)
        bar = Progress(planner.n_cells - planner.n_skipped, cfg.name, opts.progress)
        backend.on_images = bar.images
        if feed.thread is not None:  # a running cell's error so far, to the trackers (docs/tracking.md, "Live metrics")
            backend.on_live = lambda cell, images, wrong: feed.live(live_value(cell, cfg.name, images, wrong))
        compactor = Compactor(out, opts.compact_at, warn=lambda line: bar.write(line))
        _loop(planner, backend, out, bar, outcome, cfg.name, compactor, feed)
        backend.finish()
    finally:
        if bar is not None:
            bar.close()
        backend.close()
        feed.close(hurry=sys.exc_info()[0] is not None)  # an interrupted run does not wait for the trackers


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr)
