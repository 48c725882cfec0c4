"""Weights & Biases: one run per cell, grouped by its sweep / tune / select (docs/tracking.md).

W&B has no nested runs: a cell's run carries its sweep's name as its ``group`` (the W&B UI's grouping), its
parameters and ``unitta.*`` tags as its config, its metrics and per-domain errors as its summary and the
error curve / round errors as metrics over steps. Its id is derived from the cell id, so syncing a cell twice
updates one W&B run. ``mode: offline`` (the default) writes local files only (``<dir>/wandb/offline-run-*``,
uploaded later with ``wandb sync``); a local ledger (``unitta.track.ledger``) records the cells written there.

The sweep itself is one more run in the group, ``job_type='sweep'`` (id derived from the sweep's name): open
while the sweep runs, with W&B's system stats unless ``tracking: {system_metrics: false}``; at the end its config
(dotted keys), summary table and files (the config copy; the heatmaps, tables and report when analysis runs on the
folder) saved with ``run.save`` (works offline: copied into the run's files). A running cell's ``error_so_far``
values are kept here and written into its run's history when the cell ends (``images`` their x-axis): one W&B
run per cell stays the unit, no run left open per running cell.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from unitta.schema import WANDB_MODES
from unitta.track.cell_run import CellRun
from unitta.track.ledger import Ledger
from unitta.track.sweep_run import LiveValue, SweepRun
from unitta.track.tracker import TrackerError, short_reason

__all__ = ["WandbTracker", "WANDB_MODES", "wandb_run_id", "wandb_sweep_id"]

_ID = re.compile(r"[^A-Za-z0-9_-]")
INIT_TIMEOUT_S = 30.0  # online, a W&B host that does not answer is given up on after this (W&B's default: 90 s)


def wandb_run_id(cell_id: str) -> str:
    """The W&B run id of a cell (W&B ids take letters, digits, '_' and '-')."""
    return _ID.sub("-", cell_id)[:64]


def wandb_sweep_id(sweep: str) -> str:
    """The W&B run id of a sweep's own run (the group's ``job_type='sweep'`` run)."""
    return wandb_run_id(f"sweep-{sweep}")


def _settings(stats: bool):
    import wandb

    return wandb.Settings(silent=True, console="off", x_disable_stats=not stats, x_disable_meta=True,
                          disable_git=True, save_code=False, x_save_requirements=False, init_timeout=INIT_TIMEOUT_S)


class WandbTracker:
    """Cells as W&B runs of ``project`` in ``mode``, files under ``<dir>/wandb``."""

    name = "wandb"

    def __init__(self, project: str, mode: str, directory: Path, entity: str | None = None,
                 system_metrics: bool = True) -> None:
        self.project, self.mode, self.dir, self.entity = project, mode, Path(directory).resolve(), entity
        self.system_metrics = system_metrics
        self.sweeps: dict[str, Any] = {}  # sweep name -> its open W&B run
        self.live_values: dict[str, list[tuple[int, float]]] = {}  # cell id -> [(images, error so far)]
        self.ledger = Ledger(self.dir / "wandb", f"unitta-logged-cells-{_ID.sub('_', project)}.txt")

    def open(self) -> set[str]:
        if self.mode not in WANDB_MODES:
            raise TrackerError(f"mode {self.mode!r} is not one of {', '.join(WANDB_MODES)} (tracking.wandb.mode)")
        import wandb  # noqa: F401  (a broken install fails here, once, not per cell)

        self.dir.mkdir(parents=True, exist_ok=True)
        return self.ledger.read()

    def log(self, run: CellRun) -> None:
        if self.mode == "disabled":
            return
        import wandb

        settings = _settings(stats=False)
        try:
            handle = wandb.init(project=self.project, entity=self.entity, mode=self.mode, dir=str(self.dir),
                                id=wandb_run_id(run.cell_id), name=run.name, group=run.sweep, job_type="cell",
                                config={**run.params, **run.tags}, reinit="create_new", settings=settings)
            by_step: dict[int, dict[str, float]] = {}
            for name, steps in run.curves.items():  # W&B steps only go up: every curve's value of a step at once
                for step, value in steps:
                    by_step.setdefault(step, {})[name] = value
            for step in sorted(by_step):
                handle.log(by_step[step], step=step)
            live = self.live_values.pop(run.cell_id, [])
            if live:
                handle.define_metric("error_so_far", step_metric="images")
                step = max(by_step, default=-1) + 1
                for i, (images, error) in enumerate(live):
                    handle.log({"images": images, "error_so_far": error}, step=step + i)
            handle.summary.update(run.metrics)
            handle.finish()
        except Exception as exc:  # wandb.Error, a network error online, a full disk ...
            raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None
        self.ledger.add(run.cell_id)

    def _sweep_run(self, sweep: str):
        """The sweep's own run, opened (resumed: the same id) if it is not open."""
        import wandb

        if sweep not in self.sweeps:
            self.sweeps[sweep] = wandb.init(
                project=self.project, entity=self.entity, mode=self.mode, dir=str(self.dir), id=wandb_sweep_id(sweep),
                name=sweep, group=sweep, job_type="sweep", resume="allow", reinit="create_new",
                settings=_settings(stats=self.system_metrics))
        return self.sweeps[sweep]

    def begin(self, sweep: str) -> None:
        """The sweep starts: its run opens (system stats while it runs)."""
        if self.mode == "disabled":
            return
        try:
            self._sweep_run(sweep)
        except Exception as exc:
            raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None

    def live(self, value: LiveValue) -> None:
        self.live_values.setdefault(value.cell_id, []).append((value.images, value.error))

    def log_sweep(self, run: SweepRun) -> None:
        """The sweep run's config, summary table and files (``unitta.track.sweep_run``)."""
        if self.mode == "disabled":
            return
        try:
            handle = self._sweep_run(run.sweep)
            handle.config.update(run.params, allow_val_change=True)
            handle.summary.update(run.metrics)
        except Exception as exc:
            raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None
        self.attach(run.sweep, run.files)

    def attach(self, sweep: str, files: list[Path], folder: str | None = None) -> None:
        """Files saved with the sweep's run (copied into its files; the same name again replaces the file)."""
        if self.mode == "disabled" or not files:
            return
        try:
            handle = self._sweep_run(sweep)
            for path in files:
                base = Path(path).resolve().parent
                if folder:  # keep the folder in the saved name: <folder>/<file>
                    link = self.dir / "wandb" / "unitta-attach" / sweep / folder / Path(path).name
                    link.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, link)
                    path, base = link, link.parent.parent
                handle.save(str(path), base_path=str(base), policy="now")
        except Exception as exc:
            raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None

    def finish(self) -> None:
        for sweep in sorted(self.sweeps):
            try:
                self.sweeps.pop(sweep).finish()
            except Exception as exc:
                raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None

    def where(self) -> dict[str, Any]:
        return {"project": self.project, "entity": self.entity, "mode": self.mode, "dir": str(self.dir / "wandb")}

    def track_command(self, out: Path) -> str:
        return f"unitta track {out} --wandb {self.mode} --wandb-project {self.project} --wandb-dir {self.dir}"
