"""MEMO: marginal entropy, alpha BN, AugMix ops against PIL, episodic adaptation, batch independence, a cell."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm.alpha_bn import AlphaBatchNorm
from unitta.methods.parts.augmix import AugMix, _affine_pixels, _autocontrast, _equalize, _posterize, _solarize
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


def test_memo_is_episodic(fmnist_cnn):
    """The same image with the same views gives the same output whatever was adapted on before."""
    x = grey_shift(fmnist_cnn.x[:3], seed=9)
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=8)
    memo(x[:2])  # adapt on two other images first
    state = memo.generator.get_state()
    after_others = memo(x[2:3])
    fresh = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=8)
    fresh.generator.set_state(state)
    torch.testing.assert_close(fresh(x[2:3]), after_others, rtol=0, atol=0)
    assert memo.cost.backwards == 3


def test_memo_outputs_do_not_depend_on_the_batching(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:4], seed=10)
    whole = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=4, seed=3)(x)
    single = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=4, seed=3)
    torch.testing.assert_close(torch.cat([single(x[i : i + 1]) for i in range(4)]), whole, rtol=0, atol=0)


def test_the_step_lowers_the_marginal_entropy_of_the_views(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:1], seed=11)
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, n_augmentations=16)
    state = memo.generator.get_state()
    views = memo.augmix(x, 16, memo.generator)[0]
    with torch.no_grad():
        before = float(marginal_entropy(memo.model(views)))
    memo.generator.set_state(state)
    adapted = memo(x)
    with torch.no_grad():
        after = float(marginal_entropy(memo.model(views)))
        memo.restore_source()
        source = memo.model(x)
    assert after < before
    assert not torch.allclose(adapted, source)  # the prediction comes from the adapted weights
    assert all(p.requires_grad for p in memo.params)  # every weight and bias: convs, BN affine, fc
    assert len(memo.params) == len(list(fmnist_cnn.model.parameters())) == 11


def test_presets(fmnist_cnn):
    memo = get_method("memo", fmnist_cnn.model, fmnist_cnn.info, dataset="imagenet")
    assert (memo.cfg.lr, memo.cfg.n_augmentations, memo.cfg.preaugment) == (2.5e-4, 64, "resized_crop")
    assert isinstance(memo.optimizer, torch.optim.SGD) and memo.optimizer.defaults["nesterov"]


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("memo", n_augmentations=4)
