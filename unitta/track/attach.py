"""Analysis output as artifacts of a tracked folder's parent runs (docs/tracking.md, "Heatmaps, tables and report").

``analysis/heatmaps.py`` and ``analysis/report.py`` call ``attach_to_trackers`` with the files they wrote: for each
results folder with a ``<out>/tracking.json`` (``unitta.results.tracking_record``), the trackers named there are
reopened and the files attached to the parent run of each sweep recorded in the folder (MLflow artifacts, W&B files
of the sweep's run, copies in TensorBoard's ``<sweep>/_run``), under ``folder``. Attaching again replaces the files
(MLflow artifacts and W&B files by path, TensorBoard copies by name): no duplicates. A tracker that cannot be
reached is one warning line; the analysis never fails for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unitta.results.membership import sweep_names
from unitta.results.tracking_record import read_tracking_record
from unitta.track.mlflow_tracker import MlflowTracker
from unitta.track.tensorboard_tracker import TensorboardTracker
from unitta.track.tracker import Tracker, short_reason
from unitta.track.wandb_tracker import WandbTracker

__all__ = ["attach_to_trackers", "recorded_trackers"]


def recorded_trackers(where: dict[str, dict[str, Any]]) -> list[Tracker]:
    """The trackers a ``tracking.json`` names, rebuilt from their ``where`` entries (none opened yet)."""
    trackers: list[Tracker] = []
    if (m := where.get("mlflow")) and m.get("tracking_uri") and m.get("experiment"):
        trackers.append(MlflowTracker(m["tracking_uri"], m["experiment"], system_metrics=False))
    if (w := where.get("wandb")) and w.get("dir") and w.get("project"):
        trackers.append(WandbTracker(w["project"], w.get("mode") or "offline", Path(w["dir"]).parent, w.get("entity"),
                                     system_metrics=False))
    if (t := where.get("tensorboard")) and t.get("dir"):
        trackers.append(TensorboardTracker(Path(t["dir"])))
    return trackers


def _sweeps(out: Path) -> list[str]:
    """The runs recorded in the folder (``<out>/sweeps/<name>.json``), else the manifest's name."""
    names = sweep_names(out)
    if names:
        return names
    try:
        return [str(json.loads((out / "manifest.json").read_text())["name"])]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def attach_to_trackers(dirs: list[str | Path], files: list[Path], folder: str, sweep: str | None = None,
                       warn: Callable[[str], None] | None = None) -> int:
    """Attach ``files`` under ``folder`` to the parent runs of every tracked folder in ``dirs`` (only ``sweep``'s
    when given); the count of (tracker, run) pairs that took them."""
    warn = warn or (lambda line: print(line, file=sys.stderr))
    files = [Path(f) for f in files if Path(f).is_file()]
    attached = 0
    for out in map(Path, dirs):
        where = read_tracking_record(out)
        sweeps = [sweep] if sweep else _sweeps(out)
        if not where or not files or not sweeps:
            continue
        for tracker in recorded_trackers(where):
            try:
                tracker.connect() if hasattr(tracker, "connect") else tracker.open()
                known = getattr(tracker, "parents", None)  # MLflow: only the parent runs that exist
                for name in sweeps:
                    if known is not None and name not in known:
                        continue
                    tracker.attach(name, files, folder)
                    attached += 1
                tracker.finish()
            except Exception as exc:  # TrackerError, a package missing here, a server gone
                warn(f"tracking: {tracker.name}: {out}: the {folder} files not attached ({short_reason(exc)}); "
                     "they are in the folder")
    return attached
