"""A local ledger of the cells a file-based tracker holds (W&B offline runs, TensorBoard event files).

MLflow finds a run by its ``unitta.cell_id`` tag on the server. W&B's offline runs cannot be searched (its query
API needs the W&B server) and TensorBoard keeps no index, so these trackers record each cell id in a text file
next to the runs they wrote, once the run is complete: a cell in the ledger is not logged again
(docs/tracking.md, "No duplicates").
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Ledger"]


class Ledger:
    """One cell id per line, appended and synced after the cell's run is complete."""

    def __init__(self, folder: Path, name: str = "unitta-logged-cells.txt") -> None:
        self.path = Path(folder) / name

    def read(self) -> set[str]:
        if not self.path.is_file():
            return set()
        return {line.strip() for line in self.path.read_text().splitlines() if line.strip()}

    def add(self, cell_id: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(cell_id + "\n")
            handle.flush()
            os.fsync(handle.fileno())
