"""ROID and ROID + UnMix-TNS: weighting, weight ensembling and prior correction do what the paper says."""

from __future__ import annotations

import math

import pytest
import torch

from tests.methods.fmnist_cnn import error, run_stream, shift
from tests.methods.fmnist_cnn import info_for as tiny_info
from unitta.methods import get_method
from unitta.methods.norm.unmixtns_layer import UnMixTNS2d


@pytest.fixture(scope="module")
def trained(fmnist_cnn):
    """(source model, 2,000 clean test images, labels)."""
    return fmnist_cnn.model, fmnist_cnn.x[:2000], fmnist_cnn.y[:2000]


def _one_hot_logits(classes: list[int], confidence: list[float], k: int = 10) -> torch.Tensor:
    logits = torch.zeros(len(classes), k)
    for i, (c, z) in enumerate(zip(classes, confidence)):
        logits[i, c] = z
    return logits


def test_weighting_drops_samples_like_the_class_prior_and_favours_certain_ones(trained):
    model, _, _ = trained
    roid = get_method("roid", model, tiny_info(model))
    roid.class_probs_ema = torch.tensor([0.82] + [0.02] * 9)  # the stream so far: mostly class 0
    # four samples predicting class 0 (like the prior), four predicting classes 1-4, certain to less certain
    logits = _one_hot_logits([0, 0, 0, 0, 1, 2, 3, 4], [8.0, 6.0, 4.0, 2.0, 8.0, 6.0, 4.0, 5.0])
    weights, keep = roid.sample_weights(logits)
    assert keep.tolist() == [False] * 4 + [True] * 4
    assert torch.equal(weights[:4], torch.zeros(4))
    kept = weights[4:]
    assert (kept >= 1.0).all() and (kept <= math.exp(3.0) + 1e-4).all()  # exp(w_div w_cert / T), T = 1/3
    # among kept samples, more certain -> larger weight (classes 1..3 are equally far from the prior)
    assert kept[0] > kept[1] > kept[2]


def test_equal_weights_on_a_degenerate_batch_are_finite(trained):
    model, _, _ = trained
    roid = get_method("roid", model, tiny_info(model))
    weights, keep = roid.sample_weights(torch.zeros(4, 10))  # all samples identical: 0/0 in the reference
    assert keep.all() and torch.equal(weights, torch.ones(4))


def test_prior_correction_shifts_predictions_towards_the_batch_prior(trained):
    model, x, y = trained
    x = shift(x, contrast=1.0, brightness=0.0, noise=0.15)
    roid = get_method("roid", model, tiny_info(model))
    with torch.no_grad():
        source = model(x)
    g = torch.Generator().manual_seed(0)
    err_src, err_cor, in_src, in_cor = 0.0, 0.0, 0.0, 0.0
    for _ in range(10):  # label-shifted batches: 64 images of 2 classes
        chosen = torch.randperm(10, generator=g)[:2]
        pool = torch.nonzero(torch.isin(y, chosen)).flatten()
        idx = pool[torch.randperm(len(pool), generator=g)[:64]]
        corrected = roid.prior_correct(source[idx])
        torch.testing.assert_close(corrected.sum(1), torch.ones(64))
        err_src += error(source[idx], y[idx]) / 10
        err_cor += error(corrected, y[idx]) / 10
        in_src += float(torch.isin(source[idx].argmax(1), chosen).float().mean()) / 10
        in_cor += float(torch.isin(corrected.argmax(1), chosen).float().mean()) / 10
    assert in_cor > in_src  # more predictions fall into the batch's own classes
    assert err_cor <= err_src


def test_prior_correction_is_neutral_on_a_uniform_prior_and_single_samples(trained):
    model, _, _ = trained
    roid = get_method("roid", model, tiny_info(model))
    logits = torch.eye(10) * 3.0  # mean prediction exactly uniform
    torch.testing.assert_close(roid.prior_correct(logits), logits.softmax(1))
    one = torch.randn(1, 10, generator=torch.Generator().manual_seed(0))
    assert roid.prior_correct(one).argmax() == one.argmax()
    # the reference variant scales the logits themselves
    ref = get_method("roid", model, tiny_info(model), prior_on="logits")
    skewed = _one_hot_logits([0, 0, 0, 1], [4.0, 4.0, 4.0, 4.0])
    prior = skewed.softmax(1).mean(0)
    s = max(1 / 4, 1 / 10) / prior.max()
    torch.testing.assert_close(ref.prior_correct(skewed), skewed * (prior + s) / (1 + s * 10))


def test_adapts_on_a_shifted_stream_and_ensembles_towards_the_source(trained):
    model, x, y = trained
    xs, ys = shift(x[:640]), y[:640]
    with torch.no_grad():
        err_source = error(model(xs), ys)
    roid = get_method("roid", model, tiny_info(model))
    err_roid = error(run_stream(roid, xs, 64), ys)
    assert err_roid < err_source - 0.2  # observed ~0.25 vs ~0.76 on 640 images
    assert roid.cost.backwards == 10
    moved = max(float((p.detach() - s).abs().max()) for p, s in zip(roid.params, roid.source_params))
    assert moved > 0
    # momentum_src = 0: every step is undone by the ensembling -> parameters stay at the source
    anchored = get_method("roid", model, tiny_info(model), momentum_src=0.0)
    run_stream(anchored, xs[:192], 64)
    for p, s in zip(anchored.params, anchored.source_params):
        torch.testing.assert_close(p.detach(), s, rtol=0, atol=0)


def test_single_sample_batches_predict_without_a_step(trained):
    model, x, _ = trained
    roid = get_method("roid", model, tiny_info(model))
    out = roid(shift(x[:1]))
    assert torch.isfinite(out).all() and roid.cost.backwards == 0
    roid(shift(x[:2]))
    assert roid.cost.backwards == 1


def test_roid_unmixtns_uses_unmix_layers_and_can_freeze_them_on_the_augmented_view(trained):
    model, x, _ = trained
    xs = shift(x[:64])
    for update, expect_change in ((True, True), (False, False)):
        method = get_method("roid_unmixtns", model, tiny_info(model), update_on_augmented=update, num_components=8)
        layer = method.model.bn1
        assert isinstance(layer, UnMixTNS2d) and layer.num_components == 8
        seen = []
        layer.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(mod.component_means.clone()))
        method(xs)
        assert len(seen) == 2  # the test batch, then its augmented view
        assert (not torch.equal(seen[0], seen[1])) == expect_change
        assert layer.update_stats  # restored after the consistency forward


def test_presets_follow_the_reference_configs(trained):
    model, _, _ = trained
    imagenet = get_method("roid", model, tiny_info(model), dataset="imagenet").cfg
    assert (imagenet.optimizer, imagenet.lr) == ("sgd", 1e-3)
    cifar = get_method("roid_unmixtns", model, tiny_info(model), dataset="cifar100").cfg
    assert (cifar.optimizer, cifar.lr, cifar.num_components) == ("adam", 1e-3, 128)
    with pytest.raises(ValueError, match="momentum_src"):
        get_method("roid", model, tiny_info(model), momentum_src=1.5)
