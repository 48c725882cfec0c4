"""TEST: the source model, unchanged, in eval mode (UniTTA ``configs/adapter/*/test.yaml``); any normalisation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod


@register_method("test")
class SourceModel(TTAMethod):
    """The no-adaptation baseline: the pre-trained model with its source BatchNorm statistics (if any)."""

    norm_kinds = ("batch", "layer", "group")  # nothing is adapted: any model

    adapts = False  # the baseline: its outputs are the source model's by design

    @dataclass(frozen=True)
    class Config:
        pass

    def setup(self) -> None:
        self.model.eval()
        self.model.requires_grad_(False)

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)
