"""COFA: Confidence-Filtered Feature Averaging (UniTTA paper section 4.3, eq. 7-8).

Temporally correlated streams put same-class samples next to each other, so the classifier input of a
sample is averaged with its predecessor's: z~_i = (z_i + z_{i-1}) / 2, with raw (not averaged)
features and the predecessor carried across batch boundaries (for the very first sample z~ = z).
With the confidence filter each sample keeps whichever of softmax(W z + b) and softmax(W z~ + b) has
the larger maximum probability (ties -> the single-sample prediction). The model is not adapted.
Outputs are probabilities, as the reference adapter returns them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from unitta.methods.parts.feature_averaging import FeatureAverager
from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod


@register_method("cofa")
class COFA(TTAMethod):
    """COFA on the source model (reference adapter ``unitta_cofa``, paper section 4.3)."""

    norm_kinds = ("batch", "layer", "group")  # classifier inputs only: the network is not touched

    @dataclass(frozen=True)
    class Config:
        filter: bool = True  # FILT, configs/adapter/cifar10/unitta_cofa.yaml

    def setup(self) -> None:
        self.model.requires_grad_(False)
        self.model = FeatureModel(self.model, self.info.classifier).eval()
        self.averager = FeatureAverager()

    scores = "probabilities"

    def predict_scores(self, x: Tensor) -> Tensor:
        """Non-adapting prediction: the source classifier on the batch's own features (no averaging with the
        previous sample, which is COFA's state)."""
        return self.model.head(self.model(x)).softmax(dim=-1)

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.averager(self.model(x), self.model.head, self.cfg.filter)


@register_method("cofa_nofilter")
class COFANoFilter(COFA):
    """COFA without the confidence filter (reference adapter ``unitta_cofa_no_filt``, FILT False)."""

    @dataclass(frozen=True)
    class Config:
        filter: bool = False  # configs/adapter/cifar10/unitta_cofa_no_filt.yaml
