"""MEMO: marginal entropy, alpha BN, AugMix ops against PIL, episodic adaptation, batch independence, the batched
episodes (the GPU path) against one episode after another, a cell."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.memo import CHUNK_WEIGHT_VALUES
from unitta.methods.norm.alpha_bn import AlphaBatchNorm
from unitta.methods.parts.augmix import (
    AugMix,
    _affine_pixels,
    _autocontrast,
    _Draws,
    _equalize,
    _posterize,
    _solarize,
)
from unitta.methods.parts.losses import marginal_entropy


def test_marginal_entropy_values():
    same = torch.tensor([[2.0, 0.0, -1.0]] * 4)
    p = same[0].softmax(0)
    torch.testing.assert_close(marginal_entropy(same), -(p * p.log()).sum())
    opposite = torch.tensor([[50.0, -50.0], [-50.0, 50.0]])  # two confident, disagreeing views: H = ln 2
    torch.testing.assert_close(marginal_entropy(opposite), torch.tensor(math.log(2)))


def test_alpha_batchnorm_mixes_source_and_unbiased_batch_statistics():
    g = torch.Generator().manual_seed(0)
    bn = torch.nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(3, generator=g))
        bn.running_var.copy_(torch.rand(3, generator=g) + 0.5)
        bn.weight.copy_(torch.randn(3, generator=g))
    x = torch.randn(4, 3, 5, 5, generator=g) * 2 + 1
    torch.testing.assert_close(AlphaBatchNorm(bn, 0.0)(x), bn(x))
    var, mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=True)
    mixed = F.batch_norm(
        x, 0.9 * bn.running_mean + 0.1 * mean, 0.9 * bn.running_var + 0.1 * var, bn.weight, bn.bias, False, 0.0, bn.eps
    )
    layer = AlphaBatchNorm(bn, 0.1)
    torch.testing.assert_close(layer(x), mixed)
    xg = x.clone().requires_grad_(True)
    layer(xg).sum().backward()  # statistics are constants: d/dx = weight / sqrt(var + eps) per channel
    scale = bn.weight / torch.sqrt(0.9 * bn.running_var + 0.1 * var + bn.eps)
    torch.testing.assert_close(xg.grad, scale.view(1, 3, 1, 1).expand_as(x).detach())


def test_alpha_batchnorm_under_vmap_uses_each_groups_own_statistics():
    """Under ``torch.func.vmap`` (MEMO's batched episodes) every group of the batch is normalised with its own
    statistics, as if the layer ran on the group alone; in bf16 autocast too (elementwise, float32 statistics)."""
    g = torch.Generator().manual_seed(1)
    bn = torch.nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        bn.running_var.copy_(torch.rand(3, generator=g) + 0.5)
        bn.weight.copy_(torch.randn(3, generator=g))
    layer = AlphaBatchNorm(bn, 0.3)
    groups = torch.randn(4, 5, 3, 6, 6, generator=g) * torch.arange(1.0, 5.0).view(4, 1, 1, 1, 1)
    expected = torch.stack([layer(group) for group in groups])
    torch.testing.assert_close(torch.func.vmap(layer)(groups), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(torch.func.vmap(layer)(groups.bfloat16()).float(), expected, rtol=0.02, atol=0.05)


def _pil_channels(img: np.ndarray, op) -> np.ndarray:
    """Apply a PIL op to each channel of a (C, H, W) uint8 image as an 'L' image (PIL treats RGB bands alike)."""
    return np.stack([np.asarray(op(Image.fromarray(c))) for c in img])


@pytest.mark.parametrize("seed", [0, 1])
def test_augmix_point_ops_equal_pil(seed):
    rng = np.random.default_rng(seed)
    img = rng.integers(20, 200, size=(3, 16, 16)).astype(np.uint8)  # not spanning 0..255: autocontrast acts
    img[:, :4, :4] = 100  # a frequent value: equalize's histogram is uneven
    v = torch.from_numpy(img).float().unsqueeze(0)
    assert np.array_equal(_autocontrast(v)[0].numpy(), _pil_channels(img, ImageOps.autocontrast))
    assert np.array_equal(_equalize(v)[0].numpy(), _pil_channels(img, ImageOps.equalize))
    assert np.array_equal(
        _posterize(v, torch.tensor([4.0]))[0].numpy(), _pil_channels(img, lambda i: ImageOps.posterize(i, 4))
    )
    assert np.array_equal(
        _solarize(v, torch.tensor([231.0]))[0].numpy(), _pil_channels(img, lambda i: ImageOps.solarize(i, 231))
    )


def test_augmix_geometry_follows_pil_transform():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, size=(1, 32, 32)).astype(np.uint8)
    v = torch.from_numpy(img).float().unsqueeze(0)
    shift = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]]).view(1, 2, 3)  # translate_x by one pixel
    pil = _pil_channels(img, lambda i: i.transform((32, 32), Image.AFFINE, (1, 0, 1, 0, 1, 0), resample=Image.BILINEAR))
    assert np.array_equal(_affine_pixels(v, shift).round()[0].numpy(), pil)
    theta = -math.radians(2)  # rotate by 2 degrees (PIL: counter-clockwise about the centre)
    c, s = math.cos(theta), math.sin(theta)
    a = torch.tensor([[c, s, 16 - c * 16 - s * 16, -s, c, 16 + s * 16 - c * 16]]).view(1, 2, 3)
    pil = _pil_channels(img, lambda i: i.rotate(2, resample=Image.BILINEAR)).astype(np.float32)
    ours = _affine_pixels(v, a).round()[0].numpy()
    assert np.abs(ours - pil)[:, 2:-2, 2:-2].mean() < 1.0  # interior: same sampling up to rounding


def test_augmix_views_shape_range_and_generator():
    x = torch.rand(2, 3, 32, 32)
    views = AugMix()(x, 5, torch.Generator().manual_seed(0))
    assert views.shape == (2, 5, 3, 32, 32) and views.min() >= 0 and views.max() <= 1
    assert not torch.allclose(views[:, 0], views[:, 1])
    torch.testing.assert_close(AugMix()(x, 5, torch.Generator().manual_seed(0)), views)
    big = AugMix(preaugment="resized_crop")(torch.rand(1, 3, 40, 40), 3, torch.Generator().manual_seed(0))
    assert big.shape == (1, 3, 3, 40, 40)


@pytest.mark.parametrize("preaugment", ["crop", "resized_crop"])
def test_augmix_views_of_an_image_do_not_depend_on_the_others_in_the_call(preaugment):
    """One draw per call, a row per view: on a CPU generator an image's views are those of a call of its own."""
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    augmix = AugMix(preaugment=preaugment)
    together = augmix(x, 4, torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)
    alone = torch.cat([augmix(x[i : i + 1], 4, g) for i in range(3)])
    assert torch.equal(together, alone)


def test_augmix_ops_are_drawn_uniformly():
    """The ops, chain depths and crop offsets from the one draw: each value as often as uniform draws give it."""
    n = 20000
    draws = _Draws.drawn(torch.Generator().manual_seed(4), n, 3, torch.device("cpu"), torch.float32)
    for low, high in ((0, 9), (1, 4), (0, 9)):
        counts = torch.bincount(draws.integers(low, high, (n,)) - low, minlength=high - low).double()
        expected = n / (high - low)
        assert counts.numel() == high - low
        assert (counts - expected).abs().max() < 5 * math.sqrt(expected)  # binomial sd < sqrt(expected)
    draws.check_used()


def test_memo_is_episodic(fmnist_cnn):
    """The same image with the same views gives the same output whatever was adapted on before."""
    x = grey_shift(fmnist_cnn.x[:3], seed=9)
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=8)
    memo(x[:2])  # adapt on two other images first
    state = memo.views_generator.get_state()
    after_others = memo(x[2:3])
    fresh = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=8)
    fresh.views_generator.set_state(state)
    torch.testing.assert_close(fresh(x[2:3]), after_others, rtol=0, atol=0)
    assert memo.cost.backwards == 3 and memo.cost.forwards == 6


def test_memo_outputs_do_not_depend_on_the_batching(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:4], seed=10)
    whole = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=4, seed=3)(x)
    single = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=4, seed=3)
    torch.testing.assert_close(torch.cat([single(x[i : i + 1]) for i in range(4)]), whole, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("overrides", "chunk"),
    [({}, 5), ({"steps": 2}, 5), ({"optimizer": "adam", "lr": 1e-3}, 5), ({}, 2)],
)
def test_batched_episodes_equal_one_after_another(embedded_model, fmnist_c_images, overrides, chunk):
    """The GPU path (``episodes``: every episode's gradient by vmap from the source weights, one optimiser over
    the stacked weights, a vmapped prediction) gives what one episode after another on the model gives (the CPU
    path) from the same views: scores, the weights left after the batch, and the counted passes. The embedded
    ResNet-20 on real Fashion-MNIST-C images; SGD (the reference's), two steps, Adam; chunks of 5 and 2."""
    model, info = embedded_model
    x = fmnist_c_images[:5]
    batched = get_method("memo", model, info, n_augmentations=6, **overrides)
    sequential = get_method("memo", model, info, n_augmentations=6, **overrides)
    views = batched.augmix(x, 6, torch.Generator().manual_seed(11))
    batched.augmix = _serving(views)  # each chunk gets the next images' views
    scores = torch.cat([batched.episodes(images) for images in x.split(chunk)])
    expected = torch.cat([sequential.episode(v, image) for v, image in zip(views, x.split(1))])
    assert not torch.allclose(expected, model(x), atol=1e-3)  # the steps changed the predictions
    torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-4)
    # the last image's adapted weights; Adam's first step is lr g / (|g| + eps), the sign of a gradient component
    # near zero, which float rounding can flip: there a few in a thousand may differ (by up to 2 lr)
    pairs = [(p, sequential.params[key]) for key, p in batched.params.items()]
    differ = sum(int((~torch.isclose(p, q, rtol=1e-4, atol=1e-5)).sum()) for p, q in pairs)
    assert differ <= (sum(p.numel() for p, _ in pairs) // 300 if overrides.get("optimizer") == "adam" else 0)
    steps = overrides.get("steps", 1)
    assert batched.cost.forwards == sequential.cost.forwards == 5 * (steps + 1)
    assert batched.cost.backwards == sequential.cost.backwards == 5 * steps


def _serving(views: torch.Tensor):
    """An AugMix stand-in handing out the given views (B, V, C, H, W), the next images' on each call."""
    left = list(views)

    def augmix(images: torch.Tensor, n_views: int, generator: torch.Generator) -> torch.Tensor:
        served = torch.stack(left[: images.shape[0]])
        del left[: images.shape[0]]
        return served

    return augmix


def test_episodes_per_chunk_bounds_views_and_weight_copies(fmnist_cnn):
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, chunk_memory=1e9)  # 32 views, no memory bound
    assert memo.episodes_per_chunk(torch.zeros(200, 3, 32, 32)) == 64  # CHUNK_VIEW_VALUES: 64 CIFAR images' views
    assert memo.episodes_per_chunk(torch.zeros(8, 3, 32, 32)) == 8
    assert memo.episodes_per_chunk(torch.zeros(8, 3, 224, 224)) == 1  # ImageNet-sized: one episode at a time
    weights = sum(p.numel() for p in memo.source_params.values())
    assert memo.episodes_per_chunk(torch.zeros(200, 3, 8, 8)) == min(200, CHUNK_WEIGHT_VALUES // weights)


def test_the_step_lowers_the_marginal_entropy_of_the_views(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:1], seed=11)
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=16)
    source = get_method("memo", fmnist_cnn.model, fmnist_cnn.info).model  # alpha BN, source weights
    state = memo.views_generator.get_state()
    views = memo.augmix(x, 16, memo.views_generator)[0]
    with torch.no_grad():
        before = float(marginal_entropy(memo.model(views)))
    memo.views_generator.set_state(state)
    adapted = memo(x)
    with torch.no_grad():
        after = float(marginal_entropy(memo.model(views)))
        assert not torch.allclose(adapted, source(x))  # the prediction comes from the adapted weights
    assert after < before
    assert all(p.requires_grad for p in memo.params.values())  # every weight and bias: convs, BN affine, fc
    assert len(memo.params) == len(list(fmnist_cnn.model.parameters())) == 11


def test_presets(fmnist_cnn):
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, dataset="imagenet")
    assert (memo.cfg.lr, memo.cfg.n_augmentations, memo.cfg.preaugment) == (2.5e-4, 64, "resized_crop")
    assert isinstance(memo.optimizer, torch.optim.SGD) and memo.optimizer.defaults["nesterov"]


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("memo", n_augmentations=4)


def test_the_memory_budget_bounds_a_chunk_by_sequential_episodes(fmnist_cnn):
    """A chunk's estimated memory stays within chunk_memory x one sequential batch's, at any batch size."""
    from unitta.methods.memo import VMAP_ACTIVATION_COPIES

    for factor in (2.0, 20.0):
        memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, chunk_memory=factor)
        for batch in (1, 16, 200):
            x = torch.zeros(batch, 3, 32, 32)
            views = 32 * x[0].numel()
            weights = sum(p.numel() for p in memo.source_params.values())
            activations = 32 * memo.activation_values(x)
            sequential = 3 * weights + activations + batch * views
            per_episode = 3 * weights + VMAP_ACTIVATION_COPIES * activations + views
            e = memo.episodes_per_chunk(x)
            assert 1 <= e <= batch and (e == 1 or e * per_episode <= factor * sequential), (factor, batch, e)
        assert memo.activation_values(x) > x[0].numel()  # every layer's outputs, the input's size and more
