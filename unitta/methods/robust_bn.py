"""Robust BN alone: RoTTA's normalisation layer without its memory or training (Yuan et al., CVPR'23).

Every BatchNorm becomes a Robust BN (``norm/robust_bn_layer.py``) with alpha = 0.05
(``ADAPTER.RoTTA.ALPHA``, all datasets). Per batch, one train-mode forward: each layer moves its
global statistics toward the batch's, mu_g <- (1 - alpha) mu_g + alpha mu_b (likewise the variance),
and normalises with the updated statistics (RoTTA sec. 3.1). No parameter changes. Cost: 1F.

DEVIATION(UT c41bce7): UT's ``rotta_rbn`` adapter is not RoTTA's RBN: its yaml sets
``NAME: tribe_bbn``, i.e. TRIBE's Balanced BN with gamma = 1 and eta = 0.01 / 0.05 / 0.5 (CIFAR-10 /
CIFAR-100 / ImageNet), updated on every batch with the batch's pseudo-labels and a
composition-dependent momentum (docs/methods.md "Robust BN"). The paper's "RBN" numbers come from that
code. ``variant="reference"`` reproduces it (exactly the ``balanced_bn`` method with gamma = 1 and
the eta below: eval forward to predict, then a train forward with the pseudo-labels; 2F);
``variant="rbn"`` (default) is RoTTA's Robust BN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from unitta.methods.balanced_bn import BalancedBN
from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.robust_bn_layer import RobustBN
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_interval, check_probability
from unitta.nn.batchnorm import replace_batchnorms
from unitta.search_dimensions import LogUniform

__all__ = ["RobustBNMethod"]


@register_method("robust_bn")
class RobustBNMethod(TTAMethod):
    """RoTTA's Robust BN statistics alone (default), or UT's ``rotta_rbn`` (``variant="reference"``)."""

    @dataclass(frozen=True)
    class Config:
        alpha: float = 0.05  # ADAPTER.RoTTA.ALPHA (RoTTA, all datasets)
        variant: Literal["rbn", "reference"] = "rbn"  # "reference": UT rotta_rbn = Balanced BN, gamma 1
        eta: float = 0.01  # reference variant only: UT configs/adapter/cifar10/rotta_rbn.yaml TRIBE.ETA

        def __post_init__(self) -> None:
            check_probability("alpha", self.alpha)
            check_interval("eta", self.eta, 0.0, 1.0, open_low=True)

    presets = {
        "cifar100": {"eta": 0.05},  # UT configs/adapter/cifar100/rotta_rbn.yaml (reference variant)
        "imagenet": {"eta": 0.5},  # UT configs/adapter/imagenet/rotta_rbn.yaml (reference variant)
    }
    # UT configs/adapter/<dataset>/rotta_rbn.yaml: NAME tribe_bbn, GAMMA 1.0, ETA 0.01/0.05/0.5 (the
    # presets above), i.e. TRIBE's Balanced BN with gamma 1, not RoTTA's Robust BN.
    profiles = {"reference": {"variant": "reference"}}

    space = {  # docs/methods.md "Search spaces"
        # published 0.05 (ADAPTER.RoTTA.ALPHA, every dataset): a decade either side, log scale (an EMA rate)
        "alpha": LogUniform(5e-3, 0.5),
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        if self.cfg.variant == "reference":
            K, eta, paths = self.info.num_classes, self.cfg.eta, self.device_paths
            replaced = replace_batchnorms(self.model, lambda name, bn: BalancedBatchNorm2d(bn, K, eta, 1.0, paths))
            self.layers = list(replaced.values())
        else:
            self.layers = list(replace_batchnorms(self.model, lambda name, bn: RobustBN(bn, self.cfg.alpha)).values())
        self.model.eval()

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        if self.cfg.variant == "reference":
            return BalancedBN.forward(self, x)  # the balanced_bn method's per-batch step, gamma = 1
        for layer in self.layers:
            layer.train()
        logits = self.model(x)
        for layer in self.layers:
            layer.eval()
        return logits
