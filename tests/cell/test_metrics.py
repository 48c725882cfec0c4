"""The metric columns of a result row (``unitta.evaluate.metrics``) on hand-made predictions with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unitta.evaluate.metrics import (
    balanced_error,
    domain_errors,
    error,
    error_curve,
    expected_calibration_error,
    negative_log_likelihood,
    stream_metrics,
    worst_class_error,
)


def test_balanced_and_worst_class_error_over_the_classes_present():
    # class 0: 4 images, 1 wrong (25 %); class 2: 1 image, wrong (100 %); class 1 never occurs
    labels = np.array([0, 0, 0, 0, 2])
    correct = np.array([True, True, True, False, False])
    assert error(correct) == pytest.approx(40.0)
    assert balanced_error(labels, correct) == pytest.approx((25.0 + 100.0) / 2)  # class 1 is not averaged in
    assert worst_class_error(labels, correct) == pytest.approx(100.0)


def test_ece_with_known_bins():
    # bin (14/15, 1]: confidences 1.0, 0.95 -> mean 0.975, accuracy 1/2; bin (7/15, 8/15]: 0.5, accuracy 1
    confidence = np.array([1.0, 0.95, 0.5])
    correct = np.array([True, False, True])
    expected = 100 * ((2 / 3) * abs(0.5 - 0.975) + (1 / 3) * abs(1.0 - 0.5))
    assert expected_calibration_error(confidence, correct) == pytest.approx(expected)


def test_ece_bin_edges_are_closed_on_the_right():
    # 1/15 lies in the first bin (0, 1/15], with 2/15 in the second: two bins of one sample each
    confidence = np.array([1 / 15, 2 / 15])
    correct = np.array([False, False])
    assert expected_calibration_error(confidence, correct) == pytest.approx(100 * (1 / 15 + 2 / 15) / 2)
    # perfectly calibrated bins give 0
    assert expected_calibration_error(np.array([1.0, 1.0]), np.array([True, True])) == 0.0


def test_nll_in_nats():
    assert negative_log_likelihood(np.log([0.5, 0.25])) == pytest.approx((math.log(2) + math.log(4)) / 2)


def test_domain_errors_mark_unvisited_domains():
    out = domain_errors(np.array([0, 0, 2]), np.array([True, False, False]), num_domains=4)
    assert out == [50.0, None, 100.0, None]


def test_error_curve_splits_like_array_split():
    correct = np.array([True] * 6 + [False] * 5)  # 11 positions: parts of 2, then 1
    curve = error_curve(correct)
    parts = np.array_split(correct, 10)
    assert curve == [100.0 * (1 - p.mean()) for p in parts]
    assert curve[0] == 0.0 and curve[-1] == 100.0


def test_a_stream_of_one_sample():
    row = stream_metrics(
        labels=np.array([3]),
        predictions=np.array([3]),
        confidence=np.array([0.8]),
        true_log_prob=np.log([0.8]),
        domains=np.array([1]),
        num_domains=2,
    )
    assert row["error"] == 0.0 and row["balanced_error"] == 0.0 and row["worst_class_error"] == 0.0
    assert row["ece"] == pytest.approx(20.0)
    assert row["nll"] == pytest.approx(-math.log(0.8))
    assert row["domain_errors"] == [None, 0.0]
    assert row["error_curve"] == [0.0] + [None] * 9
