"""GPU-efficiency contracts of the normalisation layers (bench/opcount.py measures the operator counts).

No host synchronisation inside a forward (counted with torch.profiler, as bench/opcount.py does), BDN's
preallocated domain slots (growth, device-side expansion and pruning), the per-batch groupings, the
affine cache, and the bit-exact rewrites (IABN's soft-shrinkage).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from tests.methods.test_core import make_bn, tiny_model
from unitta.data import load_dataset
from unitta.methods import get_method
from unitta.methods.norm import bdn_layer
from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.bdn_layer import BalancedDomainNorm2d
from unitta.methods.norm.groups import DENSE_LIMIT, ClassGroups, SlotGroups
from unitta.methods.norm.iabn import InstanceAwareBN

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal", "aten::unique")


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    """Fashion-MNIST-C, 10 images per domain, interleaved so that every batch mixes domains."""
    data = load_dataset("fmnist-c", n_per_domain=10)
    order = np.argsort(np.arange(len(data.labels)) % 10, kind="stable")
    return data.get_batch(order)


def host_syncs(fn) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if e.name.startswith(SYNC_OPS)]


@pytest.mark.parametrize("name", ["unitta", "bdn", "balanced_bn", "unmixtns", "robust_bn"])
def test_no_host_sync_inside_a_forward(images, name):
    model, info = tiny_model()
    method = get_method(name, model, info)
    method(images[:32])  # warm-up: one-off state
    syncs = host_syncs(lambda: [method(images[i : i + 32]) for i in (32, 64, 96)])
    assert syncs == [], f"{name}: host synchronisations {syncs}"


def test_bdn_reads_the_domain_count_only_when_slots_may_run_out(images):
    """D grows by at most one per batch; the host reads it back (one sync for all layers) only when its
    bound reaches the slot capacity, so over 30 batches at most 30 / SLOT_HEADROOM + 1 reads."""
    model, info = tiny_model()
    method = get_method("bdn", model, info, eta=0.5)
    batches = [images[(5 * i) % 140 :][:10] * (1 + i % 4) for i in range(30)]  # changing scales: new domains
    syncs = host_syncs(lambda: [method(x) for x in batches])
    assert len(syncs) <= 30 // bdn_layer.SLOT_HEADROOM + 1
    assert all(layer.capacity == method.pred_layer.capacity for layer in method.layers)
    assert method.pred_layer.num_domains < method.pred_layer.capacity


def test_bdn_slots_grow_past_the_initial_capacity_keeping_the_statistics():
    layer = BalancedDomainNorm2d(make_bn(3), num_classes=2, eta=0.1).train()
    gen = torch.Generator().manual_seed(0)
    for step in range(bdn_layer.INITIAL_CAPACITY + 4):
        x = torch.randn(6, 3, 4, 4, generator=gen) + step
        label = torch.randint(0, 2, (6,), generator=gen)
        domain = torch.full((6,), layer.num_domains - 1)  # every sample picks the fresh slot: expand
        before_mean, before_count = layer.local_mean.clone(), layer.count.clone()
        layer.instruct(label, domain, expand=torch.tensor(1))
        layer(x)
        D = before_count.shape[0]
        assert layer.num_domains == D + 1
        # slots other than the updated one keep their statistics (also across a capacity growth)
        rows = torch.arange(D * 2) // 2 != D - 1
        torch.testing.assert_close(layer.local_mean[: D * 2][rows], before_mean[rows], rtol=0, atol=0)
        torch.testing.assert_close(layer.count[:D], before_count + torch.eye(D, dtype=torch.long)[-1] * 6)
        torch.testing.assert_close(layer.domain_mean[-1], layer.source_mean)  # the new fresh slot
    assert layer.capacity > bdn_layer.INITIAL_CAPACITY


def test_bdn_device_prune_flag():
    """A device boolean False leaves everything as it is; True prunes exactly as the Python True does."""
    layers = []
    for flag in (torch.tensor(False), torch.tensor(True), True):
        layer = BalancedDomainNorm2d(nn.BatchNorm2d(2).eval(), num_classes=2, eta=0.5).train()
        layer._expand()
        layer._expand()
        layer.count = torch.tensor([5, 3, 3, 0])
        layer.local_mean = torch.arange(16.0).view(8, 2)
        layer.instruct(None, torch.zeros(1, dtype=torch.long), prune=flag)
        layer(torch.randn(1, 2, 2, 2))
        layers.append(layer)
    assert layers[0].num_domains == 4 and layers[0].count.tolist() == [5, 3, 3, 0]
    for layer in layers[1:]:  # oldest floor(4/2) = 2 slots: slot 1 has the minimum count 3 and goes
        assert layer.num_domains == 3 and layer.count.tolist() == [5, 3, 0]
        kept = torch.tensor([[0.0, 1], [2, 3], [8, 9], [10, 11], [12, 13], [14, 15]])
        torch.testing.assert_close(layer.local_mean, kept)
        torch.testing.assert_close(layer.slot_local_mean[6:], layer.source_mean.expand(layer.capacity * 2 - 6, 2))


def test_group_sums_dense_and_sparse_paths_agree():
    """Above DENSE_LIMIT the sums go through index_add instead of a (G, B) matrix product."""
    gen = torch.Generator().manual_seed(1)
    B, K = 64, 1000
    slots = DENSE_LIMIT // (B * K) + 1
    label, domain = torch.randint(0, K, (B,), generator=gen), torch.randint(0, slots, (B,), generator=gen)
    a, b = torch.randn(B, 3, generator=gen), torch.rand(B, 3, generator=gen)
    for clamp in (False, True):
        sparse = SlotGroups(domain, label, slots, K, 0.3, clamp)
        assert sparse.weight is None
        s1, s2 = sparse.sums(a, b, 4)
        index = domain * K + label
        n = torch.bincount(index, minlength=slots * K).float()
        m = torch.where(n > 1 / 0.3, 1 / n.clamp_min(1), torch.full_like(n, 0.3)) if clamp else torch.full_like(n, 0.3)
        expected = torch.zeros(slots * K, 3).index_add_(0, index, a / 4) * m[:, None]
        torch.testing.assert_close(s1, expected, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(sparse.mn[:, 0], m * n)
    dense = ClassGroups(label % 10, 10, 0.3)
    s1, _ = dense.sums(a, b)
    n = torch.bincount(label % 10, minlength=10).float()
    m = torch.where(n > 1 / 0.3, 1 / n, torch.full_like(n, 0.3))
    torch.testing.assert_close(s1, torch.zeros(10, 3).index_add_(0, label % 10, a) * m[:, None], rtol=1e-6, atol=1e-6)


def test_cached_affine_follows_parameter_and_buffer_changes():
    bn = make_bn(3)
    layer = BalancedBatchNorm2d(bn, num_classes=2, eta=0.1, gamma=0.0).eval()
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(layer(x), bn(x))
    with torch.no_grad():
        bn.weight.mul_(2.0)  # an optimiser step on the shared parameter
    torch.testing.assert_close(layer(x), bn(x))
    layer.global_mean = layer.global_mean + 1.0  # a reassigned buffer
    expected = nn.functional.batch_norm(x, layer.global_mean, layer.global_var, bn.weight, bn.bias, eps=bn.eps)
    torch.testing.assert_close(layer(x), expected)


def test_iabn_clamp_form_equals_the_softshrink_formula():
    # the layer evaluates mu_i - clamp(mu_i - mu_B, -t, t) and leaves max(0, .) to the normalisation's
    # clamp; NOTE's formula is mu_B + softshrink(mu_i - mu_B, t) and max(0, v_B + softshrink(.)) (docs/methods.md)
    gen = torch.Generator().manual_seed(3)
    bn = make_bn(4)
    layer = InstanceAwareBN(bn, k=4.0).eval()
    x = 1.0 + torch.randn(32, 4, 6, 6, generator=gen) * (0.2 + 3 * torch.rand(32, 1, 1, 1, generator=gen))
    var_i, mean_i = torch.var_mean(x, dim=(2, 3), unbiased=True)
    spread = bn.running_var + bn.eps
    t_mean, t_var = 4.0 * torch.sqrt(spread / 36), 4.0 * spread * (2.0 / 35) ** 0.5
    mean = bn.running_mean + torch.sign(mean_i - bn.running_mean) * torch.relu((mean_i - bn.running_mean).abs() - t_mean)
    var = torch.relu(bn.running_var + torch.sign(var_i - bn.running_var) * torch.relu((var_i - bn.running_var).abs()
                                                                                       - t_var))
    expected = (x - mean[..., None, None]) / torch.sqrt(var[..., None, None] + bn.eps)
    expected = expected * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    outside = ((mean_i - bn.running_mean).abs() > t_mean).float().mean()
    assert 0.1 < outside < 0.9  # both branches of the shrinkage are exercised
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
