"""TensorBoard: one event-file folder per cell, ``<dir>/<sweep>/<cell_id>/`` (docs/tracking.md).

Each cell's folder holds its metrics as scalars at step 0, the error curve and round errors as scalars over
steps, per-domain errors as ``domain_error/<name>``, its parameters (numbers as numbers) in TensorBoard's HParams
dashboard with every numeric metric declared there, and its
``unitta.*`` tags as text; the folders of one sweep sit under the sweep's name (TensorBoard's run selector
groups them like a parent run). A local ledger (``unitta.track.ledger``) records the cells written: a cell
folder that is not in it (cut off mid-write) is rewritten whole.

The sweep itself is ``<dir>/<sweep>/_run/``: its config as text (the YAML copy, and the flattened parameters),
its summary table as scalars (``error/<method>/<setting>``, ``error/<method>/mean``) and its files copied there
(the config copy; the heatmaps, tables and report when analysis runs on the folder). A running cell writes
``error_so_far`` over images done into its folder; the final row joins it there when the cell ends.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from unitta.track.cell_run import CellRun
from unitta.track.ledger import Ledger
from unitta.track.sweep_run import LiveValue, SweepRun
from unitta.track.tracker import TrackerError, short_reason

__all__ = ["TensorboardTracker", "SWEEP_FOLDER"]

SWEEP_FOLDER = "_run"  # <dir>/<sweep>/_run: the sweep's own run (no cell id starts with '_')


class TensorboardTracker:
    """Cells as TensorBoard event files under ``directory``."""

    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory).resolve()
        self.ledger = Ledger(self.dir)
        self.live_writers: dict[str, Any] = {}  # cell id -> the SummaryWriter of its live values

    def open(self) -> set[str]:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (needs the tensorboard package)

            self.dir.mkdir(parents=True, exist_ok=True)
        except (ImportError, OSError) as exc:
            raise TrackerError(f"{self.dir}: {short_reason(exc)}") from None
        return self.ledger.read()

    def log(self, run: CellRun) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        folder = self.dir / run.sweep / run.cell_id
        try:
            live = self.live_writers.pop(run.cell_id, None)
            if live is not None:
                live.close()  # its error_so_far stays beside the final row
            else:
                shutil.rmtree(folder, ignore_errors=True)  # a folder of a cell not in the ledger is incomplete
            writer = SummaryWriter(log_dir=str(folder))
            wall = (run.end_ms or 0) / 1000 or None
            for name, value in run.metrics.items():
                writer.add_scalar(name, value, 0, walltime=wall)
            for name, steps in run.curves.items():
                for step, value in steps:
                    writer.add_scalar(name, value, step, walltime=wall)
            writer.add_text("unitta_tags", "\n".join(f"{k}: {v}  " for k, v in sorted(run.tags.items())), 0)
            # typed values (a seed is a number in the HParams table) and every numeric metric declared
            for summary in hparams(run.typed_params, dict(run.metrics)):
                writer.file_writer.add_summary(summary)
            writer.close()
        except Exception as exc:  # a full disk, a folder that cannot be written ...
            raise TrackerError(f"{folder}: {short_reason(exc)}") from None
        self.ledger.add(run.cell_id)

    def begin(self, sweep: str) -> None:
        pass  # no system metrics in TensorBoard's event files

    def live(self, value: LiveValue) -> None:
        """A running cell's ``error_so_far`` at step = images done, in its folder (a new folder: a stale one of a
        cell not in the ledger is removed first)."""
        from torch.utils.tensorboard import SummaryWriter

        writer = self.live_writers.get(value.cell_id)
        folder = self.dir / value.sweep / value.cell_id
        try:
            if writer is None:
                shutil.rmtree(folder, ignore_errors=True)
                writer = self.live_writers[value.cell_id] = SummaryWriter(log_dir=str(folder))
            writer.add_scalar("error_so_far", value.error, value.images)
            writer.flush()
        except Exception as exc:
            raise TrackerError(f"{folder}: {short_reason(exc)}") from None

    def log_sweep(self, run: SweepRun) -> None:
        """The sweep's folder ``<sweep>/_run``: config as text, summary as scalars, files copied."""
        from torch.utils.tensorboard import SummaryWriter

        folder = self.dir / run.sweep / SWEEP_FOLDER
        try:
            writer = SummaryWriter(log_dir=str(folder))
            for path in run.files:
                writer.add_text("config", "```\n" + Path(path).read_text() + "\n```", 0)
            if run.params:
                writer.add_text("params", "\n".join(f"{k}: {v}  " for k, v in sorted(run.params.items())), 0)
            for name, value in run.metrics.items():
                writer.add_scalar(name, value, 0)
            writer.close()
        except Exception as exc:
            raise TrackerError(f"{folder}: {short_reason(exc)}") from None
        self.attach(run.sweep, run.files)

    def attach(self, sweep: str, files: list[Path], folder: str | None = None) -> None:
        """Files copied into the sweep's folder (under ``folder``); the same name again overwrites."""
        target = self.dir / sweep / SWEEP_FOLDER / (folder or "")
        try:
            target.mkdir(parents=True, exist_ok=True)
            for path in files:
                shutil.copyfile(path, target / Path(path).name)
        except OSError as exc:
            raise TrackerError(f"{target}: {short_reason(exc)}") from None

    def finish(self) -> None:
        for writer in self.live_writers.values():  # cells that never ended (the run was cut short)
            writer.close()
        self.live_writers.clear()

    def where(self) -> dict[str, Any]:
        return {"dir": str(self.dir)}

    def track_command(self, out: Path) -> str:
        return f"unitta track {out} --tensorboard {self.dir}"
