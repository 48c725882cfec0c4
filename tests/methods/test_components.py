"""The shared pieces of the baselines: EMA teachers, optimisers, test-time augmentations, CSTU and
PBRS memories, Robust BN and IABN. Synthetic data, fixed seeds."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from unitta.methods.norm.iabn import InstanceAwareBN
from unitta.methods.norm.robust_bn_layer import RobustBN
from unitta.methods.parts.augment import TTAugment, cotta_augment, device_generator, rotta_strong_augment
from unitta.methods.parts.ema import ema_update_, make_teacher
from unitta.methods.parts.memory import CSTUMemory, PBRSMemory
from unitta.methods.parts.optim import make_optimizer


def _bn(channels: int = 4, seed: int = 0) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.copy_(1 + 0.1 * torch.randn(channels, generator=g))
        bn.bias.copy_(0.1 * torch.randn(channels, generator=g))
        bn.running_mean.copy_(torch.randn(channels, generator=g))
        bn.running_var.copy_(0.5 + torch.rand(channels, generator=g))
    return bn.eval()


# ---------------------------------------------------------------------- EMA
def test_teacher_is_a_frozen_copy_and_ema_follows_the_formula():
    student = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    teacher = make_teacher(student)
    assert all(not p.requires_grad for p in teacher.parameters())
    assert all(p.requires_grad for p in student.parameters())
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
        student[1].running_mean.add_(2.0)
    ema_update_(teacher, student, 0.9)
    for name, p in teacher.named_parameters():
        assert torch.allclose(p, 0.9 * before[name] + 0.1 * student.get_parameter(name))
    assert torch.equal(teacher[1].running_mean, before["1.running_mean"])  # buffers untouched by default
    ema_update_(teacher, student, 0.5, buffers=True)
    assert torch.allclose(teacher[1].running_mean, 0.5 * before["1.running_mean"] + 0.5 * student[1].running_mean)
    with pytest.raises(ValueError, match="momentum"):
        ema_update_(teacher, student, 1.5)


# ---------------------------------------------------------------------- optimisers
def test_optimisers_use_the_reference_settings():
    p = [nn.Parameter(torch.zeros(3))]
    adam = make_optimizer(p, "adam", 1e-3)
    assert isinstance(adam, torch.optim.Adam)
    assert adam.defaults["betas"] == (0.9, 0.999) and adam.defaults["weight_decay"] == 0.0
    sgd = make_optimizer(p, "sgd", 2.5e-4)
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.defaults["momentum"], sgd.defaults["nesterov"], sgd.defaults["dampening"]) == (0.9, True, 0.0)
    with pytest.raises(ValueError, match="optimizer='adamw'"):
        make_optimizer(p, "adamw", 1e-3)
    with pytest.raises(ValueError, match="lr"):
        make_optimizer(p, "adam", 0.0)
    with pytest.raises(ValueError, match="params"):
        make_optimizer([], "adam", 1e-3)


# ---------------------------------------------------------------------- augmentations
def test_augmentation_is_seeded_sized_and_bounded():
    x = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    aug = cotta_augment()
    a = aug(x, torch.Generator().manual_seed(1))
    b = aug(x, torch.Generator().manual_seed(1))
    c = aug(x, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == x.shape and a.min() >= 0 and a.max() <= 1
    # the paper's variant keeps the input size; UT's 32-pixel variant crops ImageNet-sized inputs to 32
    big = torch.rand(2, 3, 96, 96)
    assert rotta_strong_augment()(big, torch.Generator().manual_seed(0)).shape == (2, 3, 96, 96)
    assert cotta_augment(32)(big, torch.Generator().manual_seed(0)).shape == (2, 3, 32, 32)
    with pytest.raises(ValueError, match="image_size"):
        TTAugment(image_size=1)


def test_augmentation_without_randomness_is_the_identity():
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    still = TTAugment(brightness=(1, 1), contrast=(1, 1), saturation=(1, 1), hue=0.0, gamma=(1, 1), degrees=0.0,
                      translate=0.0, scale=(1, 1), blur=False, flip_p=0.0, noise_std=0.0)
    assert torch.allclose(still(x, torch.Generator().manual_seed(0)), x, atol=1e-5)


def test_augmentation_matches_torchvision_ops():
    tvf = pytest.importorskip("torchvision.transforms.functional")
    from torchvision.transforms import InterpolationMode

    from unitta.methods.parts import augment

    x = torch.rand(2, 3, 24, 24, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(augment.shift_hue(x, 0.05), tvf.adjust_hue(x, 0.05), atol=1e-5)
    # the affine step alone against torchvision's affine with the same drawn parameters
    only_affine = TTAugment(brightness=(1, 1), contrast=(1, 1), saturation=(1, 1), hue=0.0,
                            gamma=(1, 1), blur=False, flip_p=0.0, noise_std=0.0)
    g = torch.Generator().manual_seed(3)
    out = only_affine._affine(x, g)
    g = torch.Generator().manual_seed(3)
    angle = augment._uniform(g, -15, 15)
    tx, ty = round(augment._uniform(g, -1.5, 1.5)), round(augment._uniform(g, -1.5, 1.5))
    scale = augment._uniform(g, 0.9, 1.1)
    ref = tvf.affine(x, angle=angle, translate=[tx, ty], scale=scale, shear=[0.0, 0.0],
                     interpolation=InterpolationMode.BILINEAR)
    assert torch.allclose(out, ref, atol=1e-4)


def test_device_generator_is_seeded_from_its_source():
    a = device_generator(torch.Generator().manual_seed(4), "cpu")
    b = device_generator(torch.Generator().manual_seed(4), "cpu")
    assert torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=b))


# ---------------------------------------------------------------------- memories
def _imbalanced_labels(n: int, seed: int) -> np.ndarray:
    p = np.array([0.5, 0.2, 0.1, 0.05, 0.05, 0.04, 0.03, 0.01, 0.01, 0.01])
    return np.random.default_rng(seed).choice(10, size=n, p=p)


def test_cstu_never_exceeds_its_class_quota_and_fills_up():
    labels = _imbalanced_labels(3000, 0)
    unc = np.random.default_rng(1).random(3000) * math.log(10)
    memory = CSTUMemory(64, 10)
    quota = math.ceil(64 / 10)
    for label, u in zip(labels, unc):
        memory.add(torch.zeros(1), int(label), float(u))
        assert max(memory.class_counts()) <= quota and len(memory) <= 64
    assert len(memory) == 64  # every class was seen often enough to fill the bank
    # class 0 is half the stream but at most 7 of 64 in the memory
    assert memory.class_counts()[0] <= quota


def test_cstu_eviction_prefers_old_and_uncertain_items():
    memory = CSTUMemory(capacity=4, num_classes=2)
    for unc in (0.1, 0.1, 0.1):
        memory.add(torch.zeros(1), 0, unc)  # class 0 fills its quota of 2, the third evicts within class 0
    assert memory.class_counts() == [2, 0]
    memory.add(torch.ones(1), 1, 0.2)
    memory.add(torch.ones(1), 1, 0.2)
    assert memory.class_counts() == [2, 2] and len(memory) == 4
    # a confident new item replaces the oldest (highest-score) item of its own full class
    oldest_age = max(item.age for item in memory.classes[1])
    assert memory.add(torch.full((1,), 9.0), 1, 0.0)
    assert max(item.age for item in memory.classes[1]) < oldest_age + 1
    # a very uncertain new item (score above every stored one) is dropped
    assert not memory.add(torch.zeros(1), 0, 100.0)
    x, ages = memory.batch()
    assert x.shape == (4, 1) and torch.all((ages > 0) & (ages <= 2))


def test_pbrs_balances_the_classes_it_sees_often():
    labels = _imbalanced_labels(8000, 2)
    memory = PBRSMemory(64, 10, random.Random(0))
    for i, label in enumerate(labels):
        memory.add(torch.zeros(1), int(label))
        if i > 6000:  # every class has now been predicted more than 64 times
            counts = memory.class_counts()
            assert len(memory) == 64 and max(counts) - min(counts) <= 1
    x, y = memory.batch()
    assert x.shape == (64, 1) and torch.equal(torch.bincount(y, minlength=10), torch.tensor(memory.class_counts()))


def test_pbrs_is_a_uniform_reservoir_within_a_class():
    # one class only: PBRS is classic reservoir sampling, every item kept with probability 64 / n
    n, trials = 256, 200
    kept = torch.zeros(n)
    rng = random.Random(0)
    for _ in range(trials):
        memory = PBRSMemory(64, 2, rng)
        for i in range(n):
            memory.add(torch.tensor([float(i)]), 0)
        x, _ = memory.batch()
        kept[x.flatten().long()] += 1
    rate = kept / trials  # expected 0.25 for every item; sd sqrt(0.25 * 0.75 / 200) = 0.031
    first, last = rate[:128].mean(), rate[128:].mean()  # means over 128 items: sd about 0.003
    assert abs(first - 0.25) < 0.02 and abs(last - 0.25) < 0.02


# ---------------------------------------------------------------------- Robust BN
def test_robust_bn_is_an_ema_of_batch_statistics_at_momentum_alpha():
    bn = _bn()
    rbn = RobustBN(bn, momentum=0.05)
    rbn.eval()
    x = 2.0 + 3.0 * torch.randn(8, 4, 5, 5, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(rbn(x), bn(x), atol=1e-6)  # eval: the source statistics, nothing moves
    assert torch.equal(rbn.running_mean, bn.running_mean)
    rbn.train()
    var_b, mean_b = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
    for t in range(1, 31):
        out = rbn(x)
        expected_mean = mean_b + 0.95**t * (bn.running_mean - mean_b)
        expected_var = var_b + 0.95**t * (bn.running_var - var_b)
        assert torch.allclose(rbn.running_mean, expected_mean, atol=1e-5)
        assert torch.allclose(rbn.running_var, expected_var, atol=1e-5)
    ref = (x - expected_mean.view(1, -1, 1, 1)) / torch.sqrt(expected_var.view(1, -1, 1, 1) + bn.eps)
    assert torch.allclose(out, ref * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1), atol=1e-5)
    one = rbn(x[:1, :, :1, :1])  # a single value per channel: variance 0, still finite
    assert torch.isfinite(one).all()


# ---------------------------------------------------------------------- IABN
def test_iabn_interpolates_between_bn_and_instance_norm():
    bn = _bn()
    x = 0.5 + 2.0 * torch.randn(3, 4, 6, 6, generator=torch.Generator().manual_seed(2))
    far = InstanceAwareBN(bn, k=1e6).eval()  # huge threshold: instance deviations all shrunk away
    assert torch.allclose(far(x), bn(x), atol=1e-5)
    zero = InstanceAwareBN(bn, k=0.0).eval()  # no shrinkage: instance statistics (unbiased variance)
    var_i, mean_i = torch.var_mean(x, dim=(2, 3), keepdim=True, unbiased=True)
    inst = (x - mean_i) / torch.sqrt(var_i + bn.eps) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    assert torch.allclose(zero(x), inst, atol=1e-5)
    # k = 4: an instance statistic close to the running one (inside the band) is not used at all
    near = bn.running_mean.view(1, -1, 1, 1) + torch.sqrt(bn.running_var.view(1, -1, 1, 1)) * torch.randn(
        1, 4, 6, 6, generator=torch.Generator().manual_seed(3)) * 1e-3
    layer = InstanceAwareBN(bn, k=4.0).eval()
    assert torch.allclose(layer(near), bn(near), atol=1e-4)


def test_iabn_train_mode_updates_running_statistics_like_batchnorm():
    bn = _bn()
    reference = _bn()
    reference.momentum = 0.01
    reference.train()
    layer = InstanceAwareBN(bn, k=4.0, momentum=0.01).train()
    for seed in range(3):
        x = torch.randn(5, 4, 6, 6, generator=torch.Generator().manual_seed(seed)) + 1.0
        layer(x)
        reference(x)
    assert torch.allclose(layer.running_mean, reference.running_mean, atol=1e-6)
    assert torch.allclose(layer.running_var, reference.running_var, atol=1e-6)


def test_iabn_is_finite_for_single_values_per_channel():
    bn1d = nn.BatchNorm1d(4).eval()
    layer = InstanceAwareBN(bn1d).train()
    before = layer.running_mean.clone()
    out = layer(torch.randn(1, 4))  # one sample of a (B, C) input: no batch variance exists
    assert torch.isfinite(out).all() and torch.equal(layer.running_mean, before)
    assert torch.isfinite(InstanceAwareBN(_bn()).train()(torch.randn(1, 4, 1, 1))).all()


# ---------------------------------------------------------------------- hand-written backwards
@pytest.mark.parametrize("shape", [(12, 4, 5, 5), (12, 4)])
def test_robust_bn_backward_matches_autograd_through_its_formula(shape):
    bn = (nn.BatchNorm2d(4) if len(shape) == 4 else nn.BatchNorm1d(4)).double()
    source = _bn().double()
    bn.load_state_dict(source.state_dict())
    rbn = RobustBN(bn, momentum=0.3).train()
    mean0, var0 = rbn.running_mean.clone(), rbn.running_var.clone()
    x = (1.0 + 2.0 * torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.double))
    w = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.double)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    grads = torch.autograd.grad((rbn(xa) * w).sum(), [xa, rbn.weight, rbn.bias])
    # RoTTA's formula, differentiated by autograd
    dims = [0, *range(2, x.ndim)]
    var_b, mean_b = torch.var_mean(xb, dim=dims, unbiased=False)
    view = (-1,) + (1,) * (x.ndim - 2)
    mean, var = torch.lerp(mean0, mean_b, 0.3).view(view), torch.lerp(var0, var_b, 0.3).view(view)
    out = (xb - mean) / torch.sqrt(var + rbn.eps) * rbn.weight.view(view) + rbn.bias.view(view)
    expected = torch.autograd.grad((out * w).sum(), [xb, rbn.weight, rbn.bias])
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("num_classes", "gamma"), [(10, 0.0), (10, 0.1), (3, 1.0), (1, 0.5)])
def test_balanced_bn_backward_matches_autograd_through_update(num_classes, gamma):
    from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
    from unitta.methods.norm.groups import ClassGroups
    from unitta.methods.norm.stats import normalise

    g = torch.Generator().manual_seed(4)
    layers = [BalancedBatchNorm2d(_bn().double(), num_classes, 0.05, gamma).train() for _ in range(2)]
    shift = 0.3 * torch.randn(num_classes, 4, generator=g, dtype=torch.double)
    for layer in layers:
        layer.local_mean += shift
    x = 1.0 + 2.0 * torch.randn(12, 4, 5, 5, generator=g, dtype=torch.double)
    labels = torch.randint(0, num_classes, (12,), generator=g)
    w = torch.randn(x.shape, generator=g, dtype=torch.double)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast, slow = layers
    fast.label = ClassGroups(labels, num_classes, 0.05, torch.double)
    got = torch.autograd.grad((fast(xa) * w).sum(), [xa, fast.weight, fast.bias])
    mean, var = slow.update(xb, ClassGroups(labels, num_classes, 0.05, torch.double))  # autograd through update
    out = normalise(xb, mean, var, slow.eps, slow.weight, slow.bias)
    want = torch.autograd.grad((out * w).sum(), [xb, slow.weight, slow.bias])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert torch.equal(fast.global_var, slow.global_var) and torch.equal(fast.local_mean, slow.local_mean)


@pytest.mark.parametrize(("k", "shape"), [(4.0, (12, 4, 5, 5)), (0.5, (6, 4, 3, 7)), (0.0, (5, 4, 2, 2)), (1e6, (12, 4, 5, 5))])
def test_iabn_backward_matches_autograd_through_its_formula(k, shape):
    # k spans every band case: 4 and 0.5 mix inside/above/below, 0 puts every sample outside, 1e6 inside
    g = torch.Generator().manual_seed(6)
    layers = [InstanceAwareBN(_bn().double(), k=k, momentum=0.3).train() for _ in range(2)]
    # instance statistics spread around the batch ones: some samples shifted/scaled far, some not
    x = 1.0 + torch.randn(shape, generator=g, dtype=torch.double) * (0.2 + 3 * torch.rand(shape[0], 1, 1, 1, generator=g,
                                                                                       dtype=torch.double))
    x = x + 2.0 * torch.randn(shape[0], shape[1], 1, 1, generator=g, dtype=torch.double)
    w = torch.randn(shape, generator=g, dtype=torch.double)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast, slow = layers
    out_fast = fast(xa)
    got = torch.autograd.grad((out_fast * w).sum(), [xa, fast.weight, fast.bias])
    out_slow = slow._forward(xb, shape[2] * shape[3], True)  # the operators, differentiated by autograd
    want = torch.autograd.grad((out_slow * w).sum(), [xb, slow.weight, slow.bias])
    assert torch.equal(out_fast, out_slow)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert torch.equal(fast.running_mean, slow.running_mean) and torch.equal(fast.running_var, slow.running_var)


def test_cpu_shortcuts_of_the_augmentation_give_the_same_values():
    """On the CPU the jitter runs only each view's own five ops (grouped by op) and the affine and blur only the
    centre crop: bit for bit what every op with identity factors and the whole padded image give."""
    from unitta.methods.parts.augment_ops import blur_views, center_crop, centre_window

    g = torch.Generator().manual_seed(4)
    x = torch.rand(6, 3, 3, 16, 16, generator=g)  # (views, batch, C, H, W)
    u = torch.rand(6, 10, generator=g)
    aug = cotta_augment()
    assert torch.equal(aug._jitter(x, u, grouped=True), aug._jitter(x, u, grouped=False))
    assert torch.equal(aug._jitter(x[:, :, :1], u, grouped=True), aug._jitter(x[:, :, :1], u, grouped=False))
    padded = torch.rand(12, 3, 32, 32, generator=g)  # 6 views x 2 images, padded to 2n
    affine_u, sigma = torch.rand(6, 4, generator=g), 0.001 + 0.499 * torch.rand(6, generator=g)
    whole = center_crop(blur_views(aug._affine_views(padded, affine_u, 2), 5, sigma, 2), 16)
    window = aug._affine_views(padded, affine_u, 2, centre_window((32, 32), 16, 2))
    assert torch.allclose(blur_views(window, 5, sigma, 2, padding=False), whole, atol=1e-6)
    source = torch.rand(4, 3, 16, 16, generator=g)
    kept = source.clone()
    aug._jitter(source.unsqueeze(1), torch.rand(4, 10, generator=g))  # never writes into its input
    assert torch.equal(source, kept)


def test_augmix_cpu_shortcut_gives_the_same_values():
    """MEMO's AugMix on the CPU runs each image's own op only: the same values as all nine ops selected per image."""
    from unitta.methods.parts.augmix import AugMix, _Draws

    pixels = (torch.rand(40, 3, 16, 16, generator=torch.Generator().manual_seed(6)) * 255).round()
    aug = AugMix(severity=3)
    active = torch.arange(40) % 3 != 0  # the chains still running at this step (the others keep their images)

    def random_op(grouped: bool) -> torch.Tensor:
        draws = _Draws.drawn(torch.Generator().manual_seed(8), 40, 3, pixels.device, pixels.dtype)
        return aug._random_op(pixels, draws, active, grouped)

    grouped, every = random_op(True), random_op(False)
    assert torch.equal(grouped, every) and not torch.equal(grouped, pixels)
    assert torch.equal(grouped[~active], pixels[~active])


def test_moco_augment_cpu_shortcut_gives_the_same_values():
    """AdaContrast's strong view on the CPU runs each step on the images that draw it only: bit for bit the values
    of every step on every image kept per image with ``torch.where``, and never writes into its input; its two
    views in one pass are those of two calls."""
    from unitta.methods.parts.augment import MoCoAugment

    x = torch.rand(24, 3, 20, 20, generator=torch.Generator().manual_seed(9)) * 1.2 - 0.1
    kept = x.clone()
    aug = MoCoAugment()
    selected = aug(x, torch.Generator().manual_seed(3), selected=True)
    every = aug(x, torch.Generator().manual_seed(3), selected=False)
    assert torch.equal(selected, every) and not torch.equal(selected, x.clamp(0, 1))
    assert torch.equal(x, kept)
    g = torch.Generator().manual_seed(5)  # two views in one pass: the values of two calls in turn
    in_turn = torch.cat([aug(x, g), aug(x, g)])
    assert torch.equal(aug(x, torch.Generator().manual_seed(5), views=2), in_turn)
