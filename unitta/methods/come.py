"""COME: conservatively minimising entropy (Zhang, Bian, Kong, Zhao, Zhang; ICLR'25).

"COME: Test-time Adaption by Conservatively Minimizing Entropy": a drop-in replacement of TENT's loss. The logits
z of a sample are read as the evidence of a Dirichlet opinion over K classes (subjective logic, paper sec. 3):
evidence e_k = exp(z_k), strength S = sum_k e_k + K, belief b_k = e_k / S and uncertainty mass u = K / S, which
sum to 1. COME minimises the entropy of that opinion (b_1, ..., b_K, u) instead of the softmax entropy, so a
sample of little total evidence keeps a large uncertainty mass rather than being pushed to a confident
prediction (the paper's "conservative" lower bound on the entropy). Before that, z is rescaled to its own norm
with the norm's gradient stopped, z / ||z|| * sg(||z||): the same value, but the update cannot grow the logits'
norm (the authors' ``dirichlet_entropy``, BlueWhaleLab/COME ``tent_come.py``). Everything else is TENT
(``unitta/methods/tent.py``): BatchNorms with test-batch statistics, the affine parameters of every
BatchNorm/LayerNorm/GroupNorm adapt, one step per batch on the mean loss, the prediction made before the step
(docs/methods.md "COME").

    z~ = z / ||z||_2 * sg(||z||_2)
    p  = (exp(z~_1), ..., exp(z~_K), K) / (sum_k exp(z~_k) + K) + 1e-7
    L  = mean_i -sum_j p_ij log p_ij                           (authors' ``dirichlet_entropy``)

Hyper-parameters: the authors' repository (BlueWhaleLab/COME ``main.py``) runs ImageNet-C only: ResNet-50 (BN)
with SGD lr 2.5e-4, momentum 0.9, at batch 64. COME is TENT with another loss (its README), so CIFAR-10/100 use
TENT's values (Adam 1e-3; UT/md ``tent.yaml``).

Deviations (DEVIATION tags below):
- From the authors' code: the opinion is computed as a softmax over (z~_1, ..., z~_K, log K), which is the same
  value up to float rounding and stays finite where ``exp(z)`` overflows float32 (logits above about 88), where
  the authors' loss is NaN; all-zero logits stay zero in the rescale (the authors' 0 / 0). The constant K is the
  model's number of classes: the README's ``K``; the authors' ``tent_come.py`` hard-codes ImageNet's 1000.
- SGD is unitta's Nesterov SGD (``parts/optim.py``, md's and UT's default); the authors' SGD has plain momentum.
- A batch of one is predicted without a step (``min_update_batch``, as unitta's TENT); the authors adapt on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive

__all__ = ["COME", "opinion", "opinion_entropy"]

OPINION_EPS = 1e-7  # BlueWhaleLab/COME tent_come.py dirichlet_entropy: added to every mass before the log


def opinion(logits: Tensor) -> Tensor:
    """The Dirichlet opinion (b_1, ..., b_K, u) of (B, K) logits as evidence exp(z): (B, K + 1), rows sum to 1.

    b_k = e_k / (sum e + K), u = K / (sum e + K), after the norm-preserving rescale z / ||z|| * sg(||z||).
    """
    norm = logits.norm(p=2, dim=-1, keepdim=True)
    # a guard only: all-zero logits stay zero (the authors' 0 / 0 is NaN)
    z = torch.where(norm > 0, logits / norm.clamp_min(torch.finfo(norm.dtype).tiny) * norm.detach(), logits)
    # DEVIATION(BlueWhaleLab/COME tent_come.py): a softmax with log K as the uncertainty's logit, the authors'
    # exp(z) / (sum exp(z) + K) without overflow
    log_k = torch.full_like(z[:, :1], math.log(logits.shape[1]))
    return torch.cat([z, log_k], dim=1).softmax(dim=1)


def opinion_entropy(logits: Tensor) -> Tensor:
    """COME's loss per sample (B,): the entropy of ``opinion(logits)`` + 1e-7 (authors' ``dirichlet_entropy``)."""
    p = opinion(logits) + OPINION_EPS
    return -(p * p.log()).sum(dim=1)


@register_method("come")
class COME(TTAMethod):
    """COME (Zhang et al., ICLR'25): TENT with the entropy of a Dirichlet opinion in place of the softmax's."""

    version = 1
    norm_kinds = ("batch", "layer", "group")  # authors' configure_model/collect_params: BN, GN and LN affine
    whole_step = True  # compile: true captures forward, loss, backward and update as one graph

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # TENT's CIFAR optimiser (UT/md tent.yaml; module docstring)
        lr: float = 1e-3  # TENT's CIFAR OPTIM.LR (UT/md tent.yaml)
        steps: int = 1  # authors' main.py --steps default 1
        min_update_batch: int = 2  # DEVIATION(BlueWhaleLab/COME): a batch of one is predicted without a step

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {
        # BlueWhaleLab/COME main.py, resnet50_bn_torch at batch 64: SGD(lr 0.00025, momentum 0.9)
        "imagenet": {"optimizer": "sgd", "lr": 2.5e-4},
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 2.5e-4 (ImageNet, SGD: authors' main.py); CIFAR 1e-3 (TENT's Adam)
    }

    def setup(self) -> None:
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model), self.cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        """The mean opinion entropy of the batch (module docstring)."""
        return opinion_entropy(logits).mean()
