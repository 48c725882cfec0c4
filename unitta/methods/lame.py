"""LAME: Laplacian-regularised maximum-likelihood estimation of the batch's output probabilities.

Paper:     Boudiaf et al., "Parameter-free Online Test-time Adaptation", CVPR 2022
           (docs/methods.md "LAME").
Upstream:  fiveai/LAME; UniTTA's ``lame`` adapter (kNN affinity), mariodoebler's ``lame`` (rbf).
Algorithm: the frozen source model gives probabilities p and L2-normalised penultimate features;
           a B x B affinity W couples neighbouring samples and the bound-optimisation fixed point
           Y <- softmax(log p + W Y) (at most 100 steps, stop on a 1e-8 relative energy change)
           gives the returned probabilities. The network never changes.
Batch size: LAME is transductive within a batch. With B = 1 there is no neighbour: the kNN and
           linear affinities have no off-diagonal term and the output is the source distribution;
           for the rbf affinity (whose bandwidth, the mean k-th neighbour distance, is 0 at B = 1,
           NaN in the reference) a batch of one sample returns the source distribution as well.
           For 1 < B <= k the kNN affinity links every sample to all B - 1 others.
Deviations from the reference:
- kNN excludes each sample itself explicitly (reference: drops the first of the k + 1 nearest,
  which is another sample when two features coincide);
- the rbf bandwidth is floored at 1e-12 (all features identical would give 0/0 in the reference);
- B = 1 with rbf returns the source distribution instead of NaN.
- GPU efficiency, the same values: the stopping test needs the energy on the host; the reference reads it after
  every step (up to 100 host synchronisations per batch). Here all steps run on the device, Y frozen from the
  step the test first holds on, and the test is read once at the end (``fixed_point``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least
from unitta.search_dimensions import Choice, IntUniform

# fiveai/LAME: u = -log(p + 1e-10), at most 100 steps, stop at relative energy change 1e-8.
_LOG_EPS = 1e-10
_ENERGY_TOL = 1e-8


@register_method("lame")
class LAME(TTAMethod):
    """LAME (Boudiaf et al., CVPR'22): refine the batch's probabilities with a feature affinity."""

    norm_kinds = ("batch", "layer", "group")  # outputs only: the network is not touched (md runs it on ViT/Swin too)

    @dataclass(frozen=True)
    class Config:
        affinity: Literal["knn", "rbf", "linear"] = "knn"  # UT configs/adapter/*/lame.yaml (md: rbf)
        knn: int = 5  # UT and md, all datasets
        max_steps: int = 100  # fiveai/LAME laplacian_optimization
        force_symmetry: bool = False  # UT and md: W is not symmetrised

        def __post_init__(self) -> None:
            check_at_least("knn", self.knn, 1)
            check_at_least("max_steps", self.max_steps, 1)

    presets = {}  # UT uses the same values on every dataset

    space = {  # docs/methods.md "Search spaces"
        "affinity": Choice(("knn", "rbf", "linear")),  # LAME's three affinities (UT uses knn, md rbf)
        "knn": IntUniform(1, 10),  # published 5 (UT and md): from 1 to twice that
    }

    scores = "probabilities"

    def predict_scores(self, x: Tensor) -> Tensor:
        """LAME keeps no state between batches (the network never changes): its prediction is its forward."""
        return self.forward(x)

    def setup(self) -> None:
        self.model.requires_grad_(False)
        self.model = FeatureModel(self.model, self.info.classifier)
        self.model.eval()

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            features = self.model(x)
            probs = self.model.logits(features).softmax(dim=1)
            if x.shape[0] == 1:
                return probs
            kernel = affinity_matrix(F.normalize(features.flatten(1), dim=1), self.cfg.affinity, self.cfg.knn)
            if self.cfg.force_symmetry:
                kernel = 0.5 * (kernel + kernel.T)
            # every step on the device, frozen once converged, then one host read (``fixed_point``): on real
            # streams the steps needed range from under 10 to near max_steps from one batch to the next
            return laplacian_optimization(-torch.log(probs + _LOG_EPS), kernel, self.cfg.max_steps, self.cfg.max_steps)


def affinity_matrix(features: Tensor, kind: str, knn: int) -> Tensor:
    """B x B affinity of (B, d) features (LAME paper sec. 3): 'knn' (binary, self excluded), 'rbf' or 'linear'."""
    n = features.shape[0]
    if kind == "linear":
        return features @ features.T
    dist = torch.cdist(features, features)  # (B, B), Euclidean
    if kind == "knn":
        k = min(knn, n - 1)
        kernel = torch.zeros_like(dist)
        if k > 0:
            masked = dist + torch.diag(torch.full((n,), float("inf"), dtype=dist.dtype, device=dist.device))
            neighbours = masked.topk(k, dim=1, largest=False).indices
            kernel.scatter_(1, neighbours, 1.0)
        return kernel
    if kind == "rbf":
        # sigma = mean distance to the k-th nearest point, the point itself counted (fiveai/LAME)
        k = min(knn, n)
        kth = dist.topk(k, dim=1, largest=False).values[:, -1]
        sigma = kth.mean().clamp_min(1e-12)
        return torch.exp(-dist.pow(2) / (2.0 * sigma**2))
    raise ValueError(f"affinity={kind!r}: expected one of ['knn', 'rbf', 'linear']")


def laplacian_optimization(unary: Tensor, kernel: Tensor, max_steps: int, device_steps: int = 0) -> Tensor:
    """Minimise E(Y) = sum[u * Y - (W Y) * Y + Y log Y] over row-stochastic Y by the fixed point
    Y <- softmax(-u + W Y) (the LAME paper's concave-convex bound optimisation), starting at
    softmax(-u). Returns Y (B, K). ``device_steps``: see ``fixed_point``."""
    return fixed_point(unary, kernel, max_steps, device_steps)[0]


def fixed_point(unary: Tensor, kernel: Tensor, max_steps: int, device_steps: int = 0) -> tuple[Tensor, int]:
    """``laplacian_optimization``'s Y and the number of steps it ran (the step whose relative energy change is at
    most 1e-8, or ``max_steps``).

    Stopping there needs the energy on the host. The first ``device_steps`` steps run without reading it: a step
    after convergence leaves Y and the energy as they are (``torch.where`` on a device flag), and one read after
    them tells whether and where it converged; only if not, the steps go on reading the energy after each. The
    same Y either way; one host synchronisation per call when convergence comes within ``device_steps``."""
    y = (-unary).softmax(dim=1)
    first = min(device_steps, max_steps)
    old_energy = float("inf")
    if first > 0:
        done = torch.zeros((), dtype=torch.bool, device=y.device)
        ran = torch.zeros((), dtype=torch.float64, device=y.device)
        old = torch.full((), float("inf"), dtype=torch.float64, device=y.device)
        for step in range(first):
            pairwise = kernel @ y
            y_new = (-unary + pairwise).softmax(dim=1)
            energy = _energy(unary, y_new, pairwise).double()
            active = ~done
            y = torch.where(active, y_new, y)
            ran = ran + active.double()
            if step > 1:
                converged = (energy - old).abs() <= _ENERGY_TOL * old.abs()
                done = done | converged
                old = torch.where(active & ~converged, energy, old)
            else:
                old = energy
        finished, steps, old_energy = torch.stack([done.double(), ran, old]).tolist()  # the one read
        if finished or first == max_steps:
            return y, int(steps)
    for step in range(first, max_steps):
        pairwise = kernel @ y
        y = (-unary + pairwise).softmax(dim=1)
        energy = float(_energy(unary, y, pairwise))
        if step > 1 and abs(energy - old_energy) <= _ENERGY_TOL * abs(old_energy):
            return y, step + 1
        old_energy = energy
    return y, max_steps


def _energy(unary: Tensor, y: Tensor, pairwise: Tensor) -> Tensor:
    return (unary * y - pairwise * y + y * torch.log(y.clamp_min(1e-20))).sum()
