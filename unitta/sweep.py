"""`python -m unitta.sweep CONFIG.yaml`: expand a sweep config into cells, run them on Ray, write Parquet.

Examples::

    python -m unitta.sweep sweeps/quick.yaml                     # local Ray on this machine
    python -m unitta.sweep sweeps/quick.yaml --local             # in this process, one cell after another
    ray job submit -- python -m unitta.sweep sweeps/full_grid.yaml   # on a running cluster

What the driver does (DESIGN.md, Sweep; issue 6): validate the config (a mistake is one line on
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
import math
import os
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from unitta.config import ConfigError, SweepConfig, load_config
from unitta.evaluate import Cell
from unitta.results import (
    STATUS_FAILED,
    STATUS_OK,
    cell_coordinates,
    cells_dir,
    consolidate,
    done_cells,
    load_results,
    write_cell_result,
)

__all__ = ["run_cell", "run_sweep", "SweepOutcome", "main", "summary_table", "git_commit", "fresh_output_dir"]

# Exit codes of the CLI.
EXIT_OK, EXIT_FAILED_CELLS, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
TASK_NAME = "unitta_cell"  # Ray names each cell's task (and its worker's process title) after this


# ---------------------------------------------------------------------- one cell
@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The checkout's commit (with '+dirty' when tracked files changed), or None outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}+dirty" if dirty else sha


def _ray_node_id() -> str | None:
    if "ray" not in sys.modules:
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _short_error(exc: BaseException) -> str:
    """'Type: message (at file:line in function)': one line for the error_text column."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def failed_row(cell: Cell, error_text: str, **extra: Any) -> dict[str, Any]:
    """The row of a cell that did not produce results: its coordinates, status 'failed', the error."""
    return {**cell_coordinates(cell), "status": STATUS_FAILED, "error_text": error_text, **extra}


def run_cell(cell: Cell, dataset=None, **extra: Any) -> dict[str, Any]:
    """Run one cell and return its result row; never raises for a failing cell.

    The row is ``evaluate(cell, dataset)``'s, plus status ('ok' | 'failed'), error_text, started_at,
    finished_at, duration_s, hostname, node_id, worker_pid, cuda_visible_devices, git_commit and
    ray_version (docs/results.md). An exception, or a non-finite error, gives a 'failed' row with the
    cell's coordinates and the error text. Torch's thread count is pinned to ``cell.num_threads``.
    ``extra`` columns (e.g. sweep_name, git_commit computed once by the driver) are added to the row.
    """
    import torch

    from unitta.evaluate import evaluate

    if cell.num_threads:
        torch.set_num_threads(cell.num_threads)
    started = _now()
    t0 = time.perf_counter()
    try:
        row = evaluate(cell, dataset=dataset)
        if not math.isfinite(row.get("error", float("nan"))):
            raise FloatingPointError(f"error={row.get('error')} is not finite")
        row["status"], row["error_text"] = STATUS_OK, None
    except Exception as exc:  # a failing cell is a result, not a crash of the sweep
        traceback.print_exc(file=sys.stderr)
        row = failed_row(cell, _short_error(exc))
    row.update(
        started_at=started,
        finished_at=_now(),
        duration_s=time.perf_counter() - t0,
        hostname=socket.gethostname(),
        node_id=_ray_node_id(),
        worker_pid=os.getpid(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        ray_version=_ray_version(),
    )
    row.setdefault("length", cell.length)
    row.setdefault("factor_overrides", json.dumps(cell.factors, sort_keys=True))
    row.setdefault("num_threads", torch.get_num_threads())
    if "git_commit" not in extra:
        row["git_commit"] = git_commit()
    row.update(extra)
    return row


def _ray_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("ray")
    except Exception:  # ray is optional for --local runs
        return None


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


def _cell_task(cell: Cell, dataset, extra: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The Ray task of one cell; ``dataset`` arrives from the object store (numpy arrays zero-copy)."""
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


def fresh_output_dir(out_dir: Path) -> Path:
    """``out_dir`` if it is absent or empty, else a new sibling '<out_dir>-<UTC timestamp>' (never deletes)."""
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return out_dir
    stamp = _now().strftime("%Y%m%d-%H%M%S")
    candidate = out_dir.with_name(f"{out_dir.name}-{stamp}")
    n = 2
    while candidate.exists():
        candidate = out_dir.with_name(f"{out_dir.name}-{stamp}-{n}")
        n += 1
    return candidate


def _dataset_key(cell: Cell) -> tuple:
    return (cell.dataset, cell.data_dir, cell.severity, cell.n_per_domain)


def _load_dataset(cell: Cell):
    from unitta.data import load_dataset

    return load_dataset(cell.dataset, data_dir=cell.data_dir, severity=cell.severity, n_per_domain=cell.n_per_domain)


def _write_manifest(out_dir: Path, cfg: SweepConfig, n_cells: int, mode: str, argv: list[str] | None) -> None:
    import yaml

    from unitta import __version__

    (out_dir / "sweep.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"runs": []}
    manifest.update(name=cfg.name, config_hash=cfg.config_hash(), n_cells=n_cells)
    manifest["runs"].append(
        {
            "started_at": _now().isoformat(),
            "mode": mode,
            "git_commit": git_commit(),
            "unitta_version": __version__,
            "ray_version": _ray_version(),
            "hostname": socket.gethostname(),
            "argv": argv,
            "config_hash": cfg.config_hash(),
        }
    )
    tmp = manifest_path.with_name(".manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, manifest_path)


class _Progress:
    """tqdm bar over the cells to run: done / failed / running in the postfix, ETA from tqdm."""

    def __init__(self, total: int, name: str, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.ok = self.failed = 0
        # not a terminal (e.g. `ray job submit` logs): a line every 30 s instead of a live bar
        interactive = sys.stderr.isatty()
        self.bar = tqdm(total=total, desc=name, unit="cell", disable=not enabled, dynamic_ncols=True,
                        mininterval=0.1 if interactive else 30.0)

    def update(self, status: str | None, running: int) -> None:
        if status == STATUS_OK:
            self.ok += 1
        elif status == STATUS_FAILED:
            self.failed += 1
        self.bar.set_postfix_str(f"done={self.ok} failed={self.failed} running={running}", refresh=False)
        if status is not None:
            self.bar.update(1)
        else:
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def _record(out_dir: Path, row: dict[str, Any], log: str) -> None:
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{row['cell_id']}.log").write_text(log)
    write_cell_result(out_dir, row)  # last: a cell counts as done only once its row is on disk


def _connect_ray(address: str | None, num_cpus: int | None = None):
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
    if address is not None:
        kwargs["address"] = address
    try:  # the address ray.init would join: --address, RAY_ADDRESS, or a `ray start` cluster on this machine
        from ray._private.services import canonicalize_bootstrap_address

        joining = canonicalize_bootstrap_address(address) is not None
    except ImportError:  # a Ray without this helper: join only what is named
        joining = (address or os.environ.get("RAY_ADDRESS") or "local") != "local"
    if not joining:  # no cluster to join: start a local one
        kwargs.update(include_dashboard=False, num_cpus=num_cpus)
    ray.init(**kwargs)
    return ray, True


def _capacity(ray, cfg: SweepConfig) -> int:
    """How many cells fit on the cluster at once (for the progress bar's 'running' figure)."""
    total = ray.cluster_resources()
    fits = [total.get("CPU", 0) / cfg.resources.num_cpus]
    if cfg.resources.num_gpus > 0:
        fits.append(total.get("GPU", 0) / cfg.resources.num_gpus)
    return max(0, int(min(fits) + 1e-9))


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path | None = None,
    *,
    local: bool = False,
    fresh: bool = False,
    address: str | None = None,
    progress: bool = True,
    num_cpus: int | None = None,
    argv: list[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run every cell of ``cfg`` that has no 'ok' result in ``out_dir`` yet; see the module docstring.

    local: run cells in this process (no Ray). fresh: write into a new directory when ``out_dir``
    already holds results. address: the Ray cluster to join (None: RAY_ADDRESS, a ``ray start``
    cluster on this machine, or a new local Ray with ``num_cpus`` CPUs).
    """
    say = log or (lambda text: print(text, file=sys.stderr))
    start = time.perf_counter()
    out = Path(out_dir) if out_dir is not None else cfg.output_dir()
    if fresh:
        new = fresh_output_dir(out)
        if new != out:
            say(f"--fresh: writing into {new} (the results in {out} are kept)")
        out = new
    cells = cfg.cells()
    finished = done_cells(out)
    todo = [c for c in cells if c.cell_id() not in finished]
    outcome = SweepOutcome(out_dir=out, n_cells=len(cells), n_skipped=len(cells) - len(todo))
    if outcome.n_skipped:
        say(f"resume: {outcome.n_skipped} of {len(cells)} cells already done in {out}")

    extra = {"sweep_name": cfg.name, "git_commit": git_commit()}
    if todo:
        out.mkdir(parents=True, exist_ok=True)
        for stale in cells_dir(out).glob(".*.tmp"):  # temp files of a killed driver: never results
            stale.unlink(missing_ok=True)
        if local:
            _write_manifest(out, cfg, len(cells), "local", argv)
            _run_local(todo, out, extra, cfg, progress, outcome)
        else:
            _run_ray(todo, out, extra, cfg, progress, outcome, address, num_cpus, argv)
    outcome.results_path = consolidate(out)
    outcome.seconds = time.perf_counter() - start
    return outcome


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
            _record(out, row, text)
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


def _run_ray(todo, out, extra, cfg, progress, outcome, address, num_cpus, argv):
    ray, started_here = _connect_ray(address, num_cpus)
    from ray.exceptions import RayError

    task = ray.remote(_cell_task)
    try:
        resources = ray.cluster_resources()
        if cfg.resources.num_gpus > resources.get("GPU", 0):
            print(
                f"warning: each cell asks for {cfg.resources.num_gpus} GPU(s) but the cluster has "
                f"{resources.get('GPU', 0)} now; cells wait until an autoscaler adds GPU nodes",
                file=sys.stderr,
            )
        # one copy of each dataset per sweep in the object store; every task gets the same ref
        refs: dict[tuple, Any] = {}
        for cell in todo:
            key = _dataset_key(cell)
            if key not in refs:
                refs[key] = ray.put(_load_dataset(cell))
        _write_manifest(out, cfg, outcome.n_cells, "ray", argv)
        pending: dict[Any, Cell] = {}
        for cell in todo:
            ref = task.options(
                num_cpus=cfg.resources.num_cpus,
                num_gpus=cfg.resources.num_gpus,
                max_retries=cfg.max_retries,
                retry_exceptions=False,  # run_cell turns exceptions into 'failed' rows; retries are for lost workers
                name=f"{TASK_NAME}:{cell.method}:{cell.setting}",
            ).remote(cell, refs[_dataset_key(cell)], extra)
            pending[ref] = cell
        capacity, checked = _capacity(ray, cfg), time.monotonic()
        bar = _Progress(len(todo), cfg.name, progress)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                if time.monotonic() - checked > 30:  # autoscaling clusters grow and shrink
                    capacity, checked = _capacity(ray, cfg), time.monotonic()
                if not ready:
                    bar.update(None, min(len(pending), capacity))
                    continue
                for ref in ready:
                    cell = pending.pop(ref)
                    try:
                        row, text = ray.get(ref)
                    except RayError as exc:  # the worker died more than max_retries times, or similar
                        row = failed_row(cell, _short_error(exc), finished_at=_now(), **extra)
                        text = f"cell {cell.cell_id()}\nfailed in Ray: {exc}\n"
                    _record(out, row, text)
                    _count(outcome, row)
                    bar.update(row["status"], min(len(pending), capacity))
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()
    finally:
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------------- the summary
def summary_table(df, value: str = "error") -> str:
    """Method x setting table of mean ``value`` (over seeds, batch sizes, factors), one block per dataset."""
    import polars as pl

    if df.height == 0:
        return "(no results)"
    blocks = []
    for (dataset, model), part in df.sort("dataset").group_by(["dataset", "model"], maintain_order=True):
        settings = list(dict.fromkeys(part["setting"].to_list()))
        methods = list(dict.fromkeys(part["method"].to_list()))
        ok = part.filter(pl.col("status") == STATUS_OK)
        means = {
            (r["method"], r["setting"]): r[value]
            for r in ok.group_by(["method", "setting"]).agg(pl.col(value).mean()).iter_rows(named=True)
        }
        failed = {
            (r["method"], r["setting"])
            for r in part.filter(pl.col("status") == STATUS_FAILED).select("method", "setting").iter_rows(named=True)
        }
        width = max(6, *(len(s) for s in settings))
        mwidth = max(6, *(len(m) for m in methods))
        lines = [f"{dataset} ({model}): {value} (%) per method x setting", ""]
        lines.append(" ".join([f"{'method':<{mwidth}}", *(f"{s:>{width}}" for s in settings), f"{'avg':>{width}}"]))
        for m in methods:
            cells = []
            vals = []
            for s in settings:
                if (m, s) in means:
                    cells.append(f"{means[(m, s)]:>{width}.2f}")
                    vals.append(means[(m, s)])
                elif (m, s) in failed:
                    cells.append(f"{'failed':>{width}}")
                else:
                    cells.append(f"{'-':>{width}}")
            avg = f"{sum(vals) / len(vals):>{width}.2f}" if len(vals) == len(settings) else f"{'-':>{width}}"
            lines.append(" ".join([f"{m:<{mwidth}}", *cells, avg]))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------- the CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m unitta.sweep",
        description="Run a UniTTA sweep: config -> cells -> Ray tasks -> Parquet results.",
        epilog="examples:\n  python -m unitta.sweep sweeps/quick.yaml\n"
        "  python -m unitta.sweep sweeps/quick.yaml --local --output /tmp/quick\n"
        "  ray job submit -- python -m unitta.sweep sweeps/full_grid.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="sweep YAML (see sweeps/)")
    p.add_argument("--output", help="output directory (overrides the config's 'output')")
    p.add_argument("--local", action="store_true", help="run the cells in this process, one after another (no Ray)")
    p.add_argument("--fresh", action="store_true",
                   help="start over in a new directory '<output>-<timestamp>' when the output already has results")
    p.add_argument("--address", help="Ray cluster address; 'local' starts a new local Ray "
                   "(default: RAY_ADDRESS, else a cluster started with `ray start` on this machine, else a new local Ray)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a new local Ray (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    out = (Path(args.output) if args.output else cfg.output_dir()).expanduser()
    try:
        outcome = run_sweep(
            cfg, out, local=args.local, fresh=args.fresh, address=args.address, num_cpus=args.num_cpus,
            progress=not args.no_progress, argv=sys.argv,
        )
    except KeyboardInterrupt:
        print(f"interrupted: finished cells are saved in {out}; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    df = load_results(outcome.out_dir)
    wanted = {c.cell_id() for c in cfg.cells()}
    import polars as pl

    print(summary_table(df.filter(pl.col("cell_id").is_in(list(wanted)))))
    failed = df.filter(pl.col("cell_id").is_in(list(wanted)) & (pl.col("status") == STATUS_FAILED))
    print(
        f"\n{outcome.n_ok + outcome.n_failed} cells run ({outcome.n_failed} failed), {outcome.n_skipped} "
        f"already done, in {outcome.seconds:.1f} s; results: {outcome.results_path}"
    )
    for r in failed.iter_rows(named=True):
        print(f"failed: {r['cell_id']}: {r['error_text']} (log: {outcome.out_dir / 'logs' / (r['cell_id'] + '.log')})")
    if failed.height:
        print("rerun the same command to retry the failed cells")
    return EXIT_FAILED_CELLS if failed.height else EXIT_OK


if __name__ == "__main__":
    # import under the package name so Ray ships tasks by reference to unitta.sweep, not by value
    from unitta.sweep import main as _main

    sys.exit(_main())
