"""Balanced BN: TRIBE's class-balanced BatchNorm without any parameter update (paper's "Balanced BN").

Reference adapter ``tribe_bbn``: every BatchNorm becomes a Balanced BN (TRIBE paper sec. 3.2; docs/unitta.md
"Layers"). Per
batch, the prediction is an eval forward with the statistics of the previous batches; its argmax
gives pseudo-labels, with which a second, train-mode forward updates the class-balanced statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.groups import ClassGroups
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import BN_EMA, BN_GAMMA
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_interval, check_probability
from unitta.nn.batchnorm import replace_batchnorms


@register_method("balanced_bn")
class BalancedBN(TTAMethod):
    """Predict with class-balanced statistics, then update them with the batch's pseudo-labels."""

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # TRIBE.ETA, configs/adapter/cifar10/tribe_bbn.yaml
        gamma: float = 0.0  # TRIBE.GAMMA, same file

        def __post_init__(self) -> None:
            check_interval("eta", self.eta, 0.0, 1.0, open_low=True)
            check_probability("gamma", self.gamma)

    presets = {
        "cifar100": {"eta": 0.05, "gamma": 0.1},  # configs/adapter/cifar100/tribe_bbn.yaml
        "imagenet": {"eta": 0.5, "gamma": 0.5},  # configs/adapter/imagenet/tribe_bbn.yaml
    }

    space = {  # docs/methods.md "Search spaces"
        "eta": BN_EMA,  # published 0.01 / 0.05 / 0.5 (tribe_bbn.yaml, as presets)
        "gamma": BN_GAMMA,  # published 0 / 0.1 / 0.5 (same files)
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        K = self.info.num_classes
        self.layers = list(
            replace_batchnorms(
                self.model, lambda name, bn: BalancedBatchNorm2d(bn, K, self.cfg.eta, self.cfg.gamma, self.device_paths)
            ).values()
        )

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        self.model.eval()
        logits = self.model(x)
        # the pseudo-label grouping is built once per batch and shared by every layer
        groups = ClassGroups(logits.argmax(dim=1), self.info.num_classes, self.layers[0].eta, x.dtype)
        self.model.train()
        for layer in self.layers:
            layer.label = groups
        self.model(x)
        self.model.eval()
        return logits
