"""Core methods and layers: TEST, BN (with its batch-of-one fallback), Balanced BN, the registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.methods.reference_model import TinyReferenceNet, load_reference_model, reference_available
from unitta.methods import get_method, list_methods
from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.models.info import ModelInfo

torch.set_num_threads(1)  # 2 shared cores: avoid oversubscription

MY_METHODS = ("test", "bn", "balanced_bn", "cofa", "cofa_nofilter", "bdn", "bdn_nofilter", "unitta")


def tiny_model(seed: int = 0) -> tuple[nn.Module, ModelInfo]:
    """The reference architecture with random weights and non-trivial BN statistics."""
    if reference_available():
        return load_reference_model()
    gen = torch.Generator().manual_seed(seed)
    model = TinyReferenceNet()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        for bn in (model.bn1, model.bn2, model.bn3):
            bn.running_mean.copy_(torch.randn(bn.num_features, generator=gen) * 0.1)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=gen) + 0.5)
    info = ModelInfo("tiny", "cifar10", "fc", ("bn1", "bn2", "bn3"), "bn2", 5, 16)
    return model.eval(), info


def random_batch(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def make_bn(channels: int, seed: int = 0) -> nn.BatchNorm2d:
    gen = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(channels, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(channels, generator=gen))
        bn.running_mean.copy_(torch.randn(channels, generator=gen))
        bn.running_var.copy_(torch.rand(channels, generator=gen) + 0.5)
    return bn.eval()


# ---------------------------------------------------------------------- TEST and BN
def test_source_model_is_unchanged():
    model, info = tiny_model()
    x = random_batch(8)
    method = get_method("test", model, info)
    expected = model(x)
    for _ in range(3):
        torch.testing.assert_close(method(x), expected, rtol=0, atol=0)
    assert method.cost.forwards == 3 and method.cost.backwards == 0


def test_bn_uses_batch_statistics():
    bn = make_bn(4)
    layer = BatchStatsNorm(bn)
    x = torch.randn(6, 4, 5, 5, generator=torch.Generator().manual_seed(1)) * 3 + 2
    expected = F.batch_norm(x, None, None, bn.weight, bn.bias, training=True, eps=bn.eps)
    torch.testing.assert_close(layer(x), expected)
    # the normalised batch has per-channel mean = bias and std = weight
    out = layer(x)
    torch.testing.assert_close(out.mean(dim=(0, 2, 3)), bn.bias.detach(), atol=1e-5, rtol=0)


def test_bn_batch_of_one_uses_the_sample_over_hw_and_source_stats_for_a_single_value():
    bn = make_bn(4)
    layer = BatchStatsNorm(bn)
    x = torch.randn(1, 4, 5, 5, generator=torch.Generator().manual_seed(2))
    var, mean = torch.var_mean(x, dim=(2, 3), keepdim=True, unbiased=False)
    expected = (x - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(layer(x), expected)
    one_value = torch.randn(1, 4, generator=torch.Generator().manual_seed(3))  # BatchNorm1d input, N=1
    expected = (one_value - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
    torch.testing.assert_close(layer(one_value), expected)


# ---------------------------------------------------------------------- Balanced BN (TRIBE's update rule)
def balanced_update_loop(local_mean, local_var, x, label, eta, gamma):
    """TRIBE's class-balanced update written per class with Python loops, an independent check of the layer."""
    local_mean, local_var = local_mean.clone().double(), local_var.clone().double()
    x = x.double()
    K = local_mean.shape[0]
    present = [k for k in range(K) if (label == k).any()]
    deltas, gaps, mn = {}, {}, {}
    for k in present:
        xs = x[label == k]
        n = len(xs)
        m = 1.0 / n if n > 1.0 / eta else eta
        mu = local_mean[k].clone()
        delta = m * (xs.mean(dim=(2, 3)) - mu).sum(0)
        q = ((xs - mu.view(1, -1, 1, 1)) ** 2).mean(dim=(2, 3)).sum(0)
        deltas[k], gaps[k], mn[k] = delta, m * q - delta**2, m * n
        local_mean[k] += (1 - gamma) * delta
        local_var[k] += (1 - gamma) * (m * (q - n * local_var[k]) - delta**2)
    local_mean += gamma * torch.stack([deltas[k] for k in present]).mean(0)
    mean_gap = torch.stack([gaps[k] for k in present]).mean(0)
    local_var += gamma * (mean_gap - np.mean([mn[k] for k in present]) * local_var)
    return local_mean, local_var, local_mean.mean(0), local_var.mean(0) + local_mean.var(0)


@pytest.mark.parametrize("eta,gamma", [(0.01, 0.0), (0.2, 0.3), (0.5, 1.0)])
def test_balanced_bn_update_matches_the_loop(eta, gamma):
    gen = torch.Generator().manual_seed(4)
    bn = make_bn(3)
    layer = BalancedBatchNorm2d(bn, num_classes=4, eta=eta, gamma=gamma).train()
    x = torch.randn(20, 3, 4, 4, generator=gen) * 2 + 1
    label = torch.tensor([0] * 12 + [2] * 5 + [3] * 3)  # class 0 has 12 > 1/eta samples for eta=0.2, 0.5: clamp
    lm, lv, gm, gv = balanced_update_loop(layer.local_mean, layer.local_var, x, label, eta, gamma)
    layer.label = label
    out = layer(x)
    torch.testing.assert_close(layer.local_mean, lm.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.local_var, lv.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.global_var, gv.float(), atol=1e-5, rtol=1e-5)
    expected = (x - gm.float().view(1, -1, 1, 1)) / torch.sqrt(gv.float().view(1, -1, 1, 1) + bn.eps)
    expected = expected * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert layer.label is None  # consumed, as in TRIBE


def test_balanced_bn_no_update_without_label_or_in_eval():
    bn = make_bn(3)
    layer = BalancedBatchNorm2d(bn, num_classes=4, eta=0.1, gamma=0.0)
    x = torch.randn(8, 3, 4, 4, generator=torch.Generator().manual_seed(5))
    expected = bn(x)  # eval BN with the source statistics
    layer.train()
    torch.testing.assert_close(layer(x), expected)  # train mode, no label
    layer.eval()
    layer.label = torch.zeros(8, dtype=torch.long)
    torch.testing.assert_close(layer(x), expected)  # eval mode, label ignored
    torch.testing.assert_close(layer.global_mean, bn.running_mean)


def test_balanced_bn_recovers_class_balanced_statistics():
    """Imbalanced classes (9:1) with class means 0 and 4: the global mean tends to the balanced 2, not
    the stream mean 0.4. With eta=0.05 over 200 batches the EMA has converged (0.95^200 ~ 4e-5); its
    noise is about sqrt(eta/2 * var / n) ~ 0.02, so 0.1 is a loose bound."""
    gen = torch.Generator().manual_seed(6)
    bn = nn.BatchNorm2d(1).eval()
    layer = BalancedBatchNorm2d(bn, num_classes=2, eta=0.05, gamma=0.0).train()
    for _ in range(200):
        label = (torch.rand(40, generator=gen) < 0.1).long()
        x = torch.randn(40, 1, 2, 2, generator=gen) + 4.0 * label.view(-1, 1, 1, 1)
        layer.label = label
        layer(x)
    assert abs(layer.global_mean.item() - 2.0) < 0.1
    # balanced variance: within-class 1 + between-class var of (0, 4) with /(K-1) = 8
    assert abs(layer.global_var.item() - 9.0) < 0.5


def test_balanced_bn_shares_the_affine_parameters():
    bn = make_bn(3)
    layer = BalancedBatchNorm2d(bn, num_classes=2, eta=0.1, gamma=0.0)
    assert layer.weight is bn.weight and layer.bias is bn.bias
    with pytest.raises(ValueError, match="eta"):
        BalancedBatchNorm2d(bn, num_classes=2, eta=0.0, gamma=0.0)
    with pytest.raises(ValueError, match="gamma"):
        BalancedBatchNorm2d(bn, num_classes=2, eta=0.1, gamma=1.5)


# ---------------------------------------------------------------------- registry, presets, reset, cost
def test_my_methods_are_registered():
    assert set(MY_METHODS) <= set(list_methods())


def test_bad_names_and_overrides_are_refused():
    model, info = tiny_model()
    with pytest.raises(ValueError, match="registered methods: .*unitta"):
        get_method("unita_x", model, info)
    with pytest.raises(ValueError, match="no hyper-parameter 'etaa'"):
        get_method("unitta", model, info, etaa=0.1)
    with pytest.raises(ValueError, match="eta"):
        get_method("unitta", model, info, eta="0.1")
    with pytest.raises(ValueError, match="distance"):
        get_method("bdn", model, info, distance="l2")
    with pytest.raises(ValueError, match="eta=2.0 must be in"):
        get_method("bdn", model, info, eta=2.0)
    with pytest.raises(ValueError, match="its BatchNorm layers are: bn1, bn2, bn3"):
        get_method("unitta", model, info, layer="conv2")


def test_presets_per_dataset():
    model, info = tiny_model()
    assert get_method("unitta", model, info).cfg.eta == 0.01  # configs/adapter/cifar10/unitta.yaml
    c100 = get_method("unitta", model, info, dataset="cifar100").cfg
    assert (c100.eta, c100.gamma, c100.prune) == (0.05, 0.1, False)
    imnet = get_method("bdn", model, info, dataset="imagenet").cfg
    assert (imnet.eta, imnet.gamma, imnet.prune, imnet.max_domains) == (0.5, 0.0, True, 32)
    assert get_method("balanced_bn", model, info, dataset="imagenet").cfg.gamma == 0.5
    assert get_method("unitta", model, info, dataset="fmnist-c").cfg == get_method("unitta", model, info).cfg
    assert get_method("bdn_nofilter", model, info).cfg.filter is False
    assert get_method("cofa_nofilter", model, info).cfg.filter is False


@pytest.mark.parametrize(
    "name,forwards", [("test", 1), ("bn", 1), ("balanced_bn", 2), ("cofa", 1), ("bdn", 3), ("unitta", 3)]
)
def test_cost_accounting(name, forwards):
    model, info = tiny_model()
    method = get_method(name, model, info)
    for seed in range(4):
        method(random_batch(8, seed))
    assert method.cost.forwards == 4 * forwards
    assert (method.cost.batches, method.cost.images, method.cost.backwards) == (4, 32, 0)
    assert method.cost.seconds > 0
