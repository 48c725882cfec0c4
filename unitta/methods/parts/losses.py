"""Losses shared by the self-training TTA methods (ROID, TRIBE, RPL, MEMO, SANTA, ...).

Every function takes (B, K) logits and returns a (B,) tensor (``marginal_entropy``: a scalar over views),
so a method can weight or mask samples before reducing.
"""

from __future__ import annotations

import math

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


def generalized_cross_entropy(logits: Tensor, targets: Tensor, q: float = 0.8) -> Tensor:
    """GCE (Zhang & Sabuncu, NeurIPS'18) per sample: (1 - p_y^q) / q, y = ``targets`` (RPL's loss).

    q -> 0 gives the cross-entropy, q = 1 the MAE; RPL (Rusak et al., TMLR'22) uses q = 0.8 on hard
    pseudo-labels (mariodoebler TTA benchmark ``utils/losses.py`` GeneralizedCrossEntropy).
    """
    p_y = logits.softmax(dim=1).gather(1, targets.unsqueeze(1)).squeeze(1)
    return (1.0 - p_y.pow(q)) / q


def marginal_entropy(logits: Tensor) -> Tensor:
    """MEMO's loss (Zhang et al., NeurIPS'22, eq. 1): H of the mean of softmax(z_v) over the V views, a scalar.

    Computed in log space as the reference (zhangmarvin/memo): log p_bar = logsumexp_v log p_v - log V,
    clamped to the dtype's smallest value so that 0 * log 0 stays finite.
    """
    log_p = logits.log_softmax(dim=1)
    log_mean = torch.logsumexp(log_p, dim=0) - math.log(logits.shape[0])
    log_mean = log_mean.clamp_min(torch.finfo(log_mean.dtype).min)
    return -(log_mean * log_mean.exp()).sum()


def aug_cross_entropy(logits: Tensor, logits_aug: Tensor, logits_anchor: Tensor, alpha: float = 0.5) -> Tensor:
    """SANTA's self-training term per sample (mariodoebler TTA benchmark ``utils/losses.py`` AugCrossEntropy):

    -(1 - alpha) sum_c softmax(z)_c log softmax(z_anchor)_c - alpha sum_c softmax(z_aug)_c log softmax(z_anchor)_c,
    i.e. the anchor's log-probabilities weighted by the student's predictions on the image and on its
    augmented view (gradients flow into the student's two predictions). alpha = 0.5 is the reference value.
    """
    log_anchor = logits_anchor.log_softmax(dim=1)
    own = (logits.softmax(dim=1) * log_anchor).sum(dim=1)
    aug = (logits_aug.softmax(dim=1) * log_anchor).sum(dim=1)
    return -(1.0 - alpha) * own - alpha * aug
