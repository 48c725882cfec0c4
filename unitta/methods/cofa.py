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
from torch import Tensor, nn

from unitta.methods.norm.stats import constant
from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod


class FeatureAverager:
    """COFA's state for one stream of forwards: the raw feature of the last sample seen (paper section 4.3)."""

    def __init__(self) -> None:
        self.last: Tensor | None = None  # (1, F)

    def reset(self) -> None:
        self.last = None

    def __call__(self, features: Tensor, head: nn.Module, filter: bool = True) -> Tensor:
        """(B, F) features in stream order -> (B, K) probabilities (eq. 7, and eq. 8 if ``filter``)."""
        first = features[:1] if self.last is None else self.last
        if first.device != features.device or first.dtype != features.dtype:
            first = first.to(features)
        previous = torch.cat([first, features[:-1]])
        # (z + z') / 2 as a product with a device constant 0.5 (the same rounding as dividing by 2);
        # for the very first sample (z + z) / 2 == z exactly
        averaged = torch.mul(features + previous, constant(0.5, features))
        last = features[-1:]
        self.last = (last.detach() if last.requires_grad else last).clone()
        p_avg = head(averaged).softmax(dim=-1)
        if not filter:
            return p_avg
        p_single = head(features).softmax(dim=-1)
        keep_single = torch.amax(p_single, dim=-1, keepdim=True) >= torch.amax(p_avg, dim=-1, keepdim=True)
        return torch.where(keep_single, p_single, p_avg)


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
