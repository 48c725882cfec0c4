"""COFA's feature averaging (UniTTA paper section 4.3, eq. 7-8), shared by COFA (``unitta/methods/cofa.py``) and
UniTTA's three forwards (``bdn_framework.py``): a sample's classifier input averaged with its predecessor's, the
predecessor carried across batch boundaries, and the confidence filter between the averaged and the single-sample
prediction."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unitta.methods.norm.stats import constant

__all__ = ["FeatureAverager"]


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
