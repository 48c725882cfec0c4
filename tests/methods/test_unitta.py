"""The UniTTA framework: the BDN layer, COFA and the UniTTA/BDN methods (paper section 4; docs/unitta.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.methods.reference_model import BATCH_SIZE, load_reference_model, load_stream, reference_available
from tests.methods.test_core import make_bn, random_batch, tiny_model
from unitta.methods import get_method
from unitta.methods.norm.bdn_layer import BalancedDomainNorm2d, domain_distance
from unitta.methods.parts.feature_averaging import FeatureAverager

torch.set_num_threads(1)


def bdn_layer(channels=3, K=4, D=3, eta=0.1, clamp=False, seed=0) -> BalancedDomainNorm2d:
    layer = BalancedDomainNorm2d(make_bn(channels, seed), num_classes=K, eta=eta, clamp=clamp)
    for _ in range(D - 2):
        layer._expand()
    gen = torch.Generator().manual_seed(seed)
    layer.local_mean = layer.local_mean + torch.randn(layer.local_mean.shape, generator=gen)
    layer.local_var = layer.local_var + torch.rand(layer.local_var.shape, generator=gen)
    layer._refresh_domain_stats()
    return layer.train()


def bdn_update_loop(layer: BalancedDomainNorm2d, x, label, domain, clamp):
    """The BDN update written per (domain, class) group with Python loops (independent check)."""
    K = layer.num_classes
    lm, lv = layer.local_mean.clone().double(), layer.local_var.clone().double()
    x = x.double()
    for g in (domain * K + label).unique().tolist():
        xs = x[(domain * K + label) == g]
        n = len(xs)
        eta = (1.0 / n if n > 1.0 / layer.eta else layer.eta) if clamp else layer.eta
        mu = lm[g].clone()
        delta = eta * (xs.mean(dim=(2, 3)) - mu).sum(0)
        lm[g] = mu + delta
        lv[g] = lv[g] + eta * (((xs - mu.view(1, -1, 1, 1)) ** 2).mean(dim=(2, 3)) - lv[g]).sum(0) - delta**2
    D = lm.shape[0] // K
    dm = lm.view(D, K, -1).mean(1)
    dv = lv.view(D, K, -1).mean(1) + lm.view(D, K, -1).var(1)
    return lm.float(), lv.float(), dm.float(), dv.float()


@pytest.mark.parametrize("clamp", [False, True])
def test_bdn_update_and_per_domain_normalisation_match_the_loop(clamp):
    gen = torch.Generator().manual_seed(1)
    layer = bdn_layer(eta=0.2, clamp=clamp)
    x = torch.randn(30, 3, 4, 4, generator=gen) * 2
    label = torch.randint(0, 4, (30,), generator=gen)
    label[:8] = 1  # one big group (domain 0, class 1): eta * n > 1 for the unclamped update
    domain = torch.randint(0, 3, (30,), generator=gen)
    domain[:8] = 0
    lm, lv, dm, dv = bdn_update_loop(layer, x, label, domain, clamp)
    counts_before = layer.count.clone()
    layer.instruct(label, domain)
    out = layer(x)
    torch.testing.assert_close(layer.local_mean, lm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.local_var, lv, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.domain_var, dv, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.count, counts_before + torch.bincount(domain, minlength=3))
    w, b = layer.bbn.weight.view(1, -1, 1, 1), layer.bbn.bias.view(1, -1, 1, 1)
    expected = (x - dm[domain][..., None, None]) / torch.sqrt(dv[domain][..., None, None] + 1e-5) * w + b
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_unclamped_update_overshoots_and_clamped_does_not():
    """Unclamped BDN update: eta * n = 2 moves the mean past the batch mean; TRIBE's clamp lands on it."""
    x = torch.full((4, 1, 2, 2), 3.0)
    label, domain = torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)
    for clamp, expected in [(False, 6.0), (True, 3.0)]:
        layer = BalancedDomainNorm2d(nn.BatchNorm2d(1).eval(), num_classes=2, eta=0.5, clamp=clamp).train()
        layer.instruct(label, domain)
        out = layer(x)
        assert layer.local_mean[0, 0].item() == pytest.approx(expected)  # 0 + 0.5 * 4 * (3 - 0) = 6
        assert torch.isfinite(out).all()
    # the reference's unclamped variance goes negative here: 1 + 0.5*4*(9 - 1) - 36 = -19
    unclamped = BalancedDomainNorm2d(nn.BatchNorm2d(1).eval(), num_classes=2, eta=0.5).train()
    unclamped.instruct(label, domain)
    unclamped(x)
    assert unclamped.local_var[0, 0].item() == pytest.approx(-19.0)


def test_domain_distances():
    mean, var = torch.tensor([[1.0, 0.0]]), torch.tensor([[4.0, 1.0]])
    dmean, dvar = torch.tensor([[0.0, 0.0], [1.0, 0.0]]), torch.tensor([[1.0, 1.0], [4.0, 1.0]])
    w2 = domain_distance(mean, var, dmean, dvar, "w2")
    torch.testing.assert_close(w2, torch.tensor([[1.0 + (2.0 - 1.0) ** 2, 0.0]]))  # (mu diff)^2 + (sigma diff)^2
    kl = domain_distance(mean, var, dmean, dvar, "kl", eps=0.0)
    # channel 0: N(1, 4) vs N(0, 1): KL both ways = (4 + 1)/2 + (1 + 1)/8 - 1
    torch.testing.assert_close(kl, torch.tensor([[(5 / 2 + 2 / 8 - 1), 0.0]]))
    zero_var = domain_distance(mean, torch.zeros_like(var), dmean, dvar, "kl")
    assert torch.isfinite(zero_var).all()


def test_expansion_and_pruning():
    layer = BalancedDomainNorm2d(nn.BatchNorm2d(2).eval(), num_classes=2, eta=0.5).train()
    layer.predicts_domain = True
    gen = torch.Generator().manual_seed(2)
    far = torch.randn(6, 2, 4, 4, generator=gen) * 0.2 + 5.0  # far from the source N(0, 1)
    label = torch.zeros(6, dtype=torch.long)
    layer.instruct(label)
    layer(far)
    assert (layer.domain_pred == 0).all()  # both slots are source copies: ties -> index 0
    assert not layer.wants_expansion(layer.domain_pred)
    layer.instruct(label, layer.domain_pred)
    layer(far)
    source_like = torch.randn(6, 2, 4, 4, generator=gen)
    layer.instruct(label)
    layer(source_like)
    assert (layer.domain_pred == 1).all() and layer.wants_expansion(layer.domain_pred)
    layer.instruct(label, layer.domain_pred, expand=True)
    layer(source_like)
    assert layer.num_domains == 3 and layer.count.tolist() == [6, 6, 0]
    torch.testing.assert_close(layer.domain_mean[2], layer.source_mean)  # the new fresh slot
    # pruning: the oldest floor(D/2) = 1 domain with the minimum count goes, later ones shift down
    layer.count = torch.tensor([6, 9, 0])
    kept_mean = layer.domain_mean[1:].clone()
    layer.instruct(None, torch.zeros(1, dtype=torch.long), prune=True)
    layer(source_like[:1])
    assert layer.num_domains == 2 and layer.count.tolist() == [9, 0]
    torch.testing.assert_close(layer.domain_mean, kept_mean)
    assert layer.local_mean.shape == (4, 2)


# ---------------------------------------------------------------------- COFA
def test_cofa_carries_the_previous_feature_across_batches():
    """COFA: pairing follows the stream, so the outputs do not depend on the batch size."""
    model, info = tiny_model()
    x = random_batch(40, seed=3)
    for name in ("cofa", "cofa_nofilter"):
        big = get_method(name, model, info)(x)
        small_method = get_method(name, model, info)
        small = torch.cat([small_method(x[i : i + 7]) for i in range(0, 40, 7)])
        torch.testing.assert_close(big, small, atol=1e-6, rtol=1e-6)


def test_cofa_averages_with_the_previous_raw_feature():
    head = nn.Linear(2, 3)
    averager = FeatureAverager()
    z = torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    p = averager(z, head, filter=False)
    expected_z = torch.tensor([[1.0, 0.0], [2.0, 1.0]])  # first sample alone, then (z1 + z0)/2
    torch.testing.assert_close(p, head(expected_z).softmax(-1))
    p_next = averager(torch.tensor([[5.0, 0.0]]), head, filter=False)
    torch.testing.assert_close(p_next, head(torch.tensor([[4.0, 1.0]])).softmax(-1))  # raw z, not averaged
    # filter: per sample the more confident of the single and averaged predictions
    averager.reset()
    z2 = torch.randn(10, 2, generator=torch.Generator().manual_seed(4))
    filtered = averager(z2, head, filter=True)
    single = head(z2).softmax(-1)
    averager.reset()
    averaged = averager(z2, head, filter=False)
    best = torch.maximum(single.max(-1).values, averaged.max(-1).values)
    torch.testing.assert_close(filtered.max(-1).values, best)


# ---------------------------------------------------------------------- options
@pytest.mark.parametrize("overrides", [{"distance": "kl"}, {"clamp": True}, {"eta": 0.5}, {"layer": "bn3"}])
def test_unitta_options_run_and_stay_finite(overrides):
    model, info = tiny_model()
    method = get_method("unitta", model, info, **overrides)
    for seed in range(4):
        out = method(random_batch(16, seed) * (1 + seed))
        assert torch.isfinite(out).all()
    assert method.num_domains() >= 1
    layer = overrides.get("layer", "bn2")
    assert method.pred_layer is dict(method.model.backbone.named_modules())[layer]


@pytest.mark.skipif(not reference_available(), reason="shared/reference/adapters not present")
def test_pruning_bounds_the_number_of_domains():
    """Unpruned, the reference stream ends with D = 5 slots; with max_domains = 3 D never exceeds 3."""
    model, info = load_reference_model()
    images = torch.from_numpy(load_stream()["images"])
    method = get_method("bdn", model, info, prune=True, max_domains=3)
    sizes = []
    for start in range(0, len(images), BATCH_SIZE):
        method(images[start : start + BATCH_SIZE])
        sizes.append(method.pred_layer.num_domains)
    assert max(sizes) == 3 and all(layer.num_domains == 3 for layer in method.layers)
    assert int(method.pred_layer.count.sum()) < len(images)  # pruned domains took their counts with them


@pytest.mark.skipif(not reference_available(), reason="shared/reference/adapters not present")
def test_kl_distance_also_separates_the_reference_domains():
    """The paper's symmetric KL also separates the reference stream's domains: purity (share of samples
    in their discovered domain's majority true domain) > 0.6, where one catch-all domain would give
    0.38 (the largest true domain, 736 of 1,920) and the reference's W2 run reaches 0.717."""
    model, info = load_reference_model()
    stream = load_stream()
    images, true_domain = torch.from_numpy(stream["images"]), stream["domains"]
    method = get_method("unitta", model, info, distance="kl")
    preds = []
    for start in range(0, len(images), BATCH_SIZE):
        method(images[start : start + BATCH_SIZE])
        preds.append(method.last_domain_pred)
    pred = torch.cat(preds).numpy()
    purity = sum(
        max((true_domain[pred == d] == t).sum() for t in range(3)) for d in set(pred.tolist())
    ) / len(pred)
    assert method.num_domains() >= 2 and purity > 0.6, (method.num_domains(), purity)
    assert math.isfinite(purity)
