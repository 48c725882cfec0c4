"""One benchmark cell: stream x model x method -> one result row (the paper's metric: the error over the
whole stream, UniTTA paper section 5.1). No Ray here.

``evaluate(cell)`` loads the cell's inputs (``unitta.evaluate.inputs.load_inputs``: dataset, model, stream),
feeds the stream to the method in stream order in batches (``adapt_stream``: the last, partial batch too, even
of size 1: unlike the reference, nothing is skipped) and scores every prediction (``result_row``).
``run_cell(cell)`` wraps it for drivers: it never raises for a failing cell and adds the run's provenance. The
row's columns are documented in ``docs/results.md``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from unitta.cell import Cell
from unitta.evaluate.adapt import Adapted, Report, Stopped, adapt_stream, device_batch
from unitta.evaluate.chance import chance_warning
from unitta.evaluate.horizon import round_errors
from unitta.evaluate.inputs import load_inputs
from unitta.evaluate.metrics import severity_error, stream_metrics
from unitta.evaluate.provenance import git_commit, now, ray_node_id, ray_version
from unitta.evaluate.realtime import Schedule
from unitta.evaluate.source_probe import SOURCE_PROBE_IMAGES, probe_source
from unitta.results import STATUS_FAILED, STATUS_OK, STATUS_STOPPED
from unitta.streams.protocols import GRADUAL_SAMPLERS, domain_severity

__all__ = ["SOURCE_PROBE_IMAGES", "chance_warning", "evaluate", "run_cell", "failed_row", "result_row", "short_error"]



# ---------------------------------------------------------------------- the batch loop
def _pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


# ---------------------------------------------------------------------- the row
def _peak_memory_mb(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is in KiB on Linux: the whole process's peak resident size
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _breakdown(keys: np.ndarray, correct: np.ndarray, names: list[str] | None) -> list[dict[str, Any]]:
    """Error (%) per value of ``keys`` (domain or class), as a list of {key, name, n, error}."""
    out = []
    for key in np.unique(keys):
        mask = keys == key
        out.append(
            {
                "key": int(key),
                "name": names[key] if names is not None else str(int(key)),
                "n": int(mask.sum()),
                "error": float(100.0 * (1.0 - correct[mask].mean())),
            }
        )
    return out


def result_row(
    cell: Cell,
    stream,
    dataset,
    method,
    adapted: Adapted,
    device,
    wall_start: float,
    forgetting: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """The result row of a finished cell: its coordinates, the metrics (``unitta.evaluate.metrics``), the protocol,
    the forgetting check's errors, the cost and the versions."""
    import torch

    from unitta import __version__

    n = len(stream.indices)
    labels = dataset.labels[stream.indices]
    correct = adapted.predictions == labels
    metrics = stream_metrics(
        labels, adapted.predictions, adapted.confidence, adapted.true_log_prob, stream.domains, dataset.num_domains,
        curve_points=cell.curve_points,
    )
    cost = method.cost
    return {
        **cell.coordinates(),
        "setting": stream.setting.code,
        "class_setting": stream.setting.class_notation,
        "domain_setting": stream.setting.domain_notation,
        "S": stream.S,
        **{key: float(value) for key, value in stream.factors.items()},
        **metrics,  # "error" is the paper's "Total Avg" micro error
        "severity5_error": _severity5_error(stream, correct),
        **adapted.schedule.columns(),
        **(forgetting or {"source_error_before": None, "source_error_after": None}),
        "round_errors": round_errors(correct, cell.rounds),
        "resets": int(adapted.resets),
        "ccc_severities": json.dumps(stream.meta["severities"], sort_keys=True) if cell.sampler == "ccc" else None,
        "n_samples": int(n),
        "n_correct": int(correct.sum()),
        "images_reused": int(stream.n_reused),
        "domains_discovered": method.num_domains(),
        "per_domain": _breakdown(stream.domains, correct, list(dataset.domain_names)),
        "per_class": _breakdown(stream.classes, correct, (getattr(dataset, "meta", None) or {}).get("classes")),
        "wall_time_s": time.perf_counter() - wall_start,
        "adapt_time_s": adapted.adapt_seconds,
        "data_time_s": adapted.data_seconds,
        "images_per_s": n / adapted.adapt_seconds if adapted.adapt_seconds > 0 else float("nan"),
        "forwards_per_batch": cost.forwards / max(cost.batches, 1),
        "backwards_per_batch": cost.backwards / max(cost.batches, 1),
        "setup_forwards": method.setup_cost.forwards,
        "setup_backwards": method.setup_cost.backwards,
        "setup_time_s": method.setup_cost.seconds,
        "peak_memory_mb": _peak_memory_mb(device),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"cpu ({platform.processor() or platform.machine()})",
        "num_threads": torch.get_num_threads(),
        "unitta_version": __version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "method_extra": json.dumps(method.extra_metrics(), sort_keys=True, default=str),
        **adapted.criteria,
        **({"report_values": json.dumps(adapted.reports)} if adapted.reports else {}),
    }


def _severity5_error(stream, correct: np.ndarray) -> float | None:
    """The gradual orders' error at severity 5 alone (the other benchmark's "mean error at 5": its severity-5 steps
    all have one size, so their mean error is this micro error); None for the other samplers."""
    if stream.sampler not in GRADUAL_SAMPLERS:
        return None
    return severity_error(correct, domain_severity(stream.domains), 5)


def evaluate(
    cell: Cell,
    dataset=None,
    model_and_info=None,
    progress: bool | Callable[[int, int], None] = False,
    report: Report | None = None,
) -> dict[str, Any]:
    """Run ``cell`` and return its result row (a flat dict, see docs/results.md).

    dataset / model_and_info: already-loaded objects to reuse (the sweep passes the dataset it put
    in Ray's object store); loaded from the cell when None.
    progress: True for a tqdm bar, or a callback(done_images, total_images).
    report: partial results every k batches to a hook that may stop the cell (``unitta.evaluate.adapt.Stopped``).
    """
    import torch

    from unitta.methods import get_method

    wall_start = time.perf_counter()
    if cell.num_threads:
        torch.set_num_threads(cell.num_threads)
    device = _pick_device(cell.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    inputs = load_inputs(cell, device, dataset, model_and_info)
    stream, dataset = inputs.stream, inputs.dataset
    method = get_method(
        cell.method,
        inputs.model,
        inputs.info,
        dataset=cell.dataset,
        seed=cell.seed,
        profile=cell.profile,
        source=inputs.source,
        **cell.method_kwargs,
    )
    if cell.compile:
        method.compile()
    schedule = Schedule(cell.protocol, cell.cost, _source_seconds(cell, method, dataset, stream, device),
                        never_adapts=not method.adapts)
    clean = inputs.clean
    before = _clean_error(method.source_model, clean, cell.batch_size, device) if clean is not None else None
    probe = probe_source(method.source_model, dataset, stream, device, inputs.info.num_classes, cell.batch_size,
                          cell.precision)
    warning = chance_warning(probe)
    if warning:
        print(f"warning: {warning}", flush=True)  # the cell's log; the row's `warnings` column too
    adapted = adapt_stream(method, stream, dataset, cell, device, progress, schedule, report)
    forgetting = None
    if clean is not None:
        forgetting = {
            "source_error_before": before,
            "source_error_after": _clean_error(method.predict, clean, cell.batch_size, device),
        }
    row = result_row(cell, stream, dataset, method, adapted, device, wall_start, forgetting)
    return {**row, "source_probe_error": probe.error, "warnings": warning}


def _source_seconds(cell: Cell, method, dataset, stream, device) -> float | None:
    """Seconds of one source-model forward on the stream's first batch (median of 3 after a warm-up): the
    real-time protocol's unit of time under ``cost: measured``; None otherwise."""
    import torch

    from unitta.methods.parts.backend import backend_mode

    if cell.protocol != "realtime" or cell.cost != "measured":
        return None
    x = device_batch(dataset, stream.indices[: cell.batch_size], device)
    times = []
    with torch.no_grad(), backend_mode(cell.precision, device):
        for _ in range(4):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            method.source_model(x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def _clean_error(predict, clean, batch_size: int, device) -> float:
    """Error (%) of ``predict`` (the source model, or a method's non-adapting ``predict``) on clean images."""
    import torch

    from unitta.data.source import take_batch

    wrong = 0
    with torch.no_grad():
        for start in range(0, len(clean), batch_size):
            x, y = take_batch(clean, torch.arange(start, min(start + batch_size, len(clean))))
            wrong += int((predict(x.to(device)).argmax(dim=1).cpu() != y).sum())
    return 100.0 * wrong / len(clean)


# ---------------------------------------------------------------------- run_cell: for drivers
def short_error(exc: BaseException) -> str:
    """'Type: message (at file:line in function)': one line for the error_text column."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def failed_row(cell: Cell, error_text: str, **extra: Any) -> dict[str, Any]:
    """The row of a cell that did not produce results: its coordinates, status 'failed', the error."""
    return {**cell.coordinates(), "status": STATUS_FAILED, "error_text": error_text, **extra}


def run_cell(cell: Cell, dataset=None, report: Report | None = None, progress: Callable[[int, int], None] | None = None,
             **extra: Any) -> dict[str, Any]:
    """Run one cell and return its result row; never raises for a failing cell.

    The row is ``evaluate(cell, dataset)``'s, plus status ('ok' | 'failed'), error_text, started_at,
    finished_at, duration_s, hostname, node_id, worker_pid, cuda_visible_devices, git_commit and
    ray_version (docs/results.md). An exception, or a non-finite error, gives a 'failed' row with the
    cell's coordinates and the error text; a cell its ``report`` hook stopped gives a 'stopped' row
    (docs/selection.md). Torch's thread count is pinned to ``cell.num_threads``.
    ``progress``: called with (images done, images in the stream) after every batch (``unitta.run.cell_progress``).
    ``extra`` columns (e.g. sweep_name, git_commit computed once by the driver) are added to the row.
    """
    import torch

    if cell.num_threads:
        torch.set_num_threads(cell.num_threads)
    started = now()
    t0 = time.perf_counter()
    try:
        row = evaluate(cell, dataset=dataset, progress=progress or False, report=report)
        if not math.isfinite(row.get("error", float("nan"))):
            raise FloatingPointError(f"error={row.get('error')} is not finite")
        row["status"], row["error_text"] = STATUS_OK, None
    except Stopped as stop:  # its report hook stopped it: how far it went, what it reported; never a result
        row = {**failed_row(cell, str(stop)), "status": STATUS_STOPPED, "stopped_at_batch": stop.batches,
               "report_values": json.dumps(stop.reports)}
    except Exception as exc:  # a failing cell is a result, not a crash of the sweep
        traceback.print_exc(file=sys.stderr)
        row = failed_row(cell, short_error(exc))
    row.update(
        started_at=started,
        finished_at=now(),
        duration_s=time.perf_counter() - t0,
        hostname=socket.gethostname(),
        node_id=ray_node_id(),
        worker_pid=os.getpid(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        ray_version=ray_version(),
    )
    row.setdefault("num_threads", torch.get_num_threads())
    if "git_commit" not in extra:
        row["git_commit"] = git_commit()
    row.update(extra)
    return row
