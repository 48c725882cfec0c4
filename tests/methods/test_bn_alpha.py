"""BN-alpha: the mixed statistics, the end points alpha = 0 and 1, batches of one, non-BatchNorm models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm.alpha_bn import AlphaBatchNorm
from unitta.models.info import ModelInfo


def _bn(channels: int = 4) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(0)
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels, generator=g))
        bn.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(channels, generator=g))
    return bn.eval()


def test_layer_mixes_source_and_unbiased_batch_statistics_with_alpha():
    bn = _bn()
    x = 2 + 3 * torch.randn(8, 4, 5, 5, generator=torch.Generator().manual_seed(1))
    layer = AlphaBatchNorm(bn, alpha=0.1)
    # the batch statistics as a momentum-1 BatchNorm in train mode records them (the reference's mechanism)
    recorder = nn.BatchNorm2d(4, affine=False, momentum=1.0).train()
    recorder(x)
    mean = 0.9 * bn.running_mean + 0.1 * recorder.running_mean
    var = 0.9 * bn.running_var + 0.1 * recorder.running_var
    expected = (x - mean[:, None, None]) / torch.sqrt(var[:, None, None] + bn.eps) * bn.weight[:, None, None]
    expected = expected + bn.bias[:, None, None]
    assert torch.allclose(layer(x), expected, atol=1e-5)
    assert torch.allclose(AlphaBatchNorm(bn, alpha=0.0)(x), bn(x), atol=1e-6)  # alpha 0: the source BN
    assert not torch.allclose(layer(x), bn(x), atol=1e-3)
    # on the CPU the statistics come from the statistics kernel alone: bit for bit the recorder's
    mixed = layer.mixed_statistics(x)
    assert torch.equal(mixed[0], mean) and torch.equal(mixed[1], var)


def test_single_value_per_channel_falls_back_to_source_statistics():
    bn = _bn()
    x = torch.randn(1, 4, 1, 1)
    assert torch.allclose(AlphaBatchNorm(bn, alpha=0.5)(x), bn(x), atol=1e-6)


def test_method_interpolates_between_the_source_model_and_test_batch_statistics(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:64], seed=1)
    with torch.no_grad():
        source = fmnist_cnn.model(x)
    zero = get_method("bn_alpha", fmnist_cnn.model, fmnist_cnn.info, alpha=0.0)
    default = get_method("bn_alpha", fmnist_cnn.model, fmnist_cnn.info)
    full = get_method("bn_alpha", fmnist_cnn.model, fmnist_cnn.info, alpha=1.0)
    assert default.cfg.alpha == 0.1
    assert torch.allclose(zero(x), source, atol=1e-5)
    mixed, batch = default(x), full(x)
    assert not torch.allclose(mixed, source, atol=1e-3) and not torch.allclose(mixed, batch, atol=1e-3)
    one = default(x[:1])  # the reference's protocol: batches of one
    assert one.shape == (1, 10) and torch.isfinite(one).all()
    assert default.cost.backwards == 0 and not any(p.requires_grad for p in default.model.parameters())


def test_refuses_a_model_without_batchnorm_and_bad_alpha(fmnist_cnn):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.LazyLinear(10))
    model(torch.zeros(1, 3, 32, 32))
    info = ModelInfo(name="gn", dataset="fmnist", classifier="3", bn_layers=(), bdn_layer="", num_classes=10)
    with pytest.raises(ValueError, match="runs on BatchNorm models only.*norm kind 'group'"):
        get_method("bn_alpha", model, info)
    with pytest.raises(ValueError, match="alpha=1.5 must be in"):
        get_method("bn_alpha", fmnist_cnn.model, fmnist_cnn.info, alpha=1.5)
