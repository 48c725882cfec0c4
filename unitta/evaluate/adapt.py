"""The batch loop of a cell: feed a stream to a method in batches on a device, under the cell's backend settings
(precision, cuDNN: ``unitta.methods.parts.backend``) and the protocol's schedule, and collect the predictions;
``unitta.evaluate`` turns them into a result row."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from unitta.cell import Cell
from unitta.evaluate.criteria import CriteriaMeter
from unitta.evaluate.horizon import ResetCounter, batch_bounds, reset_points
from unitta.evaluate.metrics import NLL_FLOOR
from unitta.evaluate.realtime import Schedule
from unitta.streams.protocols import GRADUAL_SAMPLERS

__all__ = ["Adapted", "Report", "Stopped", "adapt_stream", "device_batch"]

# A progress-report hook: called every ``Report.every`` batches with (batches done, {'error': % so far,
# 'nll': nats so far, '<criterion>': value so far}); returns True to stop the cell there (``unitta select``'s ASHA).
ReportHook = Callable[[int, dict[str, float]], bool]


@dataclass
class Report:
    """Where a cell reports partial results along its stream (docs/selection.md, "Early stopping")."""

    every: int
    hook: ReportHook


class Stopped(Exception):  # noqa: N818 (a decision, not an error)
    """The report hook stopped the cell after ``batches`` batches (its ``reports``: (batches, values) so far)."""

    def __init__(self, batches: int, reports: list[tuple[int, dict[str, float]]]) -> None:
        super().__init__(f"stopped early after {batches} batches")
        self.batches, self.reports = batches, reports


def device_batch(dataset, indices: np.ndarray, device, channels_last: bool = False):
    """A batch as float32 NCHW in [0, 1] on ``device`` (in channels-last memory order if asked); a GPU gets the uint8
    images and converts them itself (4x fewer bytes over PCIe, no float conversion on the host; the same values:
    x / 255 is exact IEEE division)."""
    import torch

    from unitta.data.base import float_images

    if device.type == "cuda" and hasattr(dataset, "get_batch_uint8"):
        x = float_images(torch.from_numpy(dataset.get_batch_uint8(indices)).to(device, non_blocking=True))
    else:
        x = dataset.get_batch(indices).to(device, non_blocking=True)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


_CHECK_EVERY = 16  # batches between checks for non-finite outputs (each check waits for the device)


@dataclass
class Adapted:
    """What ``adapt_stream`` returns: per stream position the prediction, the top class probability and the
    log-probability of the true class; seconds loading batches and adapting; the protocol's schedule; how often
    the method's state was reset (the reset protocol's and the method's own resets, ``unitta.evaluate.horizon``)."""

    predictions: np.ndarray
    confidence: np.ndarray
    true_log_prob: np.ndarray
    data_seconds: float
    adapt_seconds: float
    schedule: Schedule
    resets: int = 0
    criteria: dict[str, float] = field(default_factory=dict)
    reports: list[tuple[int, dict[str, float]]] = field(default_factory=list)


def _batch_plan(stream, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """(batch start positions + the end, reset-before flag per batch) of the cell's rounds and reset protocol.

    Batches are cut at domain changes under 'each_shift', and at the severity steps of a gradual order (the other
    benchmark loads every step on its own, so a step's last batch may be short; docs/streams.md)."""
    n_round = len(stream.indices) // cell.rounds
    cut = cell.reset == "each_shift" or cell.sampler in GRADUAL_SAMPLERS
    shift = stream.domains[:n_round] if cut else None
    bounds = batch_bounds(n_round, cell.rounds, cell.batch_size, shift)
    return bounds, reset_points(bounds, cell.reset, stream.domains)


def _log_probabilities(scores, kind: str):
    """Log class probabilities from a method's scores: log-softmax of logits, or the log of probabilities
    (renormalised, floored at ``NLL_FLOOR``) for methods whose ``scores`` is 'probabilities'."""
    scores = scores.float()
    if kind == "probabilities":
        probs = scores.clamp_min(0)
        return (probs / probs.sum(dim=1, keepdim=True).clamp_min(NLL_FLOOR)).clamp_min(NLL_FLOOR).log()
    return scores.log_softmax(dim=1)


def _one_batch(method, x, schedule: Schedule, device):
    """The method's scores for one batch: adapting (``method(x)``) when the schedule lets it, else
    ``method.predict(x)``; the schedule learns the batch's cost."""
    import torch

    if not schedule.adapts():
        schedule.skipped()
        return method.predict(x)
    forwards, backwards = method.cost.forwards, method.cost.backwards
    setup_seconds = method.setup_cost.seconds
    measured = schedule.timed
    if measured and device.type == "cuda":
        torch.cuda.synchronize(device)  # the measured cost model times each batch: syncs are its price
    t0 = time.perf_counter()
    scores = method(x)
    if measured and device.type == "cuda":
        torch.cuda.synchronize(device)
    # one-off set-up run at this batch (EATA's Fisher, RMT's warm-up: ``TTAMethod.one_off``) is not its cost
    seconds = time.perf_counter() - t0 - (method.setup_cost.seconds - setup_seconds)
    schedule.adapted(method.cost.forwards - forwards, method.cost.backwards - backwards, seconds)
    return scores


def _progress(progress: bool | Callable[..., None], n: int, cell: Cell):
    """(advance(images in the batch, images done, errors), close()): a tqdm bar for ``progress=True``, the
    callback's (images done, n) for a callable (``unitta.run.cell_progress``), nothing for False. ``errors``: (stream
    positions, wrong predictions among them) at a host check (every ``_CHECK_EVERY`` batches), else None; a callable
    gets it as ``errors=`` then (the live error of docs/tracking.md)."""
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=f"{cell.method} {cell.setting}", unit="img", leave=False)
        return (lambda size, done, errors: bar.update(size)), bar.close
    if callable(progress):
        return (lambda size, done, errors: progress(done, n) if errors is None else progress(done, n, errors=errors)
                ), (lambda: None)
    return (lambda size, done, errors: None), (lambda: None)


def _record_scores(scores, kind: str, labels, confidence, true_log_prob):
    """Write a batch's confidence and true-class log-probability into their (device) slices; returns the
    batch's log-probabilities (for the label-free criteria)."""
    import torch

    with torch.no_grad():
        log_probs = _log_probabilities(scores.detach(), kind)
        confidence.copy_(log_probs.amax(dim=1).exp())
        true_log_prob.copy_(log_probs.gather(1, labels[:, None]).squeeze(1))
    return log_probs


def adapt_stream(
    method,
    stream,
    dataset,
    cell: Cell,
    device,
    progress: bool | Callable[[int, int], None] = False,
    schedule: Schedule | None = None,
    report: Report | None = None,
):
    """Feed the stream to ``method`` in batches of ``cell.batch_size``; returns the predictions.

    Predictions and a finiteness flag stay on the device and come back to the host every
    ``_CHECK_EVERY`` batches (and at the end): the host never waits for a batch to finish before
    queueing the next one. A non-finite output raises ``FloatingPointError`` naming the stream range.
    ``schedule`` (default: online) says which batches the method adapts on (``unitta.evaluate.realtime``). Batches
    follow the cell's rounds and reset protocol (``unitta.evaluate.horizon``: cut at round boundaries, and at domain
    changes under 'each_shift'; the method is reset before the batches the protocol names).
    The cell's label-free criteria (``Cell.criteria``, ``unitta.evaluate.criteria``) are accumulated on the way;
    ``report`` gets the partial error and criteria every ``report.every`` batches and may stop the cell
    (``Stopped``).
    """
    import torch

    from unitta.methods.parts.backend import backend_mode, channels_last

    schedule = Schedule() if schedule is None else schedule
    n = len(stream.indices)
    labels = torch.from_numpy(np.asarray(dataset.labels[stream.indices], dtype=np.int64)).to(device)
    predictions = torch.empty(n, dtype=torch.int64, device=device)
    confidence = torch.empty(n, dtype=torch.float32, device=device)
    true_log_prob = torch.empty(n, dtype=torch.float32, device=device)
    finite = torch.ones((), dtype=torch.bool, device=device)
    wrong = torch.zeros((), dtype=torch.int64, device=device)  # wrong predictions so far, read at the host checks
    meter = CriteriaMeter(cell.criteria, cell.seed, device)
    reports: list[tuple[int, dict[str, float]]] = []
    kind = getattr(method, "scores", "logits")
    advance, close_progress = _progress(progress, n, cell)
    to_channels_last = channels_last(cell.precision, device)
    data_seconds = 0.0
    checked = 0  # stream positions whose outputs are known to be finite
    bounds, reset_before = _batch_plan(stream, cell)
    resets = ResetCounter()
    t_start, setup_start = time.perf_counter(), method.setup_cost.seconds
    with torch.inference_mode(False), backend_mode(cell.precision, device):
        for i, (start, stop) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            if reset_before[i]:
                resets.reset(method)
                if cell.compile:
                    method.compile()
            t0 = time.perf_counter()
            x = device_batch(dataset, stream.indices[start:stop], device, to_channels_last)
            data_seconds += time.perf_counter() - t0
            scores = _one_batch(method, x, schedule, device)
            end = start + len(x)
            finite &= torch.isfinite(scores).all()
            predictions[start:end] = scores.argmax(dim=1)
            wrong += (predictions[start:end] != labels[start:end]).sum()
            log_probs = _record_scores(scores, kind, labels[start:end], confidence[start:end], true_log_prob[start:end])
            meter.update(method, x, log_probs, lambda s: _log_probabilities(s, kind))
            if report is not None and (i + 1) % report.every == 0 and end < n:
                _report(report, i + 1, predictions[:end] == labels[:end], true_log_prob[:end], meter, reports)
            errors = None
            if (i + 1) % _CHECK_EVERY == 0 or end == n:
                is_finite, n_wrong = torch.stack((finite.long(), wrong)).tolist()  # one host sync per _CHECK_EVERY
                if not is_finite:
                    raise FloatingPointError(
                        f"{cell.method} produced non-finite outputs between stream positions {checked} and {end}"
                    )
                checked, errors = end, (end, n_wrong)
            advance(len(x), end, errors)
    out = predictions.cpu().numpy()
    # set-up run at the first batch (``TTAMethod.one_off``) is the row's setup_time_s, not adapting time
    seconds = time.perf_counter() - t_start - (method.setup_cost.seconds - setup_start)
    close_progress()
    return Adapted(out, confidence.cpu().numpy(), true_log_prob.cpu().numpy(), data_seconds, seconds - data_seconds,
                   schedule, resets.total(method), meter.values(), reports)


def _report(report: Report, batches: int, correct, true_log_prob, meter: CriteriaMeter, reports: list) -> None:
    """One progress report (a host synchronisation, only for cells that report); raise ``Stopped`` if told to.
    Values: the error (%) and the NLL (nats) so far, and the cell's criteria."""
    values = {"error": 100.0 * (1.0 - float(correct.double().mean())), "nll": -float(true_log_prob.double().mean()),
              **meter.partial()}
    reports.append((batches, values))
    if report.hook(batches, values):
        raise Stopped(batches, reports)
