"""Where cells run: in this process, one after another (``--local``), or as Ray tasks.

Both backends take cells with ``submit`` and hand back finished ones with ``wait``:
``(cell, row, log text)`` triples, rows from ``unitta.evaluate.run_cell``. The Ray backend puts each
dataset in the object store once, submits one task per cell with the config's ``num_cpus`` /
``num_gpus`` and ``max_retries`` for lost workers, resubmits a cell whose result Ray lost, reports each
lost node in one line and sends Ray's own cluster messages to ``<out>/logs/ray.log`` (docs/results.md).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unitta.cell import Cell
from unitta.evaluate import failed_row, short_error
from unitta.evaluate.inputs import cell_severities, load_cell_dataset
from unitta.evaluate.provenance import now
from unitta.run import ray_cluster
from unitta.run.capture import TASK_NAME, cell_task, execute
from unitta.run.cell_progress import SEND_EVERY_S, ImagesBoard

__all__ = ["Finished", "LocalBackend", "RayBackend", "LOST_NODE_GRACE_S"]

LOST_NODE_GRACE_S = 20.0  # how long a run that saw Ray errors waits at its end for a node loss to be declared
STALL_WARN_S = 60.0  # no cell finished this long: say so if other jobs hold the cluster

Finished = tuple[Cell, dict[str, Any], str]


def dataset_key(cell: Cell) -> tuple:
    return (cell.dataset, cell.data_dir, cell_severities(cell), cell.n_per_domain, cell.corruptions, cell.domains,
            cell.classes, cell.datasets_as_domains, cell.cache_images,
            cell.model if cell.dataset in ("folder",) or ":" in (cell.model or "") else None)


class LocalBackend:
    """Cells run in the driver process, in submission order (a debugger's breakpoints work)."""

    mode = "local"

    def __init__(self, extra: dict[str, Any]) -> None:
        self.extra = extra
        self.queue: deque[tuple[Cell, Any]] = deque()
        self.datasets: dict[tuple, Any] = {}
        self.board = ImagesBoard()
        self.on_images: Callable[[dict[str, tuple[int, int]]], None] | None = None  # the progress line's
        self.on_live: Callable[[Cell, int, int], None] | None = None  # (cell, positions, wrong): the trackers'
        self.current: Cell | None = None

    def _send(self, cell_id: str, done: int, total: int, errors: tuple[int, int] | None = None) -> None:
        self.board.put(cell_id, done, total)
        if self.on_images is not None:
            self.on_images(self.board.snapshot())
        if errors is not None and self.on_live is not None and self.current is not None:
            self.on_live(self.current, *errors)

    def start(self, write: Callable[[str], None]) -> None:
        pass

    def submit(self, cell: Cell, report=None) -> None:
        """Queue ``cell``; ``report``: its progress-report hook (``unitta.evaluate.adapt.Report``), if any."""
        self.queue.append((cell, report))

    @property
    def pending(self) -> int:
        return len(self.queue)

    def running(self) -> int:
        return min(1, len(self.queue))

    def wait(self) -> list[Finished]:
        cell, report = self.queue.popleft()
        key = dataset_key(cell)
        if key not in self.datasets:  # missing or damaged: DatasetUnavailable, one line and exit 2
            self.datasets[key] = load_cell_dataset(cell)
        self.current = cell
        row, text = execute(cell, self.datasets[key], self.extra, echo=False, report=report, send_images=self._send)
        self.current = None
        self.board.drop(cell.cell_id())
        if self.on_images is not None:
            self.on_images(self.board.snapshot())
        return [(cell, row, text)]

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


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


class RayBackend:
    """Cells as Ray tasks on the cluster ``address`` names (``unitta.run.ray_cluster.connect``)."""

    mode = "ray"

    def __init__(
        self,
        extra: dict[str, Any],
        cfg,
        out: Path,
        address: str | None,
        num_cpus: int | None,
        wait_for_resources: float,
    ) -> None:
        self.extra, self.cfg, self.out = extra, cfg, out
        self.address, self.num_cpus, self.wait_for_resources = address, num_cpus, wait_for_resources
        self.refs: dict[tuple, Any] = {}
        self.in_flight: dict[Any, Cell] = {}
        self.reports: dict[str, Any] = {}  # cell id -> its progress-report hook (kept for a resubmission)
        self.resubmitted: dict[str, int] = {}
        self.reported_lost: list[str] = []
        self.ray: Any = None  # the ray module once connected (``start``)
        self.started_here = False
        self.messages: ray_cluster.RayMessages | None = None
        self.board: Any = None  # the ImagesBoard actor the cells tell their progress in images
        self.on_images: Callable[[dict[str, tuple[int, int]]], None] | None = None  # the progress line's
        self.on_live: Callable[[Cell, int, int], None] | None = None  # (cell, positions, wrong): the trackers'
        self.live_seen: dict[str, tuple[int, int]] = {}  # the errors so far last passed on, per cell
        self.images_read = 0.0

    def start(self, write: Callable[[str], None]) -> None:
        """Connect, divert Ray's cluster messages, check that one node fits a cell; ``write`` prints a line."""
        from unitta import plugins
        from unitta.methods.parts import backend

        self.write = write
        # the plugins' files travel to every worker (Ray's py_modules); cfg.plugins are imported on this driver already
        # and so do the files of model builders (``models: {folder: my_models.py:build}``; docs/own_data.md)
        builders = plugins.model_builders(getattr(self.cfg, "models", None))
        runtime_env = plugins.runtime_env([*plugins.load(self.cfg.plugins), *builders])
        self.ray, self.started_here = ray_cluster.connect(self.address, self.num_cpus, runtime_env=runtime_env)
        joined = ray_cluster.joined_line(self.ray)
        niceness = self.cfg.resources.niceness
        # merged into the job's runtime_env by Ray; set also at 0, or Ray's default (15) applies; the backend
        # settings of this process (UNITTA_CUDNN_BENCHMARK) go to the workers too
        self.task_env = {"env_vars": {ray_cluster.WORKER_NICENESS: str(niceness), **backend.environment()}}
        lowered = ray_cluster.niceness_note(niceness)
        if joined or lowered:
            write("; ".join(line for line in (joined, lowered) if line))
        self.task = self.ray.remote(cell_task)
        self.board = self.ray.remote(num_cpus=0)(ImagesBoard).remote()
        need = self.cfg.resources
        # a dead node's raylet logs and Ray's retry notices: to a file, not dozens of lines on the driver's stdout
        self.messages = ray_cluster.RayMessages(self.out / "logs" / "ray.log", say=lambda t: print(t, file=sys.stderr))
        self.messages.install()
        ray_cluster.check_fits(self.ray, need.num_cpus, need.num_gpus, wait_s=self.wait_for_resources)
        self.capacity, self.checked = ray_cluster.capacity(self.ray, need.num_cpus, need.num_gpus), time.monotonic()
        self.nodes, self.watched = ray_cluster.NodeWatch(self.ray), time.monotonic()
        self.waiting = _WaitWatch(self.ray, need, started=time.monotonic())

    def submit(self, cell: Cell, report=None) -> None:
        """Submit ``cell`` as a task; ``report``: its progress-report hook (picklable: it travels to the worker)."""
        if report is not None:
            self.reports[cell.cell_id()] = report
        key = dataset_key(cell)
        if key not in self.refs:  # one copy of each dataset per run in the object store; every task gets the same ref
            self.refs[key] = self.ray.put(load_cell_dataset(cell))
        ref = self.task.options(
            num_cpus=self.cfg.resources.num_cpus,
            num_gpus=self.cfg.resources.num_gpus,
            max_retries=self.cfg.max_retries,
            retry_exceptions=False,  # run_cell turns exceptions into 'failed' rows; retries are for lost workers
            name=f"{TASK_NAME}:{cell.method}:{cell.setting}",
            runtime_env=self.task_env,
        ).remote(cell, self.refs[key], self.extra, tuple(self.cfg.plugins), self.reports.get(cell.cell_id()),
                 self.board)
        self.in_flight[ref] = cell

    @property
    def pending(self) -> int:
        return len(self.in_flight)

    def running(self) -> int:
        return min(len(self.in_flight), self.capacity)

    def _report_lost_nodes(self) -> bool:
        """One line per lost node; Ray reruns its tasks (max_retries)."""
        lost = self.nodes.lost()
        for line in lost:
            self.write(line)
        self.reported_lost.extend(lost)
        return bool(lost)

    def _watch(self) -> None:
        need = self.cfg.resources
        if time.monotonic() - self.watched > 5:
            if self._report_lost_nodes():
                self.checked = 0.0
            self.watched = time.monotonic()
        if time.monotonic() - self.checked > 30:  # autoscaling clusters grow and shrink
            self.capacity, self.checked = ray_cluster.capacity(self.ray, need.num_cpus, need.num_gpus), time.monotonic()

    def wait(self) -> list[Finished]:
        """The cells that finished within a second (maybe none); a cell Ray lost is resubmitted first."""
        from ray.exceptions import RayError

        ready, _ = self.ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
        self.waiting.check(ready, self.running(), self.write)
        self._watch()
        self._read_images()
        done: list[Finished] = []
        for ref in ready:
            cell = self.in_flight.pop(ref)
            with contextlib.suppress(Exception):
                self.board.drop.remote(cell.cell_id())
            try:
                row, text = self.ray.get(ref)
            except RayError as exc:  # a lost worker, node or result object after Ray's own retries
                tries = self.resubmitted.get(cell.cell_id(), 0)
                if tries < self.cfg.max_retries:  # the cell itself did not fail: run it again elsewhere
                    self.resubmitted[cell.cell_id()] = tries + 1
                    self.submit(cell)
                    continue
                row = failed_row(cell, short_error(exc), finished_at=now(), **self.extra)
                text = f"cell {cell.cell_id()}\nfailed in Ray: {exc}\n"
            done.append((cell, row, text))
        return done

    def _read_images(self) -> None:
        """The running cells' progress in images, to the progress line (at most every SEND_EVERY_S; a slow or
        lost board is skipped: progress never holds the run up)."""
        if (self.on_images is None and self.on_live is None) or time.monotonic() - self.images_read < SEND_EVERY_S:
            return
        self.images_read = time.monotonic()
        running = {cell.cell_id(): cell for cell in self.in_flight.values()}
        try:
            snapshot, errors = self.ray.get(self.board.read.remote(), timeout=1.0)
        except Exception:
            return
        if self.on_images is not None:
            self.on_images({cell_id: v for cell_id, v in snapshot.items() if cell_id in running})
        for cell_id, value in errors.items():  # a running cell's error so far, each new value once
            if self.on_live is not None and cell_id in running and self.live_seen.get(cell_id) != value:
                self.live_seen[cell_id] = value
                self.on_live(running[cell_id], *value)

    def finish(self) -> None:
        """After the last cell: report a node lost while the last cells ran."""
        self._report_lost_nodes()
        if self.messages is not None and self.messages.count and not self.reported_lost:
            # Ray published errors (e.g. a dead raylet's workers) but its GCS has not declared a node dead
            # yet (health checks, ~15 s by default): give it that long, so that a loss is still reported
            deadline = time.monotonic() + LOST_NODE_GRACE_S
            while time.monotonic() < deadline and not self._report_lost_nodes():
                time.sleep(0.5)

    def close(self) -> None:
        """Cancel what still runs (an interrupted run), restore Ray's messages, shut down a Ray started here.

        A Ray started here is shut down with its workers, tasks included: force-cancelling them first races with
        replies already on their way (Ray 2.60 then aborts the driver: "Tried to complete task that was not
        pending", exit 134 instead of 143), so only the tasks of a joined cluster are cancelled one by one.
        """
        if self.ray is None:
            return
        if not self.started_here:
            for ref in self.in_flight:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
        if self.messages is not None:
            self.messages.restore()
        if self.started_here:
            self.ray.shutdown()
