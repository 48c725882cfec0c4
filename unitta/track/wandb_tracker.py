"""Weights & Biases: one run per cell, grouped by its sweep / tune / select (docs/tracking.md).

W&B has no nested runs: a cell's run carries its sweep's name as its ``group`` (the W&B UI's grouping), its
parameters and ``unitta.*`` tags as its config, its metrics and per-domain errors as its summary and the
error curve / round errors as metrics over steps. Its id is derived from the cell id, so syncing a cell twice
updates one W&B run. ``mode: offline`` (the default) writes local files only (``<dir>/wandb/offline-run-*``,
uploaded later with ``wandb sync``); a local ledger (``unitta.track.ledger``) records the cells written there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from unitta.schema import WANDB_MODES
from unitta.track.cell_run import CellRun
from unitta.track.ledger import Ledger
from unitta.track.tracker import TrackerError, short_reason

__all__ = ["WandbTracker", "WANDB_MODES", "wandb_run_id"]

_ID = re.compile(r"[^A-Za-z0-9_-]")
INIT_TIMEOUT_S = 30.0  # online, a W&B host that does not answer is given up on after this (W&B's default: 90 s)


def wandb_run_id(cell_id: str) -> str:
    """The W&B run id of a cell (W&B ids take letters, digits, '_' and '-')."""
    return _ID.sub("-", cell_id)[:64]


class WandbTracker:
    """Cells as W&B runs of ``project`` in ``mode``, files under ``<dir>/wandb``."""

    name = "wandb"

    def __init__(self, project: str, mode: str, directory: Path, entity: str | None = None) -> None:
        self.project, self.mode, self.dir, self.entity = project, mode, Path(directory).resolve(), entity
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

        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_meta=True,
                                  disable_git=True, save_code=False, x_save_requirements=False,
                                  init_timeout=INIT_TIMEOUT_S)
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
            handle.summary.update(run.metrics)
            handle.finish()
        except Exception as exc:  # wandb.Error, a network error online, a full disk ...
            raise TrackerError(f"{self.mode}: {short_reason(exc)}") from None
        self.ledger.add(run.cell_id)

    def finish(self) -> None:
        pass

    def where(self) -> dict[str, Any]:
        return {"project": self.project, "entity": self.entity, "mode": self.mode, "dir": str(self.dir / "wandb")}

    def track_command(self, out: Path) -> str:
        return f"unitta track {out} --wandb {self.mode} --wandb-project {self.project} --wandb-dir {self.dir}"
