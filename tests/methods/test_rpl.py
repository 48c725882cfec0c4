"""RPL: the generalised cross-entropy on known probabilities, one step = Adam on GCE of hard pseudo-labels, a cell."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.losses import generalized_cross_entropy


def test_gce_on_known_probabilities():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5]])
    targets = torch.tensor([0, 2])
    loss = generalized_cross_entropy(probs.log(), targets, q=0.8)
    expected = torch.tensor([(1 - 0.7**0.8) / 0.8, (1 - 0.5**0.8) / 0.8])
    torch.testing.assert_close(loss, expected)
    # q -> 0 approaches the cross-entropy -log p_y
    near_ce = generalized_cross_entropy(probs.log(), targets, q=1e-3)
    torch.testing.assert_close(near_ce, -torch.log(torch.tensor([0.7, 0.5])), rtol=2e-3, atol=0)


def test_one_step_is_adam_on_the_gce_of_hard_pseudo_labels(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:32], seed=3)
    rpl = get_method("rpl", fmnist_cnn.model, fmnist_cnn.info)
    out = rpl(x)
    # the same step by hand: batch-statistics BN, affine parameters, Adam 1e-3 on mean (1 - p_y^0.8) / 0.8
    model = copy.deepcopy(fmnist_cnn.model)
    params = adapt_norm_affine(model)
    opt = torch.optim.Adam(params, lr=1e-3)
    logits = model(x)
    torch.testing.assert_close(out, logits.detach())  # the prediction is the pre-step forward
    generalized_cross_entropy(logits, logits.argmax(1), 0.8).mean().backward()
    opt.step()
    got = [p for p in rpl.model.parameters() if p.requires_grad]
    assert len(got) == len(params) == 6
    for a, b in zip(got, params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # q is used: another q gives another step
    other = get_method("rpl", fmnist_cnn.model, fmnist_cnn.info, q=0.3)
    other(x)
    moved = [p for p in other.model.parameters() if p.requires_grad]
    assert any(not torch.allclose(a, b) for a, b in zip(moved, got))


def test_presets_and_range_checks(fmnist_cnn):
    rpl = get_method("rpl", fmnist_cnn.model, fmnist_cnn.info, dataset="imagenet-c")
    assert (rpl.cfg.optimizer, rpl.cfg.lr, rpl.cfg.q) == ("sgd", 5e-4, 0.8)
    with pytest.raises(ValueError, match="q=0.0 must be in"):
        get_method("rpl", fmnist_cnn.model, fmnist_cnn.info, q=0.0)


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("rpl")
