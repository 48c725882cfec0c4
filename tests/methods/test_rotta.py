"""RoTTA: cost and update cadence, presets, the class-balanced memory, and adaptation on real data."""

from __future__ import annotations

import math

import pytest
import torch

from tests.methods.fmnist_cnn import error, grey_shift
from unitta.methods import get_method


def test_cost_one_teacher_pass_per_batch_plus_two_per_update(fmnist_cnn):
    stream = grey_shift(fmnist_cnn.x[:32], seed=1)
    rotta = get_method("rotta", fmnist_cnn.model, fmnist_cnn.info, update_every=16)
    for i in range(4):
        rotta(stream[8 * i : 8 * (i + 1)])
    assert (rotta.cost.forwards, rotta.cost.backwards, rotta.updates) == (8, 2, 2)


def test_bad_hyper_parameters_are_refused(fmnist_cnn):
    with pytest.raises(ValueError, match="update_every"):
        get_method("rotta", fmnist_cnn.model, fmnist_cnn.info, update_every=0)
    with pytest.raises(ValueError, match=r"nu=1.5 must be in \[0, 1\]"):
        get_method("rotta", fmnist_cnn.model, fmnist_cnn.info, nu=1.5)


def test_rotta_memory_keeps_its_class_balance(fmnist_cnn):
    x, y = fmnist_cnn.x, fmnist_cnn.y
    xs = grey_shift(x, seed=3)
    # a label-imbalanced stream: 70 % trousers (class 1), the rest mixed
    trousers = torch.nonzero(y == 1).flatten()[:280]
    others = torch.nonzero(y != 1).flatten()[:120]
    g = torch.Generator().manual_seed(0)
    order = torch.cat([trousers, others])[torch.randperm(400, generator=g)]
    rotta = get_method("rotta", fmnist_cnn.model, fmnist_cnn.info)
    quota = math.ceil(64 / 10)
    predicted = []
    for i in range(0, 400, 32):
        predicted.append(rotta(xs[order[i : i + 32]]).argmax(dim=1))
        assert max(rotta.memory.class_counts()) <= quota
        assert len(rotta.memory) <= 64
    predicted = torch.cat(predicted)
    dominant = int(torch.mode(predicted).values)
    stream_share = float((predicted == dominant).float().mean())
    memory_share = rotta.memory.class_counts()[dominant] / len(rotta.memory)
    assert stream_share > 0.35, "the stream is not imbalanced enough for this test to discriminate"
    assert sum(count == quota for count in rotta.memory.class_counts()) >= 3  # several classes at their quota
    assert memory_share <= quota / len(rotta.memory) < stream_share / 2
    assert rotta.updates == 400 // 64


def test_rotta_beats_the_source_model_on_a_shifted_stream(fmnist_cnn):
    xs, y = grey_shift(fmnist_cnn.x[:1280], seed=4), fmnist_cnn.y[:1280]
    rotta = get_method("rotta", fmnist_cnn.model, fmnist_cnn.info)
    preds = torch.cat([rotta(xs[i : i + 64]) for i in range(0, 1280, 64)])
    with torch.no_grad():
        source_error = error(fmnist_cnn.model(xs), y)
    # 1280 samples: a binomial standard error below 1.5 points, the margin is 10 points
    assert error(preds, y) < source_error - 0.10
