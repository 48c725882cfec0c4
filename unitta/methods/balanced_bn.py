"""Balanced BN: TRIBE's class-balanced BatchNorm without any parameter update (paper's "Balanced BN").

Reference adapter ``tribe_bbn`` (spec 4.5): every BatchNorm becomes a Balanced BN (spec 2.3). Per
batch, the prediction is an eval forward with the statistics of the previous batches; its argmax
gives pseudo-labels, with which a second, train-mode forward updates the class-balanced statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.base import TTAMethod, register_method
from unitta.methods.norm.balanced_bn import BalancedBatchNorm2d
from unitta.methods.norm.swap import replace_batchnorms


@register_method("balanced_bn")
class BalancedBN(TTAMethod):
    """Predict with class-balanced statistics, then update them with the batch's pseudo-labels."""

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # TRIBE.ETA, configs/adapter/cifar10/tribe_bbn.yaml
        gamma: float = 0.0  # TRIBE.GAMMA, same file

    presets = {
        "cifar100": {"eta": 0.05, "gamma": 0.1},  # configs/adapter/cifar100/tribe_bbn.yaml (spec 4.5)
        "imagenet": {"eta": 0.5, "gamma": 0.5},  # configs/adapter/imagenet/tribe_bbn.yaml (spec 4.5)
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        K = self.info.num_classes
        self.layers = list(
            replace_batchnorms(
                self.model, lambda name, bn: BalancedBatchNorm2d(bn, K, self.cfg.eta, self.cfg.gamma)
            ).values()
        )

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        self.model.eval()
        logits = self.model(x)
        labels = logits.argmax(dim=1)
        self.model.train()
        for layer in self.layers:
            layer.label = labels
        self.model(x)
        self.model.eval()
        return logits
