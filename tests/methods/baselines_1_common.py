"""Shared helpers for ``test_baselines_1*.py`` (TENT, CoTTA, RoTTA, Robust BN, NOTE; issue 5 part 1).

A tiny BatchNorm CNN trained for a few seconds on Fashion-MNIST (the first 6000 images of the test
split; the other 4000 are the adaptation data), cached once per session, and a simple covariate shift
(lower contrast plus Gaussian noise) with an explicit generator.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.methods.norm.swap import named_batchnorms
from unitta.models.info import ModelInfo

MY_METHODS = ("tent", "cotta", "rotta", "robust_bn", "note")
N_TRAIN = 6000


class SmallNet(nn.Module):
    """conv-BN-ReLU x 3, each of stride 2 (32 -> 4 pixels), and a linear ``fc`` on the flattened 4 x 4 map
    (adaptively pooled, so smaller inputs such as UT's 16/32-pixel augmentation crops also work)."""

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
        return self.fc(F.adaptive_avg_pool2d(x, 4).flatten(1))  # (B, 2 * width * 4 * 4); identity pool at 32 px


def info_for(model: nn.Module) -> ModelInfo:
    names = tuple(name for name, _ in named_batchnorms(model))
    return ModelInfo(name="smallnet", dataset="fmnist", classifier="fc", bn_layers=names, bdn_layer=names[1],
                     num_classes=10)


@functools.lru_cache(maxsize=1)
def fmnist() -> tuple[Tensor, Tensor]:
    """Fashion-MNIST test split as float (10000, 3, 32, 32) in [0, 1] (zero-padded) and labels."""
    images, labels = read_fashion_mnist("test")
    x = F.pad(torch.from_numpy(images.astype(np.float32) / 255.0), (2, 2, 2, 2))
    return x.unsqueeze(1).repeat(1, 3, 1, 1), torch.from_numpy(labels)


def shift(x: Tensor, seed: int = 0, contrast: float = 0.4, noise: float = 0.15) -> Tensor:
    """A covariate shift: contrast scaled by ``contrast`` around 0.5, plus Gaussian noise, clipped."""
    g = torch.Generator().manual_seed(seed)
    return (0.5 + contrast * (x - 0.5) + noise * torch.randn(x.shape, generator=g)).clamp(0.0, 1.0)


@functools.lru_cache(maxsize=1)
def _trained_state() -> dict[str, Tensor]:
    torch.manual_seed(0)  # test-only: parameter initialisation of the tiny model
    model = SmallNet()
    x, y = fmnist()
    x, y = x[:N_TRAIN], y[:N_TRAIN]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(2):  # two epochs: about 17 % clean error, about 1 s of CPU
        order = torch.randperm(N_TRAIN, generator=g)
        for i in range(0, N_TRAIN, 100):
            idx = order[i : i + 100]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def trained_model() -> SmallNet:
    """A fresh copy of the (once-trained, cached) source model in eval mode."""
    model = SmallNet()
    model.load_state_dict(_trained_state())
    return model.eval()


def adaptation_data() -> tuple[Tensor, Tensor]:
    """The 4000 images not used for training, and their labels."""
    x, y = fmnist()
    return x[N_TRAIN:], y[N_TRAIN:]


def error(logits: Tensor, labels: Tensor) -> float:
    return (logits.argmax(dim=1) != labels).float().mean().item()
