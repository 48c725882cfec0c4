"""`python -m unitta.sweep CONFIG.yaml`: expand a sweep config into cells, run them on Ray, write Parquet.

The sweep package: the grid planner and its command (this module; ``__main__`` runs it) and the schema of
a sweep config (``config``). Cells run on the executor of ``unitta/run/``.


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
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from unitta.cell import Cell
from unitta.evaluate.segments import short_segment_warnings
from unitta.results import STATUS_FAILED, load_results
from unitta.results.compaction import COMPACT_AT
from unitta.results.output_checks import check_output_dir
from unitta.results.summary import failure_lines, summary_table
from unitta.run import exits
from unitta.run.capture import TASK_NAME
from unitta.run.checks import list_cells, preflight
from unitta.run.cli import run_command, run_options, run_parser
from unitta.run.executor import GridPlanner, RunOptions, RunOutcome, execute_plan
from unitta.run.outdir import fresh_output_dir
from unitta.sweep.config import SweepConfig, load_config

__all__ = ["run_sweep", "TASK_NAME", "main"]

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
    cells: list[Cell] | None = None,
    compact_at: int = COMPACT_AT,
    track: list[str] | None = None,
) -> RunOutcome:
    """Run every cell of ``cfg`` that has no 'ok' result in ``out_dir`` yet; see the module docstring.

    The flags are ``unitta.run.RunOptions``'; the grid goes through the one executor (``unitta.run``).
    cells: ``cfg.cells()`` when the caller planned them already (planning a large grid is done once).
    compact_at: compact the cell files once there are this many (``unitta.results.compaction``; docs/results.md).
    track: ``--track NAME=VALUE`` flags on top of the config's ``tracking:`` (docs/tracking.md).
    """
    out = Path(out_dir) if out_dir is not None else cfg.output_dir()
    opts = RunOptions(local=local, fresh=fresh, address=address, num_cpus=num_cpus,
                      wait_for_resources=wait_for_resources, progress=progress, argv=argv, compact_at=compact_at,
                      track=track)
    cells = cfg.cells() if cells is None else cells
    return execute_plan(cfg, out, lambda finished: GridPlanner(cells, finished), opts, say=log)


def dry_run(cfg: SweepConfig, out: Path, cells: list[Cell] | None = None) -> int:
    """Print the cells the sweep would run (and which are already done in ``out``) without running any."""
    check_output_dir(out)
    list_cells(cfg.name, cfg.cells() if cells is None else cells, out, cfg.resources)
    return exits.EXIT_OK


# ---------------------------------------------------------------------- the CLI
def _parser() -> argparse.ArgumentParser:
    return run_parser(
        "python -m unitta.sweep",
        "Run a UniTTA sweep: config -> cells -> Ray tasks -> Parquet results.",
        ["python -m unitta.sweep sweeps/quick.yaml",
         "python -m unitta.sweep sweeps/quick.yaml --local --output /tmp/quick",
         "python -m unitta.sweep sweeps/quick.yaml methods=[test,bn] settings=[i111] n_per_domain=100 output=out/q2",
         "python -m unitta.sweep sweeps/full_grid.yaml --dry-run",
         "ray job submit -- python -m unitta.sweep sweeps/full_grid.yaml"],
        "sweep YAML (see sweeps/)",
    )


def _report(cfg: SweepConfig, cells: list[Cell], outcome: RunOutcome) -> int:
    """Print the summary table and the failed cells; the exit code (1 if any cell of the grid failed)."""
    import polars as pl

    df = load_results(outcome.out_dir)  # not sweep=: a read-only folder from before membership has no record
    # the ids the run planned (the weights may have changed on disk since, which would change the ids)
    ids = outcome.cell_ids or [c.cell_id() for c in cells]
    mine = df.filter(pl.col("cell_id").is_in(ids))
    print(summary_table(mine))
    failed = mine.filter(pl.col("status") == STATUS_FAILED)
    print(
        f"\n{outcome.n_ok + outcome.n_failed} cells run ({outcome.n_failed} failed"
        + (f", {outcome.n_chance} with the source model at chance" if outcome.n_chance else "")
        + f"), {outcome.n_skipped} already done, in {outcome.seconds:.1f} s; "
        f"results: {outcome.results_path or outcome.out_dir}"
    )
    for line in failure_lines(failed, outcome.out_dir / "logs"):
        print(line)
    if failed.height or outcome.n_failed:
        print(f"exit {exits.EXIT_FAILED_CELLS}: some cells failed; rerun the same command to retry them")
    _warn_short_segments(cfg)  # with the results they qualify (a run that fails to start prints only its error)
    return exits.EXIT_FAILED_CELLS if failed.height or outcome.n_failed else exits.EXIT_OK


def _warn_short_segments(cfg: SweepConfig) -> None:
    """The config's continual streams with domain segments of a few batches, one line each on stderr
    (``unitta.evaluate.segments``; docs/streams.md, "Stream length")."""
    for warning in short_segment_warnings(cfg.cells()):
        print(warning, file=sys.stderr)


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(list(argv) if argv is not None else None)
    out_hint = Path(args.output) if args.output else None

    def body() -> int:
        cfg = load_config(args.config, args.overrides)
        out = (out_hint or cfg.output_dir()).expanduser()
        check_output_dir(out)
        cells = cfg.cells()  # planned once for the whole command
        if args.dry_run:  # the cells first, fast; then the checks (--no-preflight skips them)
            code = dry_run(cfg, fresh_output_dir(out) if args.fresh else out, cells)  # --fresh: the folder it would use
            if not args.no_preflight:
                sys.stdout.flush()
                preflight(cells, num_gpus=cfg.resources.num_gpus, local=args.local)
            _warn_short_segments(cfg)  # after the checks: a config that cannot run prints only its error
            return code
        if not args.no_preflight:
            preflight(cells, num_gpus=cfg.resources.num_gpus, local=args.local)
        opts = run_options(args)
        outcome = run_sweep(
            cfg, out, local=opts.local, fresh=opts.fresh, address=opts.address, num_cpus=opts.num_cpus,
            wait_for_resources=opts.wait_for_resources, progress=opts.progress, argv=opts.argv, cells=cells,
            track=opts.track,
        )
        return _report(cfg, cells, outcome)

    return run_command(body)
