"""T3A: test-time classifier adjustment (Iwasawa & Matsuo, "Test-Time Classifier Adjustment Module for
Model-Agnostic Domain Generalization", NeurIPS 2021).

Back-propagation-free: the network never changes. Each class k keeps a support set S_k of feature vectors,
started with the classifier's own weight row w_k (labelled by the classifier's argmax on it; paper sec. 3.2,
"warm-up"). For a batch, every sample's penultimate feature z joins the support set of its predicted class
argmax f(z); each S_k is then filtered to the ``filter_k`` supports of lowest prediction entropy (paper eq. 6,
the entropy of the source classifier's softmax, which each support keeps from the batch it came in). The
prediction is the adjusted classifier's

    scores(z) = z^T c_k,   c_k = normalise(sum_{s in S_k} s / ||s||)          (paper eq. 5)

with the current batch already among the supports (as the authors' code and LINs-lab/ttab
``model_adaptation/t3a.py``, ttab below). Runs on every model kind: it reads features and the linear classifier
(``FeatureModel``) and touches no normalisation.

Hyper-parameters: ``filter_k`` (the paper's M): 100 on CIFAR-10 (ttab ``configs/algorithms.py`` ``top_M`` 100 on
every dataset; yuyongcan/Benchmark-TTA ``best_cfgs/Online_TTA/cifar10_c/t3a.yaml`` ``FILTER_K`` 100), 20 on
CIFAR-100 and ImageNet (Benchmark-TTA ``cifar100_c/t3a.yaml``, ``imagenet_c/t3a.yaml``). The paper selects M from
{1, 5, 20, 50, 100, all} on held-out domains.

Static shapes (no host synchronisation, docs/benchmarks.md "Device paths"): the supports live in a (K, M, d)
bank of unit vectors with a (K, M) entropy table, +inf for an empty slot. A batch's candidates for class k are
its M slots and the B batch samples (entropy +inf unless predicted k); ``topk`` keeps the M lowest, and one
gather moves the kept vectors. The same supports as the reference's growing list, so the same scores up to the
summation order of c_k (float rounding).

Deviations:
- DEVIATION(no-unfiltered): ``filter_k = -1`` (keep every support, the paper's "all") is not offered: its support
  set grows with the stream without bound; any M >= 1 is.
- DEVIATION(ties): among supports of exactly equal entropy at the M-th place, ``topk`` and the reference's
  ``torch.sort`` may keep different ones.
- DEVIATION(one-forward): the features and the logits come from one forward (``FeatureModel``: backbone, then
  head); ttab runs the network twice per batch (once for features, once for logits), with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.losses import softmax_entropy
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.search_dimensions import IntUniform

__all__ = ["T3A", "SupportBank"]

# The paper's largest M is 100 (its grid 1, 5, 20, 50, 100, all); 10,000 per class is 82 GB of float32 supports for
# ImageNet's 1,000 classes x 2,048 features: a larger value is a typo, refused before any cell.
MAX_FILTER_K = 10_000


class SupportBank(nn.Module):
    """Per-class supports of T3A: unit feature vectors (K, M, d) and their entropies (K, M), +inf when empty.

    Buffers of the model (so a method's ``predict`` restores them, and a device move takes them along)."""

    def __init__(self, num_classes: int, size: int, dim: int, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("vectors", torch.zeros(num_classes, size, dim, device=device, dtype=dtype))
        self.register_buffer("entropy", torch.full((num_classes, size), float("inf"), device=device, dtype=dtype))
        self.register_buffer("first_slot", torch.arange(num_classes, device=device).unsqueeze(1) * size)

    def add(self, features: Tensor, logits: Tensor) -> None:
        """Each feature joins the supports of its predicted class; each class keeps its M lowest-entropy ones."""
        k, m, d = self.vectors.shape
        entropy = softmax_entropy(logits.float()).to(self.entropy.dtype)
        member = logits.argmax(dim=1).unsqueeze(0) == torch.arange(k, device=logits.device).unsqueeze(1)  # (K, B)
        inf = torch.full((), float("inf"), dtype=self.entropy.dtype, device=self.entropy.device)
        candidates = torch.cat([self.entropy, torch.where(member, entropy.unsqueeze(0), inf)], dim=1)  # (K, M + B)
        kept_entropy, kept = candidates.topk(m, dim=1, largest=False)
        pool = torch.cat([self.vectors.reshape(k * m, d), F.normalize(features.to(self.vectors.dtype), dim=1)])
        index = torch.where(kept < m, self.first_slot + kept, k * m + kept - m)  # slot or batch row, in the pool
        self.vectors = pool[index]
        self.entropy = kept_entropy

    def prototypes(self) -> Tensor:
        """(K, d): per class the normalised sum of its supports (paper eq. 5)."""
        filled = torch.isfinite(self.entropy).to(self.vectors.dtype)
        return F.normalize(torch.einsum("kmd,km->kd", self.vectors, filled), dim=1)


@register_method("t3a")
class T3A(TTAMethod):
    """T3A (Iwasawa & Matsuo, NeurIPS'21): the linear classifier replaced by entropy-filtered feature supports."""

    version = 1
    norm_kinds = ("batch", "layer", "group")  # features and the classifier only: no normalisation touched

    @dataclass(frozen=True)
    class Config:
        filter_k: int = 100  # paper's M; ttab top_M 100; Benchmark-TTA cifar10_c/t3a.yaml FILTER_K 100

        def __post_init__(self) -> None:
            if not 1 <= self.filter_k <= MAX_FILTER_K:
                raise ValueError(
                    f"filter_k={self.filter_k!r} must be in [1, {MAX_FILTER_K}] (supports kept per class; the bank "
                    "holds classes x filter_k feature vectors; -1, keep all, is not offered)"
                )

    presets = {
        "cifar100": {"filter_k": 20},  # Benchmark-TTA best_cfgs/Online_TTA/cifar100_c/t3a.yaml FILTER_K
        "imagenet": {"filter_k": 20},  # Benchmark-TTA best_cfgs/Online_TTA/imagenet_c/t3a.yaml FILTER_K
    }

    space = {  # docs/methods.md "Search spaces"
        "filter_k": IntUniform(1, 200),  # the paper's grid {1, 5, 20, 50, 100} and twice the largest
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        self.model = FeatureModel(self.model, self.info.classifier)
        self.model.eval()
        head = self.model.head
        with torch.no_grad():
            weight = head.weight.detach()
            self.model.supports = SupportBank(weight.shape[0], self.cfg.filter_k, weight.shape[1], weight.device,
                                              weight.dtype)
            self.model.supports.add(weight, head(weight))  # the warm-up supports: the classifier's rows

    def predict_scores(self, x: Tensor) -> Tensor:
        """The adjusted classifier on ``x`` with the supports as they are (``x`` not added)."""
        features = self.model(x).flatten(1)
        return features @ self.model.supports.prototypes().to(features.dtype).T

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            features = self.model(x).flatten(1)
            self.model.supports.add(features, self.model.logits(features))
            return features @ self.model.supports.prototypes().to(features.dtype).T
