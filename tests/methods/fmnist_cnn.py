"""A small BatchNorm CNN trained for a few seconds on Fashion-MNIST: the source model of the method tests.

Trained once per session (``tests/conftest.py`` fixture ``fmnist_cnn``) on 6,000 images of the training
split; the tests adapt on 4,000 images of the test split, under covariate shifts each test file defines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.models.info import ModelInfo
from unitta.nn.batchnorm import named_batchnorms

N_TRAIN = 6000  # training images (Fashion-MNIST train split)
N_TEST = 4000  # adaptation images (Fashion-MNIST test split, a fixed random subset)


class SmallNet(nn.Module):
    """conv-BN-ReLU x 3, each of stride 2 (32 -> 4 pixels), and a linear ``fc`` on the 4 x 4 map
    (adaptively pooled, so smaller inputs such as UT's 16-pixel augmentation crops also work)."""

    def __init__(self, width: int = 8, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.conv3 = nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 4).flatten(1))  # identity pool at 32 px


def info_for(model: nn.Module) -> ModelInfo:
    names = tuple(name for name, _ in named_batchnorms(model))
    return ModelInfo(name="smallnet", dataset="fmnist", classifier="fc", bn_layers=names, bdn_layer=names[1],
                     num_classes=10)


def to_images(raw: np.ndarray) -> Tensor:
    """uint8 (N, 28, 28) -> float (N, 3, 32, 32) in [0, 1], zero-padded like Fashion-MNIST-C."""
    x = F.pad(torch.from_numpy(raw.astype(np.float32) / 255.0), (2, 2, 2, 2))
    return x.unsqueeze(1).repeat(1, 3, 1, 1)


def error(scores: Tensor, labels: Tensor) -> float:
    return float((scores.argmax(dim=1) != labels).float().mean())


def run_stream(method, x: Tensor, batch_size: int) -> Tensor:
    return torch.cat([method(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


@dataclass(frozen=True)
class FmnistCNN:
    """The trained source model (eval mode; methods deep-copy it), its ModelInfo and the adaptation data."""

    model: SmallNet
    info: ModelInfo
    x: Tensor  # (N_TEST, 3, 32, 32) clean test images
    y: Tensor  # (N_TEST,) labels


def train_fmnist_cnn() -> FmnistCNN:
    """Two epochs of Adam on 6,000 training images (about 15 % clean test error, a second or two of CPU)."""
    train_raw, train_labels = read_fashion_mnist("train")
    test_raw, test_labels = read_fashion_mnist("test")
    idx = np.random.default_rng(0).permutation(len(train_labels))[:N_TRAIN]
    x, y = to_images(train_raw[idx]), torch.from_numpy(train_labels[idx]).long()
    with torch.random.fork_rng():  # nn.Module init draws from the global RNG: seed it locally
        torch.manual_seed(0)
        model = SmallNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(2):
        order = torch.randperm(N_TRAIN, generator=g)
        for start in range(0, N_TRAIN, 100):
            b = order[start : start + 100]
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    tidx = np.random.default_rng(1).permutation(len(test_labels))[:N_TEST]
    return FmnistCNN(model, info_for(model), to_images(test_raw[tidx]), torch.from_numpy(test_labels[tidx]).long())


def shift(x: Tensor, seed: int = 0, contrast: float = 0.6, brightness: float = 0.2, noise: float = 0.1) -> Tensor:
    """A covariate shift: ``contrast * x + brightness`` plus Gaussian noise (explicit generator), clipped to [0, 1].

    ``brightness = (1 - contrast) / 2`` scales the contrast around mid-grey.
    """
    g = torch.Generator().manual_seed(seed)
    return (x * contrast + brightness + noise * torch.randn(x.shape, generator=g)).clamp(0.0, 1.0)


def grey_shift(x: Tensor, seed: int = 0) -> Tensor:
    """Contrast halved around mid-grey plus noise of standard deviation 0.1 (the shift of the TENT..NOTE tests)."""
    return shift(x, seed=seed, contrast=0.5, brightness=0.25, noise=0.1)


def source_set(n: int, seed: int = 2) -> TensorDataset:
    """``n`` labelled Fashion-MNIST training images (a fixed random subset), for the methods that need source data."""
    raw, labels = read_fashion_mnist("train")
    idx = np.random.default_rng(seed).permutation(len(labels))[:n]
    return TensorDataset(to_images(raw[idx]), torch.from_numpy(labels[idx]).long())
