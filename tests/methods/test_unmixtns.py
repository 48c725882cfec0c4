"""UnMix-TNS: the layer's formulas, and components that track a mixed-domain stream."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.methods.fmnist_cnn import info_for as tiny_info
from tests.methods.fmnist_cnn import run_stream, shift
from unitta.methods import get_method
from unitta.methods.norm.stats import instance_mean_var
from unitta.methods.norm.unmixtns_layer import UnMixTNS2d
from unitta.methods.parts.device import DevicePaths


def _source_bn(channels: int = 6, seed: int = 0) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(channels)
    bn.running_mean.copy_(torch.randn(channels, generator=g))
    bn.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(channels, generator=g))
    return bn.eval()


def test_initial_components_mix_back_to_the_source_statistics():
    bn = _source_bn()
    layer = UnMixTNS2d(bn, num_components=4000, max_batch_size=64, generator=torch.Generator().manual_seed(0))
    means, variances = layer.component_means, layer.component_vars
    # uniform mixture: mean = mean_k mu_k, variance = mean_k var_k + var_k(mu_k) (UnMix-TNS initialisation, alpha 0.5)
    mix_var = variances.mean(0) + means.var(0, unbiased=False)
    se = 3.0 * bn.running_var.sqrt() * math.sqrt(0.5 * 4000 / 3999) / math.sqrt(4000)  # 3 standard errors
    assert ((means.mean(0) - bn.running_mean).abs() <= se).all()
    torch.testing.assert_close(mix_var, bn.running_var, rtol=0.1, atol=0)
    torch.testing.assert_close(variances[0], 0.5 * bn.running_var)


def test_one_component_is_instance_normalisation():
    bn = _source_bn()
    layer = UnMixTNS2d(bn, num_components=1, max_batch_size=64, generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 6, 5, 5, generator=torch.Generator().manual_seed(1)) * 2 + 1
    expected = F.instance_norm(x, weight=bn.weight, bias=bn.bias, eps=bn.eps)
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)


def test_component_update_follows_the_rescaled_momentum():
    layer = UnMixTNS2d(_source_bn(), num_components=3, max_batch_size=64, generator=torch.Generator().manual_seed(0))
    assert layer.momentum(64) == pytest.approx(0.1)
    assert layer.momentum(1) == pytest.approx(1 - 0.9 ** (1 / 64))  # ~0.0016
    x = torch.randn(1, 6, 4, 4, generator=torch.Generator().manual_seed(2))
    before_m, before_v = layer.component_means.clone(), layer.component_vars.clone()
    mu, var = instance_mean_var(x, DevicePaths())
    p = layer.assignments(mu)[0]  # (K,)
    out = layer(x)
    m = 1 - 0.9 ** (1 / 64)
    torch.testing.assert_close(layer.component_means, before_m + m * p[:, None] * (mu - before_m))
    torch.testing.assert_close(layer.component_vars, before_v + m * p[:, None] * (var - before_v))
    assert torch.isfinite(out).all()
    layer.update_stats = False
    frozen = layer.component_means.clone()
    layer(x)
    assert torch.equal(layer.component_means, frozen)


def test_components_track_a_mixed_domain_stream(fmnist_cnn):
    """Clean and shifted images interleaved: every layer's components move towards the instances that
    select them (distance of each instance's statistics to its assignment-weighted component)."""
    model, x = fmnist_cnn.model, fmnist_cnn.x[:2000]
    g = torch.Generator().manual_seed(0)
    domain = torch.cat([torch.zeros(640), torch.ones(640)]).long()
    images = torch.cat([x[:640], shift(x[640:1280])])
    order = torch.randperm(1280, generator=g)
    images, domain = images[order], domain[order]
    method = get_method("unmixtns", model, tiny_info(model))
    inputs: dict[str, torch.Tensor] = {}
    for name, layer in method.layers.items():
        layer.register_forward_pre_hook(lambda mod, args, name=name: inputs.__setitem__(name, args[0].detach()))

    def gaps() -> dict[tuple[str, int], float]:
        for layer in method.layers.values():
            layer.update_stats = False
        with torch.no_grad():
            method.model(images)
        for layer in method.layers.values():
            layer.update_stats = True
        result = {}
        for name, layer in method.layers.items():
            mu, _ = instance_mean_var(inputs[name], DevicePaths())
            p = layer.assignments(mu)
            weighted = p @ layer.component_means  # (N, C)
            for d in (0, 1):
                result[name, d] = float((weighted - mu)[domain == d].norm(dim=1).mean())
        return result

    before = gaps()
    run_stream(method, images, 64)
    after = gaps()
    for key in before:
        assert after[key] < 0.9 * before[key], (key, before[key], after[key])


def test_batch_of_one_is_normalised_per_instance_and_stays_finite(fmnist_cnn):
    model, x = fmnist_cnn.model, fmnist_cnn.x[:2000]
    method = get_method("unmixtns", model, tiny_info(model))
    single = torch.cat([method(shift(x[i : i + 1])) for i in range(4)])
    assert torch.isfinite(single).all()
    # per-instance normalisation: a sample's output does not depend on its batch-mates (stats frozen)
    for layer in method.layers.values():
        layer.update_stats = False
    alone = method(x[:1])
    together = method(x[:8])[:1]
    torch.testing.assert_close(alone, together, atol=1e-5, rtol=1e-5)


def test_bad_config_is_refused(fmnist_cnn):
    model = fmnist_cnn.model
    with pytest.raises(ValueError, match="num_components"):
        get_method("unmixtns", model, tiny_info(model), num_components=0)
