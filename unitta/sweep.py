"""`python -m unitta.sweep CONFIG.yaml`: expand a sweep config into cells, run them on Ray, write Parquet.

Examples::

    python -m unitta.sweep sweeps/quick.yaml                     # local Ray on this machine
    python -m unitta.sweep sweeps/quick.yaml --local             # in this process, one cell after another
    ray job submit -- python -m unitta.sweep sweeps/full_grid.yaml   # on a running cluster

What the driver does (docs/results.md): validate the config (a mistake is one line on
stderr, exit code 2, nothing written), skip the cells that already have a result in the output
directory (resume), put each dataset in Ray's object store once (numpy arrays are read zero-copy
by every task on a node), submit one task per cell with the cell's ``num_cpus`` / ``num_gpus`` and
``max_retries`` for lost workers, write each cell's row the moment it finishes (atomically), show a
progress bar, and at the end consolidate ``results.parquet`` and print a method x setting table.
A cell that raises or produces NaN becomes a row with ``status='failed'`` and the sweep goes on.

``--local`` replaces Ray's removed ``local_mode``: the cells run in the driver process, so a
debugger's breakpoints work. Without ``--address``, the driver joins the cluster named by
``RAY_ADDRESS`` (as under ``ray job submit``) or one started with ``ray start`` on this machine,
and otherwise starts a local Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unitta import cli, ray_cluster
from unitta.cell import Cell
from unitta.config import SweepConfig, load_config
from unitta.evaluate import (
    STATUS_FAILED,
    STATUS_OK,
    DatasetUnavailable,
    failed_row,
    git_commit,
    load_cell_dataset,
    now,
    run_cell,
    short_error,
)
from unitta.outdir import (
    OutputBusy,
    OutputError,
    OutputLock,
    check_output_dir,
    fresh_output_dir,
    is_writable,
    record,
    remove_stale_temp_files,
    removed_if_unused,
    write_manifest,
)
from unitta.preflight import problems
from unitta.results import cells_dir, consolidate, done_cells, load_results, write_membership
from unitta.schema import ConfigError
from unitta.summary import summary_table

__all__ = ["run_sweep", "SweepOutcome", "main"]

# problems found before any cell ran: one line, exit 2 (docs/results.md, "Exit codes")
USAGE_ERRORS = (ConfigError, ray_cluster.ClusterError, OutputBusy, OutputError, DatasetUnavailable)
TASK_NAME = "unitta_cell"  # Ray names each cell's task (and its worker's process title) after this
LOST_NODE_GRACE_S = 20.0  # how long a sweep that saw Ray errors waits at its end for a node loss to be declared
LINE_EVERY_S = 30.0  # off a terminal: at most one progress line this often
STALL_WARN_S = 60.0  # no cell finished this long: say so if other jobs hold the cluster


# ---------------------------------------------------------------------- one cell, its output captured
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


def _execute(cell: Cell, dataset, extra: dict[str, Any], echo: bool = True) -> tuple[dict[str, Any], str]:
    """run_cell with its stdout/stderr captured: (row, log text) for ``<out>/logs/<cell_id>.log``."""
    buffer = io.StringIO()
    buffer.write(f"cell {cell.cell_id()}\n{json.dumps(cell.identity(), sort_keys=True, default=str)}\n")
    buffer.write(f"host {socket.gethostname()} pid {os.getpid()} "
                 f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}\n")
    out = _Tee(buffer, sys.stdout) if echo else buffer
    err = _Tee(buffer, sys.stderr) if echo else buffer
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        row = run_cell(cell, dataset, **extra)
    buffer.write(
        f"status {row['status']} in {row['duration_s']:.2f} s"
        + (f": {row['error_text']}" if row["status"] != STATUS_OK else f", error {row['error']:.2f} %")
        + "\n"
    )
    return row, buffer.getvalue()


def _cell_task(cell: Cell, dataset, extra: dict[str, Any], plugins: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    """The Ray task of one cell; ``dataset`` arrives from the object store (numpy arrays zero-copy).

    ``plugins`` (the config's) are imported first: the cell's method may be one of theirs (unitta/plugins.py).
    """
    if plugins:
        from unitta.plugins import import_on_worker

        import_on_worker(plugins)
    return _execute(cell, dataset, extra)


# ---------------------------------------------------------------------- the driver
@dataclass
class SweepOutcome:
    """What a sweep did: where it wrote, how many cells ran, were skipped or failed."""

    out_dir: Path
    n_cells: int
    n_skipped: int
    n_ok: int = 0
    n_failed: int = 0
    seconds: float = 0.0
    cell_seconds: list[float] = field(default_factory=list)
    results_path: Path | None = None


def _dataset_key(cell: Cell) -> tuple:
    return (cell.dataset, cell.data_dir, cell.severity, cell.n_per_domain)


def _load_dataset(cell: Cell):
    return load_cell_dataset(cell)  # a missing or damaged dataset: DatasetUnavailable, one line and exit 2


class _Progress:
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

            self.bar = tqdm(total=total, desc=name, unit="cell", disable=not enabled, dynamic_ncols=True,
                            mininterval=0.1, maxinterval=10.0)

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
        if finished == self.total and self.last_line < 0:
            return  # the final line is out already
        elapsed = now - self.started
        eta = f", ETA {elapsed / finished * (self.total - finished):.0f} s" if 0 < finished < self.total else ""
        print(f"{self.name}: {finished}/{self.total} cells (done={self.ok} failed={self.failed} running={running}) "
              f"in {elapsed:.0f} s{eta}", file=sys.stderr, flush=True)
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


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path | None = None,
    *,
    local: bool = False,
    fresh: bool = False,
    address: str | None = None,
    progress: bool = True,
    num_cpus: int | None = None,
    wait_for_resources: float = 0.0,
    argv: list[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run every cell of ``cfg`` that has no 'ok' result in ``out_dir`` yet; see the module docstring.

    local: run cells in this process (no Ray). fresh: write into a new directory when ``out_dir``
    already holds results. address: the Ray cluster to join (None: RAY_ADDRESS, a ``ray start``
    cluster on this machine, or a new local Ray with ``num_cpus`` CPUs). wait_for_resources: seconds an
    autoscaling cluster may take to offer a node that fits one cell (``unitta.ray_cluster.check_fits``).
    """
    say = log or (lambda text: print(text, file=sys.stderr))
    start = time.perf_counter()
    out = Path(out_dir) if out_dir is not None else cfg.output_dir()
    check_output_dir(out)
    if fresh:
        new = fresh_output_dir(out)
        if new != out:
            say(f"--fresh: writing into {new} (the results in {out} are kept)")
        out = new
    cells = cfg.cells()
    if not is_writable(out):
        return _read_only_outcome(out, cells, say, start)
    # one writer per directory (then any temp file left there is a dead writer's); a new folder is removed
    # again when the run stops with exit 2 before writing a result
    with removed_if_unused(out, USAGE_ERRORS), OutputLock(out):
        remove_stale_temp_files(cells_dir(out))
        write_membership(out, cfg.name, [c.cell_id() for c in cells])
        finished = done_cells(out, quarantine=True)
        todo = [c for c in cells if c.cell_id() not in finished]
        outcome = SweepOutcome(out_dir=out, n_cells=len(cells), n_skipped=len(cells) - len(todo))
        if outcome.n_skipped:
            say(f"resume: {outcome.n_skipped} of {len(cells)} cells already done in {out}")
        _say_rows_before_weights(todo, finished, say)
        extra = {"sweep_name": cfg.name, "git_commit": git_commit()}
        if todo:
            if local:
                write_manifest(out, cfg, len(cells), "local", argv)
                _run_local(todo, out, extra, cfg, progress, outcome)
            else:
                _run_ray(todo, out, extra, cfg, progress, outcome, address, num_cpus, argv, wait_for_resources)
        outcome.results_path = consolidate(out)
    outcome.seconds = time.perf_counter() - start
    return outcome


def _read_only_outcome(out: Path, cells: list[Cell], say: Callable[[str], None], start: float) -> SweepOutcome:
    """A result directory this process cannot write: fine when every cell is done (nothing to write), else
    an ``OutputError`` saying how many cells still have to run."""
    finished = done_cells(out) if out.is_dir() else set()
    left = sum(1 for cell in cells if cell.cell_id() not in finished)
    if left:
        raise OutputError(
            f"output {out} is not writable and {left} of {len(cells)} cells still have to run; make it writable "
            "or give another directory with --output"
        )
    say(f"{out} is not writable; every cell is already done there, so nothing is written")
    consolidated = out / "results.parquet"
    return SweepOutcome(out_dir=out, n_cells=len(cells), n_skipped=len(cells), seconds=time.perf_counter() - start,
                        results_path=consolidated if consolidated.is_file() else None)


def _say_rows_before_weights(todo: list[Cell], finished: set[str], say: Callable[[str], None]) -> None:
    """One line when cells to run have rows from before the weights were part of a cell's identity: those
    rows cannot say which weights they came from, so they are not reused (docs/results.md, Resume)."""
    older = sum(1 for cell in todo if cell.cell_id_before_weights() in finished)
    if older:
        say(f"resume: {older} cell(s) have rows written before the model weights were part of a cell's identity; "
            "they run again (their old rows stay under their old ids; docs/results.md, Resume)")


def preflight(cfg: SweepConfig, local: bool) -> None:
    """Raise ``ConfigError`` listing (one line each) every problem knowable before the first cell."""
    found = problems(cfg.cells(), num_gpus=cfg.resources.num_gpus, local=local)
    if found:
        raise ConfigError(f"{len(found)} problem(s) found before running:\n" + "\n".join(f"  {p}" for p in found))


def dry_run(cfg: SweepConfig, out: Path) -> int:
    """Print the cells the sweep would run (and which are already done in ``out``) without running any."""
    check_output_dir(out)
    cells = cfg.cells()
    finished = done_cells(out) if out.is_dir() else set()
    todo = [c for c in cells if c.cell_id() not in finished]
    print(f"{cfg.name}: {len(cells)} cells, {len(cells) - len(todo)} already done in {out}, {len(todo)} to run "
          f"({cfg.resources.num_cpus:g} CPU, {cfg.resources.num_gpus:g} GPU each)")
    for cell in cells:
        state = "done" if cell.cell_id() in finished else "todo"
        factors = ",".join(f"{k}={v:g}" for k, v in sorted(cell.factors.items())) or "-"
        sampler = "" if cell.sampler == "official" else f" sampler={cell.sampler}"
        sampler += "" if cell.delta is None else f" delta={cell.delta:g}"
        print(f"  {state}  {cell.dataset:<11} {cell.method:<14} {cell.setting}{sampler}  seed={cell.seed} "
              f"batch={cell.batch_size} factors={factors}  {cell.cell_id()}")
    return cli.EXIT_OK


def _run_local(todo: list[Cell], out: Path, extra: dict, cfg: SweepConfig, progress: bool, outcome: SweepOutcome):
    datasets: dict[tuple, Any] = {}
    bar = _Progress(len(todo), cfg.name, progress)
    try:
        for cell in todo:
            bar.update(None, 1)
            key = _dataset_key(cell)
            if key not in datasets:
                datasets[key] = _load_dataset(cell)
            row, text = _execute(cell, datasets[key], extra, echo=False)
            record(out, row, text)
            _count(outcome, row)
            bar.update(row["status"], 0)
    finally:
        bar.close()


def _count(outcome: SweepOutcome, row: dict[str, Any]) -> None:
    if row["status"] == STATUS_OK:
        outcome.n_ok += 1
    else:
        outcome.n_failed += 1
    if row.get("duration_s") is not None:
        outcome.cell_seconds.append(float(row["duration_s"]))


class _WaitWatch:
    """Says once (one line) when no cell has finished for ``STALL_WARN_S`` because other jobs hold the cluster
    (a joined cluster that is busy would otherwise look like a silent hang)."""

    def __init__(self, ray, need, started: float) -> None:
        self.ray, self.need, self.last, self.said = ray, need, started, False

    def check(self, ready: list, ours_at_most: int, say: Callable[[str], None]) -> None:
        now = time.monotonic()
        if ready:
            self.last = now
            return
        if self.said or now - self.last < STALL_WARN_S:
            return
        self.last = now  # at most one look per STALL_WARN_S
        line = ray_cluster.busy_elsewhere(self.ray, self.need.num_cpus, self.need.num_gpus, ours_at_most)
        if line:
            say(line)
            self.said = True


def _run_ray(todo, out, extra, cfg, progress, outcome, address, num_cpus, argv, wait_for_resources):
    from unitta import plugins

    # the plugins' files travel to every worker (Ray's py_modules); cfg.plugins are imported on this driver already
    runtime_env = plugins.runtime_env(plugins.load(cfg.plugins))
    ray, started_here = ray_cluster.connect(address, num_cpus, runtime_env=runtime_env)
    from ray.exceptions import RayError

    joined = ray_cluster.joined_line(ray)
    if joined:
        print(joined, file=sys.stderr)
    task = ray.remote(_cell_task)
    need = cfg.resources
    # a dead node's raylet logs and Ray's retry notices: to a file, not dozens of lines on the driver's stdout
    messages = ray_cluster.RayMessages(out / "logs" / "ray.log", say=lambda text: print(text, file=sys.stderr))
    messages.install()
    try:
        ray_cluster.check_fits(ray, need.num_cpus, need.num_gpus, wait_s=wait_for_resources)
        # one copy of each dataset per sweep in the object store; every task gets the same ref
        refs: dict[tuple, Any] = {}
        for cell in todo:
            key = _dataset_key(cell)
            if key not in refs:
                refs[key] = ray.put(_load_dataset(cell))
        write_manifest(out, cfg, outcome.n_cells, "ray", argv)

        def submit(cell: Cell):
            return task.options(
                num_cpus=cfg.resources.num_cpus,
                num_gpus=cfg.resources.num_gpus,
                max_retries=cfg.max_retries,
                retry_exceptions=False,  # run_cell turns exceptions into 'failed' rows; retries are for lost workers
                name=f"{TASK_NAME}:{cell.method}:{cell.setting}",
            ).remote(cell, refs[_dataset_key(cell)], extra, tuple(cfg.plugins))

        pending: dict[Any, Cell] = {submit(cell): cell for cell in todo}
        resubmitted: dict[str, int] = {}
        capacity, checked = ray_cluster.capacity(ray, need.num_cpus, need.num_gpus), time.monotonic()
        nodes, watched = ray_cluster.NodeWatch(ray), time.monotonic()
        bar = _Progress(len(todo), cfg.name, progress)

        reported_lost = []

        def report_lost_nodes() -> bool:  # one line per lost node; Ray reruns its tasks (max_retries)
            lost = nodes.lost()
            for line in lost:
                bar.write(line)
            reported_lost.extend(lost)
            return bool(lost)

        waiting = _WaitWatch(ray, need, started=time.monotonic())
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                waiting.check(ready, min(len(pending), capacity), bar.write)
                if time.monotonic() - watched > 5:
                    if report_lost_nodes():
                        checked = 0.0
                    watched = time.monotonic()
                if time.monotonic() - checked > 30:  # autoscaling clusters grow and shrink
                    capacity, checked = ray_cluster.capacity(ray, need.num_cpus, need.num_gpus), time.monotonic()
                if not ready:
                    bar.update(None, min(len(pending), capacity))
                    continue
                for ref in ready:
                    cell = pending.pop(ref)
                    try:
                        row, text = ray.get(ref)
                    except RayError as exc:  # a lost worker, node or result object after Ray's own retries
                        tries = resubmitted.get(cell.cell_id(), 0)
                        if tries < cfg.max_retries:  # the cell itself did not fail: run it again elsewhere
                            resubmitted[cell.cell_id()] = tries + 1
                            pending[submit(cell)] = cell
                            continue
                        row = failed_row(cell, short_error(exc), finished_at=now(), **extra)
                        text = f"cell {cell.cell_id()}\nfailed in Ray: {exc}\n"
                    record(out, row, text)
                    _count(outcome, row)
                    bar.update(row["status"], min(len(pending), capacity))
            report_lost_nodes()  # one lost while the last cells ran
            if messages.count and not reported_lost:
                # Ray published errors (e.g. a dead raylet's workers) but its GCS has not declared a node dead
                # yet (health checks, ~15 s by default): give it that long, so that a loss is still reported
                deadline = time.monotonic() + LOST_NODE_GRACE_S
                while time.monotonic() < deadline and not report_lost_nodes():
                    time.sleep(0.5)
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()
    finally:
        messages.restore()
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------------- the CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m unitta.sweep",
        description="Run a UniTTA sweep: config -> cells -> Ray tasks -> Parquet results.",
        epilog="examples:\n  python -m unitta.sweep sweeps/quick.yaml\n"
        "  python -m unitta.sweep sweeps/quick.yaml --local --output /tmp/quick\n"
        "  python -m unitta.sweep sweeps/full_grid.yaml --dry-run\n"
        "  ray job submit -- python -m unitta.sweep sweeps/full_grid.yaml\n"
        "exit codes: 0 ok, 1 some cells failed, 2 config/cluster problem, 3 crashed, 130/143 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="sweep YAML (see sweeps/)")
    p.add_argument("--output", help="output directory (overrides the config's 'output')")
    p.add_argument("--local", action="store_true", help="run the cells in this process, one after another (no Ray)")
    p.add_argument("--fresh", action="store_true",
                   help="start over in a new directory '<output>-<timestamp>' when the output already has results")
    ray_cluster.add_ray_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and list the cells, then run the checks (not with --no-preflight); run nothing")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the data/checkpoint/feasibility checks before the first cell")
    return p


def _report(cfg: SweepConfig, outcome: SweepOutcome) -> int:
    """Print the summary table and the failed cells; the exit code (1 if any cell of the grid failed)."""
    import polars as pl

    df = load_results(outcome.out_dir)  # not sweep=: a read-only folder from before membership has no record
    mine = df.filter(pl.col("cell_id").is_in([c.cell_id() for c in cfg.cells()]))
    print(summary_table(mine))
    failed = mine.filter(pl.col("status") == STATUS_FAILED)
    print(
        f"\n{outcome.n_ok + outcome.n_failed} cells run ({outcome.n_failed} failed), {outcome.n_skipped} "
        f"already done, in {outcome.seconds:.1f} s; results: {outcome.results_path or outcome.out_dir}"
    )
    for r in failed.iter_rows(named=True):
        print(f"failed: {r['cell_id']}: {r['error_text']} (log: {outcome.out_dir / 'logs' / (r['cell_id'] + '.log')})")
    if failed.height:
        print("rerun the same command to retry the failed cells")
    return cli.EXIT_FAILED_CELLS if failed.height else cli.EXIT_OK


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(list(argv) if argv is not None else None)
    out_hint = Path(args.output) if args.output else None

    def body() -> int:
        cfg = load_config(args.config)
        out = (out_hint or cfg.output_dir()).expanduser()
        check_output_dir(out)
        if args.dry_run:  # the cells first, fast; then the checks (--no-preflight skips them)
            code = dry_run(cfg, out)
            if not args.no_preflight:
                sys.stdout.flush()
                preflight(cfg, local=args.local)
            return code
        if not args.no_preflight:
            preflight(cfg, local=args.local)
        outcome = run_sweep(
            cfg, out, local=args.local, fresh=args.fresh, address=args.address, num_cpus=args.num_cpus,
            wait_for_resources=args.wait_for_resources, progress=not args.no_progress, argv=sys.argv,
        )
        return _report(cfg, outcome)

    hint = "finished cells are saved; rerun the same command to resume"
    return cli.run_cli(body, hint, USAGE_ERRORS)


if __name__ == "__main__":
    # import under the package name so Ray ships tasks by reference to unitta.sweep, not by value
    from unitta.sweep import main as _main

    sys.exit(_main())
