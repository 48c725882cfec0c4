"""TensorBoard: one event-file folder per cell, ``<dir>/<sweep>/<cell_id>/`` (docs/tracking.md).

Each cell's folder holds its metrics as scalars at step 0, the error curve and round errors as scalars over
steps, per-domain errors as ``domain_error/<name>``, its parameters (numbers as numbers) in TensorBoard's HParams
dashboard with every numeric metric declared there, and its
``unitta.*`` tags as text; the folders of one sweep sit under the sweep's name (TensorBoard's run selector
groups them like a parent run). A local ledger (``unitta.track.ledger``) records the cells written: a cell
folder that is not in it (cut off mid-write) is rewritten whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from unitta.track.cell_run import CellRun
from unitta.track.ledger import Ledger
from unitta.track.tracker import TrackerError, short_reason

__all__ = ["TensorboardTracker"]


class TensorboardTracker:
    """Cells as TensorBoard event files under ``directory``."""

    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory).resolve()
        self.ledger = Ledger(self.dir)

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

    def finish(self) -> None:
        pass

    def where(self) -> dict[str, Any]:
        return {"dir": str(self.dir)}

    def track_command(self, out: Path) -> str:
        return f"unitta track {out} --tensorboard {self.dir}"
