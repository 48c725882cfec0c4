"""Per-batch sample groupings shared by every Balanced BN / BDN layer of a model.

Within one forward every layer groups the batch the same way (by pseudo-label for Balanced BN, by
(domain, class) for BDN), so the grouping, the group sizes and the EMA weights are computed once per
batch by the method and handed to all layers, instead of once per layer. Everything stays on the
device: group sizes come from a one-hot sum or ``index_add``, never from ``torch.bincount`` (which
reads its maximum back to the host on CUDA).

The two operations a layer needs are group sums ``m_g * sum_{i in g} s_i`` (a matrix product with the
(G, B) matrix of weights m_g, one operator for all groups) and per-sample rows of a (G, C) table
(``torch.take`` with flat indices built once per batch and channel count).
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from unitta.methods.norm.stats import constant

DENSE_LIMIT = 1 << 22  # group sums by a dense (G, B) matrix product up to G * B entries, else index_add


_CACHE: dict[tuple, Tensor] = {}


def _cached(kind: str, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Read-only helper tensors, built once per (kind, size, dtype, device): group ids (n, 1), ones (n,)."""
    key = (kind, n, dtype, device)
    out = _CACHE.get(key)
    if out is None:
        if kind == "ids":
            out = torch.arange(n, dtype=dtype, device=device)[:, None]
        else:
            out = torch.ones(n, dtype=dtype, device=device)
        _CACHE[key] = out
    return out


def clamped_weight(n: Tensor, eta: float) -> Tensor:
    """TRIBE's clamp of the EMA weight per group of ``n`` samples: 1/n if n > 1/eta else eta.

    A group with more than 1/eta samples moves all the way to its batch statistics (Su et al., AAAI'24,
    Balanced BN; docs/unitta.md "Layers"). Computed as 1 / max(n, 1/eta), which is eta exactly for the
    reference's eta (0.01, 0.05, 0.5: 1/eta is an integer) and within one rounding of it otherwise.
    Empty groups get eta too; their samples' weights and m * n are 0 anyway.
    """
    return torch.clamp(n, min=1.0 / eta).reciprocal()


class _Grouping:
    """Group index per sample, group sums and row gathers shared by all layers of one forward."""

    def __init__(self, index: Tensor, num_groups: int, eta: float, clamp: bool, dtype: torch.dtype):
        self.index = index  # (B,) group of every sample
        self.num_groups = num_groups
        B, device = index.shape[0], index.device
        self.weight: Tensor | None = None  # (G, B): m_g where sample i is in group g
        self.sample_weight: Tensor | None = None  # (B, 1): m_{g_i}, for the index_add path
        self._eta = None if clamp else eta  # one weight for every group: index_add's alpha
        if num_groups * B <= DENSE_LIMIT:
            one_hot = (_cached("ids", num_groups, index.dtype, device) == index).to(dtype)  # (G, B)
            self.sizes = one_hot.sum(1, keepdim=True)  # (G, 1): n_g
            m = clamped_weight(self.sizes, eta) if clamp else constant(eta, one_hot)
            self.weight = one_hot * m
        else:
            ones = _cached("ones", B, dtype, device)
            self.sizes = torch.zeros(num_groups, 1, dtype=dtype, device=device).index_add_(0, index, ones[:, None])
            m = clamped_weight(self.sizes, eta) if clamp else constant(eta, self.sizes)
            if clamp:
                self.sample_weight = m[index]
        self.mn = m * self.sizes  # (G, 1): m_g n_g (0 for empty groups)
        self._flat: dict[tuple[str, int, int], Tensor] = {}
        self._scaled: dict[int, Tensor] = {1: self.weight} if self.weight is not None else {}
        self._transposed: dict[int, tuple[Tensor, Tensor]] = {}

    def sums(self, a: Tensor, b: Tensor, divisor: int = 1) -> tuple[Tensor, Tensor]:
        """(m_g sum_{i in g} a_i / divisor, m_g sum_{i in g} b_i / divisor), each (G, C), for (B, C) ``a``
        and ``b`` (``divisor``: the positions L when ``a``, ``b`` are spatial sums, ``instance_moments``)."""
        if self.weight is not None:
            weight = self._scaled.get(divisor)
            if weight is None:
                weight = self._scaled[divisor] = self.weight / divisor
            return torch.mm(weight, a), torch.mm(weight, b)
        C = a.shape[1]
        source = torch.cat([a, b], dim=1)
        out = a.new_zeros(self.num_groups, 2 * C)
        if self._eta is not None:
            out.index_add_(0, self.index, source, alpha=self._eta / divisor)
        else:
            out.index_add_(0, self.index, source * (self.sample_weight / divisor))
        return out[:, :C], out[:, C:]

    def scaled_weight(self, divisor: int = 1) -> tuple[Tensor, Tensor]:
        """((B, G) transpose of the dense weights / ``divisor`` that ``sums`` uses, (B, 1) their sums over the
        groups), built once per batch and divisor: a backward through ``sums`` by hand needs both."""
        out = self._transposed.get(divisor)
        if out is None:
            weight = self._scaled.get(divisor)
            if weight is None:
                weight = self._scaled[divisor] = self.weight / divisor
            out = self._transposed[divisor] = (weight.t(), weight.sum(0).unsqueeze(1))
        return out

    def rows(self, table: Tensor, by: str = "index", trailing: int = 0) -> Tensor:
        """``table[getattr(self, by)]`` for a (rows, C) ``table``, with ``trailing`` singleton dimensions
        appended (a per-sample map for a (B, C, H, W) input): one ``torch.take`` whose flat indices are
        built once per batch and channel count and reused by every layer with C channels."""
        C = table.shape[1]
        flat = self._flat.get((by, C, trailing))
        if flat is None:
            index = getattr(self, by)
            flat = index[:, None] * C + torch.arange(C, device=index.device)
            flat = self._flat[(by, C, trailing)] = flat.view(flat.shape + (1,) * trailing)
        return torch.take(table, flat)


class ClassGroups(_Grouping):
    """The pseudo-label groups of one batch for Balanced BN's class-balanced update.

    Group k holds the samples with pseudo-label k and weight m_k = TRIBE's ``clamped_weight``;
    ``num_present`` and ``mn_mean`` are the count of present classes and the mean of m_k n_k over them,
    which the gamma term needs.
    """

    def __init__(self, label: Tensor, num_classes: int, eta: float, dtype: torch.dtype = torch.float32):
        if label.ndim != 1:
            raise ValueError(f"label has shape {tuple(label.shape)}, expected (B,)")
        label = label if label.dtype == torch.long else label.long()
        super().__init__(label, num_classes, eta, True, dtype)
        self.label, self.num_classes, self.eta = label, num_classes, eta

    @cached_property
    def num_present(self) -> Tensor:
        """The number of classes present in the batch (0-dim, on the device)."""
        return torch.count_nonzero(self.sizes).to(self.sizes.dtype)

    @cached_property
    def mn_mean(self) -> Tensor:
        """The mean of m_k n_k over the present classes (0-dim, on the device)."""
        return self.mn.sum() / self.num_present

    def matches(self, num_classes: int, eta: float, batch: int) -> bool:
        return (num_classes, eta, batch) == (self.num_classes, self.eta, self.label.shape[0])


class SlotGroups(_Grouping):
    """The (domain slot, class) groups of one batch for BDN's domain-class update.

    Group g = d * K + k indexes the rows of a BDN layer's (slots * K, C) statistics. Its weight is eta
    for every group (the reference, unclamped: eta * n may exceed 1) or TRIBE's ``clamped_weight`` of the
    group's size; ``domain_counts`` (slots,) holds the samples per domain slot.
    """

    def __init__(self, domain: Tensor, label: Tensor, num_slots: int, num_classes: int, eta: float, clamp: bool,
                 dtype: torch.dtype = torch.float32):
        if domain.shape != label.shape or domain.ndim != 1:
            raise ValueError(f"domain {tuple(domain.shape)} and label {tuple(label.shape)} must both be (B,)")
        self.domain = domain if domain.dtype == torch.long else domain.long()
        label = label if label.dtype == torch.long else label.long()
        self.num_slots, self.num_classes, self.eta, self.clamp = num_slots, num_classes, eta, clamp
        index = torch.add(label, self.domain, alpha=num_classes)
        super().__init__(index, num_slots * num_classes, eta, clamp, dtype)
        ones = _cached("ones", index.shape[0], torch.long, index.device)
        self.domain_counts = torch.zeros(num_slots, dtype=torch.long, device=index.device).index_add_(
            0, self.domain, ones
        )

    def matches(self, num_slots: int, num_classes: int, eta: float, clamp: bool, batch: int) -> bool:
        return (num_slots, num_classes, eta, clamp, batch) == (
            self.num_slots, self.num_classes, self.eta, self.clamp, self.index.shape[0]
        )
