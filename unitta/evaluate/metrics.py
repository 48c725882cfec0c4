"""The metrics of a result row, from the per-sample predictions a cell already has (docs/results.md, "Metrics").

Every function takes numpy arrays in stream order and is exact (no sampling, no extra forward passes):
- ``error``: the paper's metric, the micro error over the whole stream, in percent;
- ``balanced_error``: the mean over the classes present in the stream of the per-class error, in percent
  (a method that sacrifices the rare classes of an imbalanced stream is not rewarded);
- ``worst_class_error``: the largest per-class error among the classes present, in percent;
- ``expected_calibration_error``: ECE with 15 equal-width confidence bins (0, 1/15], ..., (14/15, 1]
  (Guo et al., ICML'17), confidence = the top class probability, in percent;
- ``negative_log_likelihood``: the mean of -log p(true class), in nats;
- ``domain_errors``: error per true domain id (None for a domain the stream never visits);
- ``error_curve``: error over ten (a cell's ``curve_points``) equal parts of the stream (positions split as
  ``numpy.array_split``), to show collapse over time (None for an empty part of a stream shorter than ten);
- ``severity_error``: the error over the positions of one corruption severity (the gradual protocols' error at
  severity 5, docs/results.md).
numpy only: analysis code can import it without torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ECE_BINS",
    "CURVE_PARTS",
    "NLL_FLOOR",
    "error",
    "balanced_error",
    "worst_class_error",
    "expected_calibration_error",
    "negative_log_likelihood",
    "domain_errors",
    "error_curve",
    "severity_error",
    "stream_metrics",
]

ECE_BINS = 15  # Guo et al. (ICML'17) and most TTA calibration studies
CURVE_PARTS = 10
NLL_FLOOR = 1e-12  # probabilities below this count as this when a method returns probabilities (log 0 = inf)


def error(correct: np.ndarray) -> float:
    """Micro error in percent: 100 * (1 - mean(correct))."""
    return float(100.0 * (1.0 - np.mean(correct)))


def _group_errors(groups: np.ndarray, correct: np.ndarray, n_groups: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(positions, error %) per group id 0 .. max(n_groups, largest id + 1) - 1; the error of an empty group is
    NaN (callers leave it out)."""
    groups = np.asarray(groups, dtype=np.int64)
    counts = np.bincount(groups, minlength=n_groups)
    hits = np.bincount(groups, weights=np.asarray(correct, dtype=np.float64), minlength=len(counts))
    with np.errstate(invalid="ignore", divide="ignore"):
        return counts, 100.0 * (1.0 - hits / counts)


def _per_class_errors(labels: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Error (%) of every class present in ``labels`` (classes that never occur are left out)."""
    counts, errors = _group_errors(labels, correct)
    return errors[counts > 0]


def balanced_error(labels: np.ndarray, correct: np.ndarray) -> float:
    """Mean over the classes present of the per-class error, in percent."""
    return float(np.mean(_per_class_errors(labels, correct)))


def worst_class_error(labels: np.ndarray, correct: np.ndarray) -> float:
    """The largest per-class error among the classes present, in percent."""
    return float(np.max(_per_class_errors(labels, correct)))


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS) -> float:
    """ECE in percent: sum over bins of (n_b / N) * |accuracy_b - mean confidence_b|.

    Bins are (0, 1/bins], (1/bins, 2/bins], ..., ((bins-1)/bins, 1]; a confidence of exactly 0 goes to the
    first bin.
    """
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    accuracy = np.bincount(index, weights=correct, minlength=bins)
    mean_confidence = np.bincount(index, weights=confidence, minlength=bins)
    return float(100.0 * np.abs(accuracy - mean_confidence).sum() / len(confidence))


def negative_log_likelihood(true_log_prob: np.ndarray) -> float:
    """Mean -log p(true class) in nats, from the log-probabilities of the true classes."""
    return float(-np.mean(np.asarray(true_log_prob, dtype=np.float64)))


def domain_errors(domains: np.ndarray, correct: np.ndarray, num_domains: int) -> list[float | None]:
    """Error (%) per true domain id 0 .. num_domains - 1; None for a domain with no stream position."""
    counts, errors = _group_errors(domains, correct, num_domains)
    return [None if c == 0 else float(e) for c, e in zip(counts, errors)]


def error_curve(correct: np.ndarray, parts: int = CURVE_PARTS) -> list[float | None]:
    """Error (%) over ``parts`` equal parts of the stream (``numpy.array_split``); None for an empty part."""
    return [None if len(p) == 0 else error(p) for p in np.array_split(np.asarray(correct), parts)]


def severity_error(correct: np.ndarray, severities: np.ndarray, severity: int = 5) -> float | None:
    """Error (%) over the positions whose severity is ``severity``; None when the stream has none."""
    at = np.asarray(severities) == severity
    return error(np.asarray(correct)[at]) if at.any() else None


def stream_metrics(
    labels: np.ndarray,
    predictions: np.ndarray,
    confidence: np.ndarray,
    true_log_prob: np.ndarray,
    domains: np.ndarray,
    num_domains: int,
    curve_points: int = CURVE_PARTS,
) -> dict[str, Any]:
    """Every metric column of a result row (module docstring) for one stream."""
    correct = np.asarray(predictions) == np.asarray(labels)
    return {
        "error": error(correct),
        "balanced_error": balanced_error(labels, correct),
        "worst_class_error": worst_class_error(labels, correct),
        "ece": expected_calibration_error(confidence, correct),
        "nll": negative_log_likelihood(true_log_prob),
        "domain_errors": domain_errors(domains, correct, num_domains),
        "error_curve": error_curve(correct, curve_points),
    }
