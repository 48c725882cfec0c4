"""UnMix-TNS: mixture-of-components test-time normalisation, no gradient step.

Paper:     Tomar et al., "Un-Mixing Test-Time Normalization Statistics: Combatting Label Temporal
           Correlation", ICLR 2024 (docs/methods.md "UnMix-TNS").
Upstream:  devavratTomar/unmixtns; UniTTA's ``unmixtns`` adapter (configs/adapter/*/unmixtns.yaml).
Algorithm: every BatchNorm2d becomes an UnMixTNS2d layer (``norm/unmixtns_layer.py``) with K components;
           each instance is normalised with its own mixture of the components and the components
           follow the stream. One forward per batch, nothing is trained.
Deviations (from the reference; see norm/unmixtns_layer.py for the layer's):
- the momentum uses each forward's actual batch size (reference: the configured one);
- the original runs ImageNet at B = B_max = 16; UniTTA uses B_max = 64 for every dataset, as here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.norm.unmixtns_layer import convert_to_unmixtns
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least
from unitta.search_dimensions import Choice


@register_method("unmixtns")
class UnMixTNS(TTAMethod):
    """UnMix-TNS normalisation layers on the source model (Tomar et al., ICLR'24)."""

    @dataclass(frozen=True)
    class Config:
        num_components: int = 16  # UT configs/adapter/*/unmixtns.yaml and the original run.sh (K = 16)
        max_batch_size: int = 64  # UT: B_max = 64 on every dataset (original: 16 on ImageNet)

        def __post_init__(self) -> None:
            check_at_least("num_components", self.num_components, 1)
            check_at_least("max_batch_size", self.max_batch_size, 1)

    presets = {}  # UT uses the same values on CIFAR-10, CIFAR-100 and ImageNet

    space = {  # docs/methods.md "Search spaces"
        # published K = 16 (UT unmixtns.yaml, original run.sh) and 128 (UT ADAPTER.ROID.UNMIXTNS): powers of two
        "num_components": Choice((4, 8, 16, 32, 64, 128)),
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        self.layers = convert_to_unmixtns(
            self.model, self.cfg.num_components, self.cfg.max_batch_size, self.generator, self.device_paths
        )

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.model(x)

