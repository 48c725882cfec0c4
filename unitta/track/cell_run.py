"""What one finished cell becomes in an experiment tracker: a ``CellRun`` built from its result row.

The same content goes to every tracker (docs/tracking.md, "What each run holds"):
- parameters: the cell's coordinates (the identity columns of ``unitta.results.SCHEMA``: dataset, model, method,
  method_kwargs, setting, sampler, seed, batch size, factors, ...) and the other text columns of the row
  (protocol, reset, a tune trial's id and searched point, ...);
- tags: ``unitta.cell_id`` (how a run is found again: no duplicates), the run it belongs to (``unitta.sweep``), the
  sweep that computed the row, the git commit, the model weights' digest, the cell's config hash and status;
- metrics: every numeric column of the row (``error``, ``balanced_error``, ``ece``, ``nll``, costs, criteria, ...);
- stepped metrics: ``error_curve`` (step = part of the stream) and ``round_errors`` (step = round);
- per-domain errors: ``domain_error/<domain name>`` from ``per_domain``.

Failed cells carry no metrics and are not logged; their rerun is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from unitta.results import SCHEMA, STATUS_FAILED

__all__ = ["CellRun", "cell_run", "COORDINATES", "TAG_PREFIX", "CELL_ID_TAG", "SWEEP_TAG", "run_label"]

TAG_PREFIX = "unitta."
CELL_ID_TAG = "unitta.cell_id"  # how a tracker finds the run of a cell (no duplicate runs; docs/tracking.md)
SWEEP_TAG = "unitta.sweep"  # the sweep / tune / select run a cell run belongs to (its parent run)

# the identity columns of a result row (docs/results.md, "Identity"): what was computed (the tag columns among
# them go to tags)
COORDINATES = tuple(SCHEMA.names[:SCHEMA.names.index("status")])
# columns that go to tags (with the 'unitta.' prefix), not parameters
_TAG_COLUMNS = ("cell_id", "sweep_name", "git_commit", "model_weights", "config_hash", "status", "unitta_version")
# where and when a cell ran, and long texts: kept in Parquet only
_NOT_LOGGED = frozenset({
    "error_text", "method_extra", "report_values", "started_at", "finished_at", "hostname", "node_id", "worker_pid",
    "cuda_visible_devices", "num_threads", "torch_version", "ray_version", "python_version",
})
# list columns logged as a metric over steps
CURVES = {"error_curve": "error_curve", "round_errors": "round_error"}


@dataclass
class CellRun:
    """One cell's run, tracker-neutral; times in milliseconds since the epoch (MLflow's unit)."""

    cell_id: str
    sweep: str
    name: str
    params: dict[str, str] = field(default_factory=dict)
    typed_params: dict[str, str | int | float | bool] = field(default_factory=dict)  # the params, numbers kept numbers
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # name -> [(step, value)], nulls left out
    start_ms: int | None = None
    end_ms: int | None = None


def run_label(row: dict[str, Any]) -> str:
    """A readable name, unique across a multi-dataset sweep: dataset/model/method/setting/seed, then the factors
    set on the cell (``class_beta=10``) where there are any (the cell id tells apart cells that differ elsewhere)."""
    parts = [str(row[k]) for k in ("dataset", "model", "method", "setting", "seed") if row.get(k) is not None]
    factors = row.get("factor_overrides")
    if isinstance(factors, str) and factors not in ("", "{}"):
        try:
            factors = json.loads(factors)
        except ValueError:
            factors = None
    if isinstance(factors, dict) and factors:
        parts.append(",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(factors.items())))
    return "/".join(parts) or row["cell_id"]


def _typed(value: Any) -> str | int | float | bool:
    """A parameter as the tracker's typed value: a number or a bool as itself, anything else as text."""
    if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return _text(value)


def _ms(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _per_domain(entries: list[dict] | None) -> dict[str, float]:
    out = {}
    for entry in entries or []:
        error = _number(entry.get("error"))
        if error is not None:
            out[f"domain_error/{entry.get('name') or entry.get('key')}"] = error
    return out


def cell_run(row: dict[str, Any], sweep: str | None = None) -> CellRun | None:
    """The run of a result row (``load_results`` or ``run_cell`` row); None for a failed cell.

    sweep: the run (sweep, tune or select name) the cell belongs to; the row's ``sweep_name`` if not given.
    """
    if row.get("status") == STATUS_FAILED or not row.get("cell_id"):
        return None
    sweep = sweep or row.get("sweep_name") or "unitta"
    run = CellRun(row["cell_id"], sweep, run_label(row), start_ms=_ms(row.get("started_at")),
                  end_ms=_ms(row.get("finished_at")))
    run.tags = {f"{TAG_PREFIX}{k}": str(row[k]) for k in _TAG_COLUMNS if row.get(k) is not None}
    run.tags[SWEEP_TAG] = sweep
    for key, value in row.items():
        if value is None or key in _NOT_LOGGED or key in _TAG_COLUMNS:
            continue
        if key in CURVES:
            steps = [(step, _number(v)) for step, v in enumerate(value)]
            run.curves[CURVES[key]] = [(step, v) for step, v in steps if v is not None]
        elif key == "per_domain":
            run.metrics.update(_per_domain(value))
        elif key in COORDINATES or isinstance(value, (str, bool)):
            run.params[key] = _text(value)
            run.typed_params[key] = _typed(value)
        elif (number := _number(value)) is not None:
            run.metrics[key] = number
    return run
