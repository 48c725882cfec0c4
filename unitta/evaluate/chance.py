"""Is the source model at chance on this stream? A test that holds on any stream (docs/own_data.md, "Your model").

The old test compared the probe's error with ``1 - 1/K``; on a class-imbalanced or correlated stream a constant
predictor scores below that, so random weights passed it. Two facts hold on any stream instead:

- a predictor that ignores the image (random weights, a head for other data) has a **balanced error** (the mean
  over the classes present of each class's error) of at least ``1 - 1/K_present`` in expectation, whatever the
  class frequencies: with ``q_c`` the share of predictions of class c, class c's error is ``1 - q_c``, and the
  ``q_c`` of the present classes sum to at most 1;
- its plain error is at least the **best constant predictor's** on the same positions (``1 -`` the largest class
  share) in expectation.

A model warns when both hold within ``Z`` binomial standard errors computed from the number of positions (the
balanced error's variance under that null: ``sum_c e_c (1 - e_c) / n_c / K_present^2`` with ``e_c = 1 - q_c``):
a trained model is far below both; a model that ignores its input meets both, on every stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CHANCE_Z", "SourceProbe", "chance_warning", "probe_of"]

CHANCE_Z = 3.0  # one-sided: a model at chance warns with probability ~0.999 on either test


@dataclass(frozen=True)
class SourceProbe:
    """The source model's predictions on stream positions spread over the stream, summarised."""

    n: int  # positions probed
    error: float  # % of the positions predicted wrong
    balanced_error: float  # % : mean over the classes present of each class's error
    constant_error: float  # % : the best constant predictor's error on the same positions
    error_floor: float  # % : the error below which the model is clearly better than that constant
    balanced_floor: float  # % : the balanced error below which the model is clearly better than chance
    classes_present: int


def probe_of(predictions: np.ndarray, labels: np.ndarray, num_classes: int, z: float = CHANCE_Z) -> SourceProbe:
    """Summarise predictions against labels (int arrays, one entry per probed position)."""
    predictions, labels = np.asarray(predictions, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if n == 0:
        raise ValueError("the source probe needs at least one position")
    counts = np.bincount(labels, minlength=num_classes)
    present = np.flatnonzero(counts)
    wrong = predictions != labels
    per_class = np.array([wrong[labels == c].mean() for c in present])
    share = np.bincount(predictions, minlength=num_classes)[: num_classes] / n  # q_c
    k = len(present)
    constant = 1.0 - counts.max() / n
    # under the null (predictions independent of the labels): class c's error is 1 - q_c, binomial over n_c
    null_error = 1.0 - share[present]
    balanced_se = math.sqrt(float(np.sum(null_error * (1.0 - null_error) / counts[present]))) / k
    error_se = math.sqrt(constant * (1.0 - constant) / n)
    return SourceProbe(
        n=n,
        error=100.0 * float(wrong.mean()),
        balanced_error=100.0 * float(per_class.mean()),
        constant_error=100.0 * constant,
        error_floor=100.0 * (constant - z * error_se),
        balanced_floor=100.0 * ((1.0 - 1.0 / k) - z * balanced_se) if k > 1 else math.inf,
        classes_present=k,
    )


def chance_warning(probe: SourceProbe) -> str | None:
    """One line (naming "chance") when the source model does no better than a predictor ignoring the image on
    both tests of the module docstring; None otherwise. Such a model makes every adapting method look alike."""
    if probe.error < probe.error_floor or probe.balanced_error < probe.balanced_floor:
        return None
    return (f"the source model is at chance on this stream: {probe.error:.1f} % error on {probe.n} images spread "
            f"over it (the best constant guess: {probe.constant_error:.1f} %), balanced error "
            f"{probe.balanced_error:.1f} % (chance {100.0 * (1 - 1 / probe.classes_present):.1f} % for "
            f"{probe.classes_present} classes); check its weights (random, or trained for other classes or data?): "
            "no adaptation starts from there")
