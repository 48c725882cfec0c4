"""TENT: cost, batches of one, presets, bad hyper-parameters, and entropy minimisation on real data."""

from __future__ import annotations

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.parts.losses import softmax_entropy


def test_cost_one_forward_and_one_backward_per_batch(fmnist_cnn):
    batch = grey_shift(fmnist_cnn.x[:16], seed=1)
    tent = get_method("tent", fmnist_cnn.model, fmnist_cnn.info)
    for _ in range(3):
        tent(batch)
    assert (tent.cost.forwards, tent.cost.backwards, tent.cost.images) == (3, 3, 48)


def test_batch_of_one_is_predicted_without_an_update(fmnist_cnn):
    method = get_method("tent", fmnist_cnn.model, fmnist_cnn.info)
    before = {k: v.clone() for k, v in method.model.state_dict().items()}
    out = method(grey_shift(fmnist_cnn.x[:1], seed=1))
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    assert method.cost.backwards == 0
    assert all(torch.equal(v, before[k]) for k, v in method.model.state_dict().items())


def test_presets_and_bad_hyper_parameters(fmnist_cnn):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    tent = get_method("tent", model, info, dataset="imagenet-c")
    assert (tent.cfg.optimizer, tent.cfg.lr) == ("sgd", 2.5e-4)
    assert isinstance(tent.optimizer, torch.optim.SGD) and tent.optimizer.defaults["nesterov"]
    with pytest.raises(ValueError, match="optimizer"):
        get_method("tent", model, info, optimizer="rmsprop")
    with pytest.raises(ValueError, match="lr=0.0 must be > 0"):
        get_method("tent", model, info, lr=0.0)


def test_tent_lowers_entropy_on_a_shifted_stream(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x, seed=2)
    held_out = xs[3000:3256]
    # lr 5e-3 (5x the CIFAR default) so that 30 steps on this 80-parameter model move it clearly
    tent = get_method("tent", fmnist_cnn.model, fmnist_cnn.info, lr=5e-3)
    with torch.no_grad():
        before = softmax_entropy(tent.model(held_out)).mean().item()  # batch-stat BN, source affine
    for i in range(0, 1920, 64):
        tent(xs[i : i + 64])
    with torch.no_grad():
        after = softmax_entropy(tent.model(held_out)).mean().item()
    assert after < 0.9 * before, (before, after)
