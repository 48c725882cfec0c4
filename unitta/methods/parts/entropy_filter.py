"""ETA/EATA's sample selection and weighted entropy loss (Niu et al., ICML'22, sec. 4), shared by ``eta``, ``eata``
and ``rdumb``.

Per batch of logits z (B, K):

1. Reliability (paper eq. 3): keep sample i when H(softmax(z_i)) < E_0, with E_0 = ``e_factor`` * ln K
   (0.4 ln K: the paper's and the mariodoebler TTA benchmark's ``EATA.MARGIN_E0``).
2. Redundancy (eq. 4-5): once a moving average m of the kept samples' probability vectors exists, keep a
   reliable sample only when |cos(m, softmax(z_i))| < ``d_margin``. m is the mean probability of the first
   batch's reliable samples; afterwards m <- 0.9 m + 0.1 mean(softmax(z_kept)) over the samples kept by both
   filters (0.9: ``update_model_probs`` of the EATA code and of the mariodoebler benchmark). A batch that keeps
   nothing leaves m as it is (and no m exists until some batch had a reliable sample).
3. Loss (eq. 6): S(x) = exp(-(H - E_0)) (detached) weights the entropy of every kept sample; the loss is the
   mean of S(x) H(x) over the kept samples.

Implemented with boolean masks over the whole batch instead of the reference's index selection, so no
data-dependent shape and no host synchronisation arise here: the kept-sample mean is ``masked_mean`` (same
value up to summation order; 0 with zero gradient when nothing is kept) and m's "not yet set" state is a
boolean tensor. Whether any sample was kept is returned as a tensor; the caller decides what to do with it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.parts.losses import masked_mean, softmax_entropy

__all__ = ["PROBS_MOMENTUM", "entropy_margin", "SampleFilter", "weighted_entropy"]

PROBS_MOMENTUM = 0.9  # m <- 0.9 m + 0.1 mean(p): EATA code update_model_probs; mariodoebler benchmark eata.py


def entropy_margin(num_classes: int, factor: float) -> float:
    """E_0 = ``factor`` * ln K (EATA eq. 3 and SAR eq. 2 use factor 0.4)."""
    return factor * math.log(num_classes)


class SampleFilter:
    """ETA's two filters (module docstring) with the moving-average probability vector m as state.

    Call it on a batch's logits; it returns (kept mask, per-sample entropy with gradient) and updates m.
    ``reset()`` forgets m (the reference's ``current_model_probs = None``).
    """

    def __init__(self, num_classes: int, e_margin: float, d_margin: float, device: torch.device):
        self.e_margin = e_margin
        self.d_margin = d_margin
        self.probs = torch.zeros(num_classes, device=device)  # m
        self.has_probs = torch.zeros((), dtype=torch.bool, device=device)  # False: m does not exist yet
        self.reliable_total = torch.zeros((), dtype=torch.int64, device=device)  # reference num_samples_update_1
        self.kept_total = torch.zeros((), dtype=torch.int64, device=device)  # reference num_samples_update_2

    def reset(self) -> None:
        self.probs.zero_()
        self.has_probs.fill_(False)

    def __call__(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        kept, entropy, reliable, probs = self.select(logits)
        self.record(kept, reliable, probs)
        return kept, entropy

    def select(self, logits: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(kept, entropy, reliable, probabilities) of a batch without changing the state (a pure function of the
        logits and m: what a compiled whole step differentiates, ``parts/whole_step.py``)."""
        entropy = softmax_entropy(logits)
        reliable = entropy.detach() < self.e_margin
        probs = logits.detach().float().softmax(dim=1)
        similarity = F.cosine_similarity(self.probs.unsqueeze(0), probs, dim=1)
        kept = reliable & (~self.has_probs | (similarity.abs() < self.d_margin))
        return kept, entropy, reliable, probs

    @torch.no_grad()
    def record(self, kept: Tensor, reliable: Tensor, probs: Tensor) -> None:
        """Update m and the counters with what ``select`` returned."""
        self._update_probs(probs, kept)
        self.reliable_total += reliable.sum()
        self.kept_total += kept.sum()

    @torch.no_grad()
    def _update_probs(self, probs: Tensor, kept: Tensor) -> None:
        count = kept.sum()
        mean = (probs * kept.unsqueeze(1)).sum(dim=0) / count.clamp_min(1)
        moved = torch.where(self.has_probs, PROBS_MOMENTUM * self.probs + (1.0 - PROBS_MOMENTUM) * mean, mean)
        self.probs.copy_(torch.where(count > 0, moved, self.probs))
        self.has_probs |= count > 0


def weighted_entropy(entropy: Tensor, kept: Tensor, e_margin: float) -> Tensor:
    """EATA eq. 6: mean over the kept samples of exp(-(H - E_0)) * H, the weight detached; 0 if none is kept."""
    weight = 1.0 / torch.exp(entropy.detach() - e_margin)
    return masked_mean(entropy * weight, kept)
