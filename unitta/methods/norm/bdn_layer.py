"""Balanced Domain Normalization (BDN), the normalisation layer of the UniTTA framework (paper section 4.2),
as the reference implements it (LeapLabTHU/UniTTA core/utils/bdn.py).

One BDN layer replaces one BatchNorm. It keeps, for D domain slots and K classes:
  * domain-class statistics ``local_mean/local_var`` (D*K, C), row g = d*K + k;
  * domain statistics derived from them after every update:
      domain_mean[d] = mean_k local_mean[d,k],
      domain_var[d]  = mean_k local_var[d,k] + var_k(local_mean[d,k])   (unbiased across classes);
  * ``count`` (D,): samples assigned to each domain so far;
  * an embedded Balanced BN ``bbn`` (docs/unitta.md "Layers") with class-balanced global statistics, used by the
    first two of UniTTA's three forwards, and whose affine parameters are the only ones applied.
Slot D-1 is always a *fresh* domain equal to the source statistics; slots 0..D-2 are discovered
domains. Initially D = 2 (two source copies), as in the reference's dynamic mode.

The method drives the layer through attributes set before each forward:
  * ``label`` None, ``domain`` None: normalise with the BBN global statistics (forward 1; no update
    in eval mode).
  * ``label`` given, ``domain`` None (forward 2): the BBN updates with the pseudo-labels and
    normalises; at the prediction layer (``predicts_domain``) the layer also predicts every sample's
    domain from its instance statistics into ``domain_pred``.
  * ``label`` and ``domain`` given (forward 3): count the domains, append a fresh domain if
    ``expand``, EMA-update the domain-class statistics of the batch's (domain, class)
    groups, normalise every sample with its own domain's statistics, then prune if
    ``prune``.
Everything is vectorised over the batch: groups are handled with ``index_add`` on g = d*K + k.

GPU efficiency (measured by bench/opcount.py): the statistics live in preallocated tensors of
``capacity`` >= D slots; slots D.. hold the source statistics and count 0, and D itself is a device
tensor (``num_active``). Expanding is then ``D += expand`` and pruning a stable reordering of the slots,
both on the device, so the expansion and pruning decisions never travel to the host; distances to the
unused slots are masked to infinity. The host only keeps an upper bound of D (one more per updating
forward) and reads D back (one synchronisation) when that bound reaches the capacity, growing the
capacity if needed: with ``SLOT_HEADROOM`` spare slots after every such read that is at most one read
every few batches, and none once the capacity reaches ``domain_limit + 1`` (pruning bounds D). The
accessors ``count``, ``domain_mean``, ``local_mean``, ... and ``num_domains`` return the D used slots
and read D from the device: they are for reporting and tests, outside the forward. A forward that does
not update normalises with cached per-slot (scale, shift) tables, gathered per sample.

Reference quirks kept as defaults (documented in docs/unitta.md):
  * the EMA update is *not* clamped (as the reference; ``clamp=True`` gives TRIBE's 1/n clamp instead);
  * the distance is the squared Wasserstein-2 distance (``distance="kl"``: the paper's symmetric KL);
  * ties in the distance go to the lowest index (the first batch all goes to domain 0).
Guards that only act where the reference would produce NaN: negative variances are clamped to 0 inside
the distance and the normalisation, and the KL distance adds the BN eps to both variances.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.groups import ClassGroups, SlotGroups
from unitta.methods.norm.stats import (
    AffineCache,
    apply_affine,
    as_map,
    class_mean_var,
    ema_step,
    instance_mean_var,
    instance_moments,
    normalise,
    source_statistics,
)
from unitta.methods.parts.device import DevicePaths

Distance = Literal["w2", "kl"]
DISTANCES = ("w2", "kl")
INITIAL_DOMAINS = 2  # the reference's dynamic mode starts with one discovered and one fresh slot
PRUNE_COVER = 0.5  # prune among the oldest half of the domains
INITIAL_CAPACITY = 8  # preallocated domain slots (grown on demand; memory: slots * K * C floats, twice)
SLOT_HEADROOM = 4  # spare slots kept after a read of D, so that reads are at least this many batches apart


def domain_distance(
    mean: Tensor, var: Tensor, domain_mean: Tensor, domain_var: Tensor, distance: Distance, eps: float = 1e-5
) -> Tensor:
    """Distance (B, D) between per-sample Gaussians (B, C) and per-domain Gaussians (D, C), summed over C.

    "w2": squared Wasserstein-2 distance sum_c (mu_i - mu_d)^2 + v_i + v_d - 2 sqrt(v_i v_d)
    (the reference's default). "kl": symmetric KL divergence, KL(i||d) + KL(d||i) (paper
    eq. for domain assignment), with ``eps`` added to both variances so that a constant channel
    (variance 0) gives a finite distance.
    """
    mu_i, v_i = mean[:, None, :], var.clamp_min(0.0)[:, None, :]
    mu_d, v_d = domain_mean[None], domain_var.clamp_min(0.0)[None]
    if distance == "w2":
        dist = (mu_i - mu_d).pow(2) + v_i + v_d - 2.0 * torch.sqrt(v_i) * torch.sqrt(v_d)
    elif distance == "kl":
        v_i, v_d = v_i + eps, v_d + eps
        diff2 = (mu_i - mu_d).pow(2)
        # KL(N1||N2) = log(s2/s1) + (s1^2 + (m1-m2)^2) / (2 s2^2) - 1/2; the log terms cancel in the sum
        dist = (v_i + diff2) / (2.0 * v_d) + (v_d + diff2) / (2.0 * v_i) - 1.0
    else:
        raise ValueError(f"distance={distance!r} is not one of {list(DISTANCES)}")
    return dist.sum(dim=2)


class BalancedDomainNorm2d(nn.Module):
    """BDN layer, built from a source BatchNorm."""

    def __init__(
        self,
        bn: nn.modules.batchnorm._BatchNorm,
        num_classes: int,
        eta: float,
        gamma: float = 0.0,
        distance: Distance = "w2",
        clamp: bool = False,
        paths: DevicePaths | None = None,
    ):
        super().__init__()
        self.paths = paths if paths is not None else DevicePaths.from_environment()  # the building method's
        if distance not in DISTANCES:
            raise ValueError(f"distance={distance!r} is not one of {list(DISTANCES)}")
        self.bbn = BalancedBatchNorm2d(bn, num_classes, eta, gamma, self.paths)  # validates eta, gamma, num_classes
        self.num_features = bn.num_features
        self.num_classes = num_classes
        self.eta = eta
        self.distance: Distance = distance
        self.clamp = clamp
        self.eps = bn.eps  # the reference hard-codes 1e-5, the eps of every BN it uses
        source_mean, source_var = source_statistics(bn, "BDN")
        self.register_buffer("source_mean", source_mean)
        self.register_buffer("source_var", source_var)
        self.register_buffer("num_active", torch.tensor(INITIAL_DOMAINS, device=source_mean.device))  # D
        self._affine = AffineCache()
        self.capacity = 0
        self._allocate(INITIAL_CAPACITY)
        self.domain_limit: int | None = None  # set by a pruning method: D never exceeds it
        self._bound = INITIAL_DOMAINS  # host-side upper bound of D
        # per-forward instructions, set by the method
        self.predicts_domain = False
        self.label: Tensor | ClassGroups | None = None
        self.domain: Tensor | SlotGroups | None = None
        self.expand: bool | Tensor = False
        self.prune: bool | Tensor = False
        self.domain_pred: Tensor | None = None

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, num_classes={self.num_classes}, eta={self.eta}, distance={self.distance}, "
            f"clamp={self.clamp}, predicts_domain={self.predicts_domain}"
        )

    # ------------------------------------------------------------------ slots
    def _allocate(self, capacity: int) -> None:
        """(Re)allocate ``capacity`` slots, keeping the first ``self.capacity`` and filling the rest with the
        source statistics (count 0)."""
        K, old = self.num_classes, self.capacity
        new = capacity - old
        src_mean, src_var = self.source_mean, self.source_var
        fresh = {
            "slot_count": torch.zeros(new, dtype=torch.long, device=src_mean.device),
            "slot_mean": src_mean.repeat(new, 1),
            "slot_var": src_var.repeat(new, 1),
            "slot_local_mean": src_mean.repeat(new * K, 1),
            "slot_local_var": src_var.repeat(new * K, 1),
        }
        for name, tensor in fresh.items():
            self.register_buffer(name, tensor if old == 0 else torch.cat([getattr(self, name), tensor]))
        self.register_buffer("slot_ids", torch.arange(capacity, device=src_mean.device), persistent=False)
        self.capacity = capacity
        self._affine.clear()

    def needs_room(self) -> bool:
        """Whether one more slot might not fit (then ``reserve`` must read D from the device)."""
        return self._bound + 1 > self.capacity

    def reserve(self, num_domains: int | None = None) -> None:
        """Make room for one more domain slot. ``num_domains``: D if the caller has read it (a method reads
        it once for all its layers); otherwise it is read here (one host synchronisation)."""
        if num_domains is None:
            if not self.needs_room():
                return
            num_domains = int(self.num_active)
        d = self._bound = num_domains
        if d + 1 + SLOT_HEADROOM > self.capacity:
            capacity = max(2 * self.capacity, d + 1 + SLOT_HEADROOM)
            if self.domain_limit is not None:
                capacity = max(min(capacity, self.domain_limit + 1), d + 1)
            if capacity > self.capacity:
                self._allocate(capacity)

    def _grew(self, expand: bool | Tensor) -> None:
        """Account on the host for a possible expansion (D += 1 if ``expand``)."""
        if expand is False:
            return
        self._bound += 1
        if self.domain_limit is not None:
            self._bound = min(self._bound, self.domain_limit)

    @property
    def num_domains(self) -> int:
        """D: domain slots including the fresh last one (discovered domains = D - 1). Reads D from the device."""
        d = int(self.num_active)
        self._bound = d
        return d

    def _used(self, name: str, rows_per_slot: int = 1) -> Tensor:
        return getattr(self, name)[: self.num_domains * rows_per_slot]

    def _set_used(self, name: str, value: Tensor, rows_per_slot: int = 1) -> None:
        used = self.num_domains * rows_per_slot
        if value.shape[0] != used:
            raise ValueError(f"{name}: expected {used} rows (the domains in use), got {tuple(value.shape)}")
        full = getattr(self, name).clone()
        full[:used] = value.to(full)
        setattr(self, name, full)
        self._affine.clear()

    count = property(lambda self: self._used("slot_count"), lambda self, v: self._set_used("slot_count", v))
    domain_mean = property(lambda self: self._used("slot_mean"), lambda self, v: self._set_used("slot_mean", v))
    domain_var = property(lambda self: self._used("slot_var"), lambda self, v: self._set_used("slot_var", v))
    local_mean = property(
        lambda self: self._used("slot_local_mean", self.num_classes),
        lambda self, v: self._set_used("slot_local_mean", v, self.num_classes),
    )
    local_var = property(
        lambda self: self._used("slot_local_var", self.num_classes),
        lambda self, v: self._set_used("slot_local_var", v, self.num_classes),
    )

    def instruct(
        self,
        label: Tensor | ClassGroups | None,
        domain: Tensor | SlotGroups | None = None,
        expand: bool | Tensor = False,
        prune: bool | Tensor = False,
    ) -> None:
        """Set what the next forward does; the methods call this on every layer.

        ``label``: pseudo-labels (B,) or their ``ClassGroups``; ``domain``: domain slots (B,) or, with the
        labels, their ``SlotGroups`` (built for ``capacity`` slots); ``expand``/``prune``: Python or device
        booleans (a device boolean keeps the decision on the device).
        """
        self.label, self.domain, self.expand, self.prune = label, domain, expand, prune

    # ------------------------------------------------------------------ forward
    def forward(self, x: Tensor) -> Tensor:
        if self.domain is None:
            if self.label is None:
                return self.bbn(x)
            groups = self.bbn.groups(self.label, x)
            moments = None
            if self.predicts_domain:
                mean, var = instance_mean_var(x.detach(), self.paths)
                self.domain_pred = self.predict_domain(x, (mean, var))
                moments = (mean, torch.addcmul(var, mean, mean), 1)  # (mean, mean square) for the update
            if not self.bbn.training:
                return self.bbn.normalise_global(x)
            mean, var = self.bbn.update(x, groups, moments)
            if mean.requires_grad or var.requires_grad:
                return normalise(x, mean, var, self.eps, self.bbn.weight, self.bbn.bias)
            return self.bbn.normalise_global(x)
        if self.label is not None:
            if self.needs_room():
                self.reserve()
            groups = self.slot_groups(self.label, self.domain, x)
            self.slot_count = self.slot_count + groups.domain_counts
            self._expand(self.expand)
            self._update(x.detach() if x.requires_grad else x, groups)
            out = self.normalise_domains(x, groups.domain, groups)
        elif isinstance(self.domain, SlotGroups):
            out = self.normalise_domains(x, self.domain.domain, self.domain)
        else:
            out = self.normalise_domains(x, self.domain.to(device=x.device, dtype=torch.long))
        if self.prune is not False:
            self._prune(self.prune)
        return out

    def slot_groups(self, label: Tensor | ClassGroups, domain: Tensor | SlotGroups, x: Tensor) -> SlotGroups:
        """The batch's SlotGroups: the ones given (if built for this layer's slots), or built here."""
        B = x.shape[0]
        if isinstance(domain, SlotGroups) and domain.matches(self.capacity, self.num_classes, self.eta, self.clamp, B):
            return domain
        if isinstance(domain, SlotGroups):
            domain = domain.domain
        label = label.label if isinstance(label, ClassGroups) else label
        return SlotGroups(
            domain.to(device=x.device), label.to(device=x.device), self.capacity, self.num_classes, self.eta,
            self.clamp, x.dtype,
        )

    def normalise_domains(self, x: Tensor, domain: Tensor, groups: SlotGroups | None = None) -> Tensor:
        """Normalise every sample with its own domain slot's statistics and the BN affine parameters
        (``groups``: the batch's SlotGroups, whose cached flat indices gather the per-slot tables)."""
        weight, bias = self.bbn.weight, self.bbn.bias
        if not AffineCache.usable(weight, bias):
            return normalise(x, self.slot_mean[domain], self.slot_var[domain], self.eps, weight, bias)
        scale, shift = self._affine.get(self.slot_mean, self.slot_var, self.eps, weight, bias)  # (slots, C)
        if groups is None:
            return apply_affine(x, as_map(scale[domain], x), as_map(shift[domain], x))
        trailing = x.ndim - 2
        return apply_affine(x, groups.rows(scale, "domain", trailing), groups.rows(shift, "domain", trailing))

    # ------------------------------------------------------------------ domain prediction
    def predict_domain(self, x: Tensor, moments: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """Nearest domain slot of every sample by its instance statistics; ties -> lowest index."""
        mean, var = instance_mean_var(x.detach(), self.paths) if moments is None else moments
        dist = domain_distance(mean, var, self.slot_mean, self.slot_var, self.distance, self.eps)
        dist = dist.masked_fill(self.slot_ids >= self.num_active, float("inf"))  # unused slots never win
        # argmax of softmax(-dist) as the reference: distances that differ by less than float resolution
        # after the softmax tie, and a tie goes to the lowest index
        return torch.softmax(-dist, dim=1).argmax(dim=1)

    def wants_expansion(self, domain_pred: Tensor) -> Tensor:
        """Expand iff some sample of the batch picked the fresh (source-like) slot D-1 (a device boolean)."""
        fresh = (self.num_active - 1).view(1)
        return (domain_pred == fresh).any() | (self.slot_count.gather(0, fresh) > 0).squeeze(0)

    # ------------------------------------------------------------------ statistics
    def _update(self, x: Tensor, groups: SlotGroups) -> None:
        s1, s2 = groups.sums(*instance_moments(x, self.paths))  # m_g sum_{i in g} of mean_hw(x_i), of mean_hw(x_i^2)
        mean, var = self.slot_local_mean, self.slot_local_var
        self.slot_local_mean, self.slot_local_var, _, _ = ema_step(mean, var, s1, s2, groups.mn)
        self._refresh_domain_stats()

    def _refresh_domain_stats(self) -> None:
        cap, K, C = self.capacity, self.num_classes, self.num_features
        local_mean = self.slot_local_mean.view(cap, K, C)
        self.slot_mean, between = class_mean_var(local_mean, 1)
        self.slot_var = torch.add(between, self.slot_local_var.view(cap, K, C).sum(1), alpha=1.0 / K)

    def _expand(self, expand: bool | Tensor = True) -> None:
        """Turn the first unused slot (source statistics) into the new fresh domain if ``expand``."""
        if expand is False:
            return
        if self.needs_room():
            self.reserve()
        self.num_active = self.num_active + expand
        self._grew(expand)

    def _prune(self, prune: bool | Tensor = True) -> None:
        """If ``prune``: among the oldest floor(D/2) domains delete all with the minimum count; later slots
        move down (a stable reordering on the device) and the freed slots get the source statistics."""
        ids, K = self.slot_ids, self.num_classes
        d = self.num_active
        candidate = ids < torch.floor(d * PRUNE_COVER)
        smallest = torch.where(candidate, self.slot_count, torch.iinfo(torch.long).max).min()
        drop = candidate & (self.slot_count == smallest) & prune
        order = torch.argsort(drop.to(torch.uint8), stable=True)  # kept slots first, in their order
        self.num_active = d - drop.sum()
        used = ids < self.num_active
        rows = (order[:, None] * K + torch.arange(K, device=ids.device)).view(-1)
        used_rows = used.repeat_interleave(K)[:, None]
        self.slot_count = torch.where(used, self.slot_count[order], 0)
        self.slot_mean, self.slot_var = self.slot_mean[order], self.slot_var[order]
        self.slot_local_mean = torch.where(used_rows, self.slot_local_mean[rows], self.source_mean)
        self.slot_local_var = torch.where(used_rows, self.slot_local_var[rows], self.source_var)
