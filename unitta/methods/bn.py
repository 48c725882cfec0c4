"""BN: normalise with test-batch statistics instead of the source running statistics.

UniTTA ``configs/adapter/*/bn.yaml``: every BatchNorm uses the current batch's statistics,
running statistics removed, no parameter update. Batches of size 1 (which the reference skips but
``evaluate`` feeds) are normalised with the single sample's statistics over H x W; see
``unitta/methods/norm/batch_stats.py`` for the exact fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.nn.batchnorm import replace_batchnorms


@register_method("bn")
class BatchStatsBN(TTAMethod):
    """Test-batch normalisation (Schneider et al. 2020 / Nado et al. 2020), UniTTA adapter ``bn``."""

    @dataclass(frozen=True)
    class Config:
        pass

    def setup(self) -> None:
        self.model.requires_grad_(False)
        replace_batchnorms(self.model, lambda name, bn: BatchStatsNorm(bn))
        self.model.eval()  # the replaced layers always use batch statistics; eval keeps dropout off

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)
