"""What a sweep's / tune's / select's parent run holds in a tracker (docs/tracking.md, "What each run holds").

- parameters: the validated config, flattened to dotted keys (``grid.methods``, ``resources.num_cpus``; lists as
  JSON text);
- an artifact: the YAML copy of the config the output folder keeps (``sweep.yaml``, ``unitta.run.outdir``);
- metrics: the summary table, mean error over seeds per method x setting (``error/<method>/<setting>``) and per
  method over settings (``error/<method>/mean``), from the run's rows in the output folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SweepRun", "flat_config", "summary_metrics", "sweep_run", "LiveValue", "live_value"]


@dataclass
class SweepRun:
    """One run's parent content, tracker-neutral."""

    sweep: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # artifacts: the config copy (and later heatmaps, report)


@dataclass
class LiveValue:
    """A running cell's error so far (%) over its first ``images`` stream positions (docs/tracking.md, "Live")."""

    cell_id: str
    sweep: str
    name: str  # the cell's run name (``unitta.track.cell_run.run_label``)
    images: int
    error: float
    tags: dict[str, str] = field(default_factory=dict)


def live_value(cell, sweep: str, images: int, wrong: int) -> LiveValue:
    """A running ``cell``'s (``unitta.cell.Cell``) error so far: ``wrong`` of its first ``images`` predictions."""
    from unitta.track.cell_run import run_label

    identity = cell.identity()
    label = run_label({**identity, "factor_overrides": identity.get("factors"), "cell_id": cell.cell_id()})
    return LiveValue(cell.cell_id(), sweep, label, images, 100.0 * wrong / max(images, 1),
                     {"unitta.method": str(cell.method)})


def flat_config(data: Any, prefix: str = "") -> dict[str, str]:
    """A config as ``{'dotted.key': text}``: mappings flattened, everything else (lists, numbers) as JSON text;
    None values left out."""
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(flat_config(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if data is None or not prefix:
        return {}
    return {prefix: data if isinstance(data, str) else json.dumps(data, sort_keys=True, default=str)}


def summary_metrics(rows) -> dict[str, float]:
    """The summary table of a run's rows (a polars frame of ``load_results``): mean error over seeds per method x
    setting (``error/<method>/<setting>``) and its mean over settings (``error/<method>/mean``); ok rows only."""
    if rows is None or rows.height == 0 or "error" not in rows.columns:
        return {}
    import polars as pl

    ok = rows.filter(pl.col("status") == "ok").drop_nulls("error") if "status" in rows.columns else rows
    if ok.height == 0:
        return {}
    cells = ok.group_by("method", "setting").agg(pl.col("error").mean())
    out = {f"error/{m}/{s}": float(e) for m, s, e in cells.iter_rows() if e is not None and math.isfinite(e)}
    for (method,), group in cells.group_by("method"):
        out[f"error/{method}/mean"] = float(group["error"].mean())
    return dict(sorted(out.items()))


def sweep_run(out: Path, sweep: str, warn=None) -> SweepRun:
    """The parent run of ``sweep`` in the output folder ``out``: its config copy (any of the run configs' file
    names: sweep.yaml, tune.yaml, select.yaml) and the summary of its rows."""
    import yaml

    from unitta.results import load_results

    run = SweepRun(sweep)
    for path in sorted(Path(out).glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("name") == sweep:
            run.params = flat_config(data)
            run.files.append(path)
            break
    try:
        rows = load_results(out, sweep=sweep, warn=warn or (lambda line: None))
    except (ValueError, OSError):
        try:
            rows = load_results(out, warn=warn or (lambda line: None))
        except (ValueError, OSError):
            rows = None
    run.metrics = summary_metrics(rows)
    return run
