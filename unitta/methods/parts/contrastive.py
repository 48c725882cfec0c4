"""Contrastive pieces of the self-supervised TTA methods: RMT's projector and loss, AdaContrast's MoCo loss.

- ``Projector``: RMT's two-layer MLP head (Linear -> ReLU -> Linear) that maps encoder features to the space
  where the contrastive loss is computed (Döbler et al., CVPR'23, sec. 3.3; the mariodoebler TTA benchmark's
  ``methods/rmt.py``, ``CONTRAST.PROJECTION_DIM`` 128).
- ``multiview_contrastive_loss``: the supervised-contrastive loss of Khosla et al. (NeurIPS'20, eq. 2) with
  positives = the other views of the same sample (RMT: source prototype, test image, augmented test image),
  contrast mode "all" (every view is an anchor).
- ``moco_logits`` and ``class_aware_instance_loss``: AdaContrast's MoCo instance discrimination against a
  memory queue of keys, where queue entries whose pseudo-label equals the query's are not negatives
  (Chen et al., CVPR'22, sec. 3.3, eq. 4).

All are plain tensor functions (no host synchronisation).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Projector", "multiview_contrastive_loss", "moco_logits", "class_aware_instance_loss"]


class Projector(nn.Sequential):
    """Linear(in_dim, dim) -> ReLU -> Linear(dim, dim), initialised like ``nn.Linear`` from ``generator``."""

    def __init__(self, in_dim: int, dim: int, generator: torch.Generator):
        super().__init__(nn.Linear(in_dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        with torch.no_grad():
            for layer in (self[0], self[2]):
                # nn.Linear.reset_parameters, with the method's generator instead of the global one
                nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
                bound = 1.0 / math.sqrt(layer.in_features)
                nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


def multiview_contrastive_loss(views: Tensor, temperature: float, base_temperature: float | None = None) -> Tensor:
    """Supervised-contrastive loss over (N, V, D) L2-normalised views; positives = the same sample's other views.

    Every one of the N * V embeddings is an anchor; its log-probability of each positive against all other
    N * V - 1 embeddings (temperature ``temperature``) is averaged over its V - 1 positives, scaled by
    -temperature / base_temperature, and averaged over anchors (Khosla et al. 2020, eq. 2, "all" mode).
    """
    n, v, _ = views.shape
    if v < 2:
        raise ValueError(f"views: need at least 2 views per sample, got shape {tuple(views.shape)}")
    base_temperature = temperature if base_temperature is None else base_temperature
    flat = views.transpose(0, 1).reshape(n * v, -1)  # view-major, as torch.cat(torch.unbind(views, 1))
    logits = flat @ flat.T / temperature
    logits = logits - logits.max(dim=1, keepdim=True).values.detach()  # numerical stability only
    sample = torch.arange(n, device=views.device).repeat(v)
    not_self = ~torch.eye(n * v, dtype=torch.bool, device=views.device)
    positive = (sample[:, None] == sample[None, :]) & not_self
    exp = torch.exp(logits) * not_self
    log_prob = logits - torch.log(exp.sum(dim=1, keepdim=True))
    mean_log_prob_pos = (positive * log_prob).sum(dim=1) / positive.sum(dim=1)
    return -(temperature / base_temperature) * mean_log_prob_pos.mean()


def moco_logits(q: Tensor, k: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """(B, 1 + K) MoCo logits: [q . k, q . queue] / T for L2-normalised queries q, keys k (B, D), queue (D, K)."""
    positive = (q * k).sum(dim=1, keepdim=True)
    negative = q @ queue.detach()
    return torch.cat([positive, negative], dim=1) / temperature


def class_aware_instance_loss(logits: Tensor, pseudo_labels: Tensor, queue_labels: Tensor) -> Tensor:
    """Cross-entropy of MoCo ``logits`` (B, 1 + K) towards column 0, queue entries with the query's pseudo-label
    excluded from the negatives (AdaContrast's "class_aware" contrast, Chen et al. 2022 eq. 4)."""
    same_class = pseudo_labels[:, None] == queue_labels[None, :]
    excluded = torch.cat([torch.zeros_like(same_class[:, :1]), same_class], dim=1)  # the positive always stays
    masked = logits.masked_fill(excluded, float("-inf"))
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return F.cross_entropy(masked, target)
