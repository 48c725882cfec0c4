"""Balanced Domain Normalization (BDN), the normalisation layer of the UniTTA framework (spec 2).

One BDN layer replaces one BatchNorm. It keeps, for D domain slots and K classes:
  * domain-class statistics ``local_mean/local_var`` (D*K, C), row g = d*K + k (spec 2.1);
  * domain statistics derived from them after every update (spec 2.4):
      domain_mean[d] = mean_k local_mean[d,k],
      domain_var[d]  = mean_k local_var[d,k] + var_k(local_mean[d,k])   (unbiased across classes);
  * ``count`` (D,): samples assigned to each domain so far;
  * an embedded Balanced BN ``bbn`` (spec 2.3) with class-balanced global statistics, used by the
    first two of UniTTA's three forwards, and whose affine parameters are the only ones applied.
Slot D-1 is always a *fresh* domain equal to the source statistics; slots 0..D-2 are discovered
domains. Initially D = 2 (two source copies), as in the reference's dynamic mode.

The method drives the layer through attributes set before each forward (spec 2.2):
  * ``label`` None, ``domain`` None: normalise with the BBN global statistics (forward 1; no update
    in eval mode).
  * ``label`` given, ``domain`` None (forward 2): the BBN updates with the pseudo-labels and
    normalises; at the prediction layer (``predicts_domain``) the layer also predicts every sample's
    domain from its instance statistics (spec 2.5) into ``domain_pred``.
  * ``label`` and ``domain`` given (forward 3): count the domains, append a fresh domain if
    ``expand`` (spec 2.6), EMA-update the domain-class statistics of the batch's (domain, class)
    groups (spec 2.4), normalise every sample with its own domain's statistics, then prune if
    ``prune`` (spec 2.7).
Everything is vectorised over the batch: groups are handled with ``index_add`` on g = d*K + k.

Reference quirks kept as defaults (documented in docs/unitta.md):
  * the EMA update is *not* clamped (spec 2.4; ``clamp=True`` gives TRIBE's 1/n clamp instead);
  * the distance is the squared Wasserstein-2 distance (``distance="kl"``: the paper's symmetric KL);
  * ties in the distance go to the lowest index (the first batch all goes to domain 0).
Guards that only act where the reference would produce NaN: negative variances are clamped to 0 inside
the distance and the normalisation, and the KL distance adds the BN eps to both variances.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from unitta.methods.norm.balanced_bn import BalancedBatchNorm2d
from unitta.methods.norm.stats import across_class_var, instance_mean_var, instance_second_moment, normalise

Distance = Literal["w2", "kl"]
DISTANCES = ("w2", "kl")
INITIAL_DOMAINS = 2  # the reference's dynamic mode starts with one discovered and one fresh slot (spec 2.1)
PRUNE_COVER = 0.5  # prune among the oldest half of the domains (spec 2.7)


def domain_distance(
    mean: Tensor, var: Tensor, domain_mean: Tensor, domain_var: Tensor, distance: Distance, eps: float = 1e-5
) -> Tensor:
    """Distance (B, D) between per-sample Gaussians (B, C) and per-domain Gaussians (D, C), summed over C.

    "w2": squared Wasserstein-2 distance sum_c (mu_i - mu_d)^2 + v_i + v_d - 2 sqrt(v_i v_d)
    (the reference's default, spec 2.5). "kl": symmetric KL divergence, KL(i||d) + KL(d||i) (paper
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
    """BDN layer (spec 2.1-2.7), built from a source BatchNorm."""

    def __init__(
        self,
        bn: nn.modules.batchnorm._BatchNorm,
        num_classes: int,
        eta: float,
        gamma: float = 0.0,
        distance: Distance = "w2",
        clamp: bool = False,
    ):
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"distance={distance!r} is not one of {list(DISTANCES)}")
        self.bbn = BalancedBatchNorm2d(bn, num_classes, eta, gamma)  # validates eta, gamma, num_classes
        self.num_features = bn.num_features
        self.num_classes = num_classes
        self.eta = eta
        self.distance: Distance = distance
        self.clamp = clamp
        self.eps = bn.eps  # the reference hard-codes 1e-5, the eps of every BN it uses
        source_mean = bn.running_mean.detach().clone()
        source_var = bn.running_var.detach().clone()
        self.register_buffer("source_mean", source_mean)
        self.register_buffer("source_var", source_var)
        D, K = INITIAL_DOMAINS, num_classes
        self.register_buffer("domain_mean", source_mean.repeat(D, 1))
        self.register_buffer("domain_var", source_var.repeat(D, 1))
        self.register_buffer("local_mean", source_mean.repeat(D * K, 1))
        self.register_buffer("local_var", source_var.repeat(D * K, 1))
        self.register_buffer("count", torch.zeros(D, dtype=torch.long, device=source_mean.device))
        # per-forward instructions, set by the method (spec 2.2 / 2.6)
        self.predicts_domain = False
        self.label: Tensor | None = None
        self.domain: Tensor | None = None
        self.expand = False
        self.prune = False
        self.domain_pred: Tensor | None = None

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, num_classes={self.num_classes}, eta={self.eta}, distance={self.distance}, "
            f"clamp={self.clamp}, predicts_domain={self.predicts_domain}"
        )

    @property
    def num_domains(self) -> int:
        """D: domain slots including the fresh last one (discovered domains = D - 1)."""
        return int(self.domain_mean.shape[0])

    def instruct(
        self, label: Tensor | None, domain: Tensor | None = None, expand: bool = False, prune: bool = False
    ) -> None:
        """Set what the next forward does (spec 2.2); the adapters of spec 3.2/3.3 call this on every layer."""
        self.label, self.domain, self.expand, self.prune = label, domain, expand, prune

    # ------------------------------------------------------------------ forward
    def forward(self, x: Tensor) -> Tensor:
        if self.domain is None:
            if self.label is not None:
                self.bbn.label = self.label
                if self.predicts_domain:
                    self.domain_pred = self.predict_domain(x.detach())
            return self.bbn(x)
        domain = self.domain.to(device=x.device, dtype=torch.long)
        if self.label is not None:
            self.count = self.count + torch.bincount(domain, minlength=self.num_domains)
            if self.expand:
                self._expand()
            self._update(x.detach(), self.label.to(device=x.device, dtype=torch.long), domain)
        out = normalise(x, self.domain_mean[domain], self.domain_var[domain], self.eps, self.bbn.weight, self.bbn.bias)
        if self.prune:
            self._prune()
        return out

    # ------------------------------------------------------------------ domain prediction (spec 2.5, 2.6)
    def predict_domain(self, x: Tensor) -> Tensor:
        """Nearest domain slot of every sample by its instance statistics; ties -> lowest index."""
        mean, var = instance_mean_var(x)
        dist = domain_distance(mean, var, self.domain_mean, self.domain_var, self.distance, self.eps)
        # argmax of softmax(-dist) as the reference: distances that differ by less than float resolution
        # after the softmax tie, and a tie goes to the lowest index
        return torch.softmax(-dist, dim=1).argmax(dim=1)

    def wants_expansion(self, domain_pred: Tensor) -> bool:
        """Spec 2.6: expand iff some sample of the batch picked the fresh (source-like) slot D-1."""
        counts = self.count + torch.bincount(domain_pred, minlength=self.num_domains)
        return bool(counts[-1] > 0)

    # ------------------------------------------------------------------ statistics (spec 2.4)
    def _update(self, x: Tensor, label: Tensor, domain: Tensor) -> None:
        K = self.num_classes
        g = domain * K + label  # (B,) group id of every sample
        n_groups = self.local_mean.shape[0]
        old_mean, old_var = self.local_mean, self.local_var
        d_mean, d_sq = instance_second_moment(x, old_mean[g])  # mean_hw(x - mu_g), mean_hw((x - mu_g)^2)
        sum_mean = d_mean.new_zeros(n_groups, d_mean.shape[1]).index_add_(0, g, d_mean)
        sum_var = d_sq.new_zeros(n_groups, d_sq.shape[1]).index_add_(0, g, d_sq - old_var[g])
        if self.clamp:
            # TRIBE's clamp (spec 2.3): a group of n > 1/eta samples moves to its batch statistics
            n = torch.bincount(g, minlength=n_groups).to(x.dtype)
            m = torch.where(n > 1.0 / self.eta, 1.0 / n.clamp_min(1.0), torch.full_like(n, self.eta))[:, None]
        else:
            m = self.eta  # the reference: eta * n_g may exceed 1 (overshoot, spec 2.4)
        delta = sum_mean * m
        self.local_mean = old_mean + delta
        self.local_var = old_var - delta.pow(2) + sum_var * m
        self._refresh_domain_stats()

    def _refresh_domain_stats(self) -> None:
        D, K, C = self.num_domains, self.num_classes, self.num_features
        local_mean = self.local_mean.view(D, K, C)
        self.domain_mean = local_mean.mean(dim=1)
        self.domain_var = self.local_var.view(D, K, C).mean(dim=1) + across_class_var(local_mean, 1)

    def _expand(self) -> None:
        """Append a fresh domain slot equal to the source statistics (spec 2.6)."""
        K = self.num_classes
        self.count = torch.cat([self.count, self.count.new_zeros(1)])
        self.local_mean = torch.cat([self.local_mean, self.source_mean.repeat(K, 1)])
        self.local_var = torch.cat([self.local_var, self.source_var.repeat(K, 1)])
        self.domain_mean = torch.cat([self.domain_mean, self.source_mean[None]])
        self.domain_var = torch.cat([self.domain_var, self.source_var[None]])

    def _prune(self) -> None:
        """Spec 2.7: among the oldest floor(D/2) domains delete all with the minimum count."""
        D = self.num_domains
        oldest = int(D * PRUNE_COVER)
        if oldest == 0:
            return
        candidates = self.count[:oldest]
        drop = torch.zeros(D, dtype=torch.bool, device=self.count.device)
        drop[:oldest] = candidates == candidates.min()
        keep = ~drop
        rows = keep.repeat_interleave(self.num_classes)
        self.count = self.count[keep]
        self.domain_mean, self.domain_var = self.domain_mean[keep], self.domain_var[keep]
        self.local_mean, self.local_var = self.local_mean[rows], self.local_var[rows]
