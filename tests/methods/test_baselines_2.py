"""Shared contract tests for LAME, TRIBE, ROID, UnMix-TNS and ROID + UnMix-TNS (issue 5, part 2).

The helpers here (a tiny BatchNorm CNN trained for a few seconds on Fashion-MNIST, shifted test
batches) are imported by the other ``test_baselines_2_*.py`` files; the model is trained once per
session (cached).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.methods import get_method
from unitta.methods.norm.swap import named_batchnorms
from unitta.models.info import ModelInfo

METHODS = ("lame", "tribe", "roid", "unmixtns", "roid_unmixtns")
N_TRAIN = 6000  # training images (from Fashion-MNIST's train split)
N_TEST = 2000  # test images available to the tests (from the test split)


class TinyNet(nn.Module):
    """3 conv-BN-ReLU blocks (32x32 -> 8x8), 2x2 average pooling and a linear ``fc`` classifier."""

    def __init__(self, num_classes: int = 10, width: int = 12):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.conv3 = nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.fc(F.avg_pool2d(x, 2).flatten(1))  # (B, 2 * width * 4 * 4)


def tiny_info(model: nn.Module) -> ModelInfo:
    names = tuple(name for name, _ in named_batchnorms(model))
    return ModelInfo(
        name="tinynet", dataset="fmnist", classifier="fc", bn_layers=names, bdn_layer=names[1], num_classes=10
    )


def to_images(raw: np.ndarray) -> torch.Tensor:
    """uint8 (N, 28, 28) -> float (N, 3, 32, 32) in [0, 1], zero-padded like Fashion-MNIST-C."""
    x = torch.from_numpy(raw.astype(np.float32) / 255.0)
    x = F.pad(x, (2, 2, 2, 2))
    return x.unsqueeze(1).repeat(1, 3, 1, 1)


def shift(x: torch.Tensor, seed: int = 0, contrast: float = 0.6, brightness: float = 0.2, noise: float = 0.1):
    """A simple covariate shift: lower contrast, raised brightness, Gaussian noise, clipped to [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    return (x * contrast + brightness + noise * torch.randn(x.shape, generator=g)).clamp(0.0, 1.0)


@functools.lru_cache(maxsize=1)
def trained_model() -> tuple[TinyNet, torch.Tensor, torch.Tensor]:
    """(model trained on clean images, test images (N_TEST, 3, 32, 32), test labels); cached."""
    torch.set_num_threads(1)
    train_raw, train_labels = read_fashion_mnist("train")
    test_raw, test_labels = read_fashion_mnist("test")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(train_labels))[:N_TRAIN]
    x, y = to_images(train_raw[idx]), torch.from_numpy(train_labels[idx])
    with torch.random.fork_rng():  # nn.Module init draws from the global RNG: seed it locally
        torch.manual_seed(0)
        model = TinyNet()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(1):  # one epoch
        order = torch.randperm(N_TRAIN, generator=g)
        for start in range(0, N_TRAIN, 64):
            b = order[start : start + 64]
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    tidx = np.random.default_rng(1).permutation(len(test_labels))[:N_TEST]
    return model, to_images(test_raw[tidx]), torch.from_numpy(test_labels[tidx])


def error(scores: torch.Tensor, labels: torch.Tensor) -> float:
    return float((scores.argmax(1) != labels).float().mean())


def run_stream(method, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([method(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    return trained_model()


# ---------------------------------------------------------------------------------------------- tests
def test_tiny_model_is_a_real_classifier(trained):
    model, x, y = trained
    with torch.no_grad():
        clean = error(model(x[:500]), y[:500])
        shifted = error(model(shift(x[:500])), y[:500])
    assert clean < 0.25  # a few seconds of training on 6k images
    assert shifted > clean + 0.1  # the shift hurts the source model


@pytest.mark.parametrize("name", METHODS)
def test_reset_restores_the_source_exactly(trained, name):
    model, x, _ = trained
    source_state = {k: v.clone() for k, v in model.state_dict().items()}
    xs = shift(x[:96])
    method = get_method(name, model, tiny_info(model), seed=3)
    first = method(xs[:32])
    for i in range(1, 3):
        method(xs[32 * i : 32 * (i + 1)])
    method.reset()
    assert method.cost.batches == 0 and method.cost.backwards == 0
    again = method(xs[:32])
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    # the source model itself was never touched
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, source_state[k], rtol=0, atol=0)


@pytest.mark.parametrize("name", METHODS)
def test_deterministic_for_a_fixed_seed(trained, name):
    model, x, _ = trained
    xs = shift(x[:96], seed=5)
    outs = []
    for _ in range(2):
        method = get_method(name, model, tiny_info(model), seed=11)
        outs.append(run_stream(method, xs, 32))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


@pytest.mark.parametrize("name", METHODS)
def test_any_batch_size_gives_finite_scores(trained, name):
    model, x, _ = trained
    xs = shift(x[:40], seed=7)
    method = get_method(name, model, tiny_info(model), seed=0)
    out = torch.cat([method(xs[i : i + b]) for i, b in ((0, 1), (1, 2), (3, 1), (4, 5), (9, 1), (10, 30))])
    assert out.shape == (40, 10)
    assert torch.isfinite(out).all()
    # and the method keeps working after single-sample batches
    assert torch.isfinite(method(xs[:16])).all()


@pytest.mark.parametrize("name", METHODS)
def test_registered_with_dataset_presets(trained, name):
    model, _, _ = trained
    for dataset in ("cifar10", "cifar100", "imagenet"):
        method = get_method(name, model, tiny_info(model), dataset=dataset)
        assert method.name == name
