"""What docs/adding_a_method.md promises a method author, checked: ``info.bn_layers`` / ``info.norm_layers`` hold
dotted *names* that ``get_submodule`` resolves, and ``self_train`` returns the last forward's logits, detached,
before that forward's step (or a plain forward's for a batch under ``min_update_batch``)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method


def test_norm_layers_are_names_of_normalisation_modules(embedded_model):
    model, info = embedded_model
    assert info.norm_layers and all(isinstance(name, str) for name in info.norm_layers)
    assert set(info.bn_layers) <= set(info.norm_layers)
    for name in info.norm_layers:
        assert isinstance(model.get_submodule(name), nn.modules.batchnorm._BatchNorm)


def test_self_train_returns_the_pre_step_logits_detached(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:64], seed=9)
    tent = get_method("tent", fmnist_cnn.model, fmnist_cnn.info)
    before = copy.deepcopy(tent.model)
    before.train()  # TENT normalises with the batch's statistics: the same forward, before any step
    with torch.no_grad():
        expected = before(x)
    out = tent(x)
    assert not out.requires_grad and out.shape == (64, fmnist_cnn.info.num_classes)
    assert torch.allclose(out, expected, atol=1e-5)
    assert tent.cost.backwards == 1  # a step was taken, after the logits returned
    small = get_method("tent", fmnist_cnn.model, fmnist_cnn.info, min_update_batch=8)
    small(x[:4])
    assert small.cost.backwards == 0  # below min_update_batch: a plain forward, no step
