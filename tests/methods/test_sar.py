"""SAR: the two-step SAM update on reliable samples, model recovery, the layers it leaves out, presets."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torchvision

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.parts.entropy_filter import entropy_margin
from unitta.methods.parts.losses import softmax_entropy
from unitta.methods.sar import sar_frozen_layers
from unitta.models.info import ModelInfo
from unitta.nn.batchnorm import named_batchnorms

E0 = entropy_margin(10, 0.4)


def _reference_update(model, x, lr: float, rho: float = 0.05) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """SAR's update written out with index selection: (parameters after SAM + SGD, after a plain SGD step)."""
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    ent = softmax_entropy(model(x))
    reliable = torch.where(ent < E0)
    grads = torch.autograd.grad(ent[reliable].mean(), params)
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.add_(rho * g / (norm + 1e-12))
    ent2 = softmax_entropy(model(x))[reliable]
    grads2 = torch.autograd.grad(ent2[torch.where(ent2 < E0)].mean(), params)
    sam = [s - lr * g for s, g in zip(start, grads2)]  # first SGD step: momentum buffer = gradient
    plain = [s - lr * g for s, g in zip(start, grads)]
    return sam, plain


def test_sar_takes_the_sharpness_aware_two_step_update(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:64], seed=1)
    sar = get_method("sar", fmnist_cnn.model, fmnist_cnn.info, lr=0.05)
    configured = copy.deepcopy(sar.model)
    configured._forward_hooks.clear()  # the copy must not count in sar.cost
    with torch.no_grad():
        reliable = (softmax_entropy(configured(x)) < E0).sum()
    assert 0 < reliable < 64  # the filter is active on this batch
    expected, plain = _reference_update(configured, x, lr=0.05)
    sar(x)
    assert sar.cost.forwards == 2 and sar.cost.backwards == 2
    got = sar.sam.params
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, expected))
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, plain))  # not a plain gradient step


def test_sar_recovers_when_the_loss_average_collapses(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x[:192], seed=2)
    batches = [xs[i : i + 64] for i in range(0, 192, 64)]
    # e_m above any entropy: the first average already counts as a collapse, so every batch ends in a recovery
    sar = get_method("sar", fmnist_cnn.model, fmnist_cnn.info, reset_constant=10.0)
    initial = {k: v.clone() for k, v in sar.model.state_dict().items()}
    sar(batches[0])
    assert sar.ema is None and sar.extra_metrics() == {"sar_recoveries": 1}
    assert all(torch.equal(v, initial[k]) for k, v in sar.model.state_dict().items())
    # the SGD momentum survives the recovery, as in SAR's code and the reference (their SAM wrapper's state
    # does not hold it); the next batch's step then starts from the source weights with that momentum
    assert all("momentum_buffer" in sar.optimizer.state[p] for p in sar.sam.params)
    # without collapse (e_m = 0) the model keeps what it learnt and the average is tracked
    steady = get_method("sar", fmnist_cnn.model, fmnist_cnn.info, reset_constant=0.0)
    for b in batches:
        steady(b)
    assert steady.extra_metrics() == {"sar_recoveries": 0} and 0 < steady.ema < E0
    assert any(not torch.equal(v, initial[k]) for k, v in steady.model.state_dict().items())


def test_sar_leaves_the_last_stage_of_a_resnet50_style_model_alone():
    model = torchvision.models.resnet18(num_classes=10)  # torchvision names: layer1..layer4, as ResNet-50
    names = tuple(name for name, _ in named_batchnorms(model))
    info = ModelInfo(
        name="resnet18",
        dataset="imagenet",
        classifier="fc",
        bn_layers=names,
        bdn_layer=names[0],
        num_classes=10,
        input_size=32,
    )
    assert "layer4" in sar_frozen_layers(model) and "layer3" not in sar_frozen_layers(model)
    sar = get_method("sar", model.eval(), info, dataset="imagenet")
    adapted = {id(p) for p in sar.sam.params}
    for name, module in sar.model.named_modules():
        if hasattr(module, "weight") and "bn" in name.split(".")[-1]:
            assert (id(module.weight) in adapted) == (not name.startswith("layer4")), name
    assert sar.optimizer.defaults["lr"] == 2.5e-4 and sar.optimizer.defaults["momentum"] == 0.9
    assert not sar.optimizer.defaults["nesterov"]


def test_sar_transformer_learning_rate_and_bad_hyper_parameters(fmnist_cnn):
    vit_info = dataclasses.replace(fmnist_cnn.info, name="vit_b_16")
    sar = get_method("sar", fmnist_cnn.model, vit_info, dataset="imagenet")
    assert sar.optimizer.defaults["lr"] == 1e-3  # the reference's override for vit_/swin_ models
    with pytest.raises(ValueError, match="rho"):
        get_method("sar", fmnist_cnn.model, fmnist_cnn.info, rho=-0.1)
    with pytest.raises(ValueError, match="lr"):
        get_method("sar", fmnist_cnn.model, fmnist_cnn.info, lr=0.0)
