"""Per-sample losses shared by the self-training TTA methods (ROID, TRIBE, ...).

Every function takes (B, K) logits and returns a (B,) tensor, so a method can weight or mask
samples before reducing.
"""

from __future__ import annotations

import torch
from torch import Tensor


def softmax_entropy(logits: Tensor) -> Tensor:
    """H(softmax(z)) = -sum_c p_c log p_c per sample, (B,)."""
    log_p = logits.log_softmax(dim=1)
    return -(log_p.exp() * log_p).sum(dim=1)


def soft_likelihood_ratio(logits: Tensor, clip: float = 0.99, eps: float = 1e-5) -> Tensor:
    """ROID's soft likelihood ratio loss per sample (docs/methods.md "ROID").

    SLR(p) = -sum_c p_c log(p_c / (1 - p_c) + eps) with p clipped to [0, clip]; clip 0.99 and
    eps 1e-5 are the reference values (md utils/losses.py SoftLikelihoodRatio).
    """
    p = logits.softmax(dim=1).clamp(0.0, clip)
    return -(p * torch.log(p / (1.0 - p) + eps)).sum(dim=1)


def symmetric_cross_entropy(logits_a: Tensor, logits_b: Tensor, alpha: float = 0.5) -> Tensor:
    """(1 - alpha) CE(softmax(b) -> a) + alpha CE(softmax(a) -> b) per sample (ROID's consistency).

    Neither side is detached, as in the reference (ROID paper sec. 3); alpha = 0.5 is the reference value.
    """
    ce_b_to_a = -(logits_b.softmax(dim=1) * logits_a.log_softmax(dim=1)).sum(dim=1)
    ce_a_to_b = -(logits_a.softmax(dim=1) * logits_b.log_softmax(dim=1)).sum(dim=1)
    return (1.0 - alpha) * ce_b_to_a + alpha * ce_a_to_b


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the rows where ``mask`` is true; 0 (with zero gradient) when none is.

    The reference's ``values[mask].mean()`` gives NaN on an empty mask (TRIBE, docs/methods.md "TRIBE"); its
    gradient is zero either way, so returning 0 changes nothing but the logged value. Computed as a masked
    sum over a clamped count (same value and gradient as the filtered mean, up to summation order) so that
    no data-dependent shape, and hence no host synchronisation, is involved.
    """
    selected = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return selected.sum() / mask.sum().clamp_min(1).to(values.dtype)
