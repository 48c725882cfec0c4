"""Per-batch sample groupings shared by every Balanced BN / BDN layer of a model.

Within one forward every layer groups the batch the same way (by pseudo-label for Balanced BN, by
(domain, class) for BDN), so the grouping, the group sizes and the EMA weights are computed once per
batch by the method and handed to all layers, instead of once per layer. Everything stays on the
device: group sizes come from a one-hot sum or ``index_add``, never from ``torch.bincount`` (which
reads its maximum back to the host on CUDA).
"""

from __future__ import annotations

import torch
from torch import Tensor


def clamped_weight(n: Tensor, eta: float) -> Tensor:
    """TRIBE's clamp of the EMA weight per group of ``n`` samples: 1/n if n > 1/eta else eta; 0 if n == 0.

    A group with more than 1/eta samples moves all the way to its batch statistics (Su et al., AAAI'24,
    Balanced BN; docs/unitta.md "Layers").
    """
    m = torch.where(n > 1.0 / eta, 1.0 / n.clamp_min(1.0), torch.full_like(n, eta))
    return torch.where(n > 0, m, torch.zeros_like(m))


class ClassGroups:
    """The pseudo-label groups of one batch for Balanced BN's class-balanced update.

    ``weight`` (K, B) holds m_k at (k, i) for every sample i of class k and 0 elsewhere, so that
    ``weight @ s`` gives m_k sum_{i: y_i = k} s_i for every class at once (one matrix product, no loop or
    scatter); ``mn`` (K, 1) is m_k n_k; ``mn_mean`` and ``num_present`` are the means over the present
    classes that the gamma term needs.
    """

    def __init__(self, label: Tensor, num_classes: int, eta: float, dtype: torch.dtype = torch.float32):
        if label.ndim != 1:
            raise ValueError(f"label has shape {tuple(label.shape)}, expected (B,)")
        self.label = label.long()
        self.num_classes = num_classes
        self.eta = eta
        classes = torch.arange(num_classes, device=label.device)
        one_hot = (classes[:, None] == self.label[None, :]).to(dtype)  # (K, B)
        n = one_hot.sum(1)
        m = clamped_weight(n, eta)
        self.weight = one_hot * m[:, None]
        self.mn = (m * n)[:, None]
        self.num_present = (n > 0).sum().to(dtype)
        self.mn_mean = self.mn.sum() / self.num_present

    def matches(self, num_classes: int, eta: float, batch: int) -> bool:
        return num_classes == self.num_classes and eta == self.eta and batch == self.label.shape[0]


class SlotGroups:
    """The (domain slot, class) groups of one batch for BDN's domain-class update.

    Group g = d * K + k indexes the rows of a BDN layer's (slots * K, C) statistics. ``index`` (B,) is
    every sample's group, ``sample_weight`` its EMA weight (eta unclamped, as the reference, or TRIBE's
    clamp ``clamped_weight`` of its group's size), ``mn`` (slots * K, 1) is m_g n_g, and
    ``domain_counts`` (slots,) the samples per domain slot.
    """

    def __init__(self, domain: Tensor, label: Tensor, num_slots: int, num_classes: int, eta: float, clamp: bool,
                 dtype: torch.dtype = torch.float32):
        if domain.shape != label.shape or domain.ndim != 1:
            raise ValueError(f"domain {tuple(domain.shape)} and label {tuple(label.shape)} must both be (B,)")
        self.domain = domain.long()
        self.num_slots, self.num_classes, self.eta, self.clamp = num_slots, num_classes, eta, clamp
        self.index = self.domain * num_classes + label.long()
        rows = num_slots * num_classes
        ones = torch.ones(self.index.shape[0], dtype=dtype, device=self.index.device)
        n = torch.zeros(rows, dtype=dtype, device=self.index.device).index_add_(0, self.index, ones)
        if clamp:
            m = clamped_weight(n, eta)
            self.sample_weight: Tensor | None = m[self.index][:, None]
            self.mn = (m * n)[:, None]
        else:  # the reference: weight eta for every group, so eta * n may exceed 1 (docs/unitta.md)
            self.sample_weight = None
            self.mn = (n * eta)[:, None]
        self.domain_counts = torch.zeros(num_slots, dtype=torch.long, device=self.index.device).index_add_(
            0, self.domain, torch.ones_like(self.domain)
        )

    def matches(self, num_slots: int, num_classes: int, eta: float, clamp: bool, batch: int) -> bool:
        return (num_slots, num_classes, eta, clamp, batch) == (
            self.num_slots, self.num_classes, self.eta, self.clamp, self.index.shape[0]
        )
