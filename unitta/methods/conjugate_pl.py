"""Conjugate PL: test-time adaptation with conjugate pseudo-labels (Goyal, Sun, Raghunathan, Kolter; NeurIPS'22).

For a model trained with a loss L(h, y) = f(h) - y^T h, the conjugate pseudo-label is y* = grad f(h) and the
test-time loss is the conjugate loss L(h, y*) = f(h) - grad f(h)^T h (paper eq. 7-9), not detached. For the
cross-entropy (f = logsumexp) with temperature T, h = z / T and y* = softmax(h), which gives

    L = logsumexp(h) - sum_c y*_c h_c            (= H(softmax(z / T)), the entropy at temperature T)

and for a PolyLoss-trained model (eps > 0; paper sec. 4.1) y* solves (I + eps diag(p) - eps p p^T) y* = p,
p = softmax(h), and L = logsumexp(h) - sum_c (y*_c h_c - eps y*_c (1 - p_c)). One SGD step per batch on the mean of
L over the batch (docs/methods.md "Conjugate PL"); the affine parameters of every BatchNorm (test-batch
statistics), LayerNorm and GroupNorm adapt, except those of modules whose name contains ``layer4`` (LINs-lab/ttab
``model_adaptation/conjugate_pl.py``, ttab below; the ImageNet ResNet-50's last stage). The logits returned are
the step's own forward, before the step (ttab returns that forward's logits / T: the same argmax).

Hyper-parameters (the same on every dataset family): SGD lr 1e-3 (momentum 0.9, Nesterov), T = 1, eps = 0, one
step per batch: ttab ``configs/algorithms.py`` ``conjugate_pl`` (optimizer SGD, ``temperature_scaling`` 1.0,
``model_eps`` 0.0 for cross-entropy-trained models), ``parameters.py`` ``--lr`` 1e-3 and ``--n_train_steps`` 1;
the authors' locuslab/tta_conjugate ``cfgs/cifar.yaml`` and ``cfgs/imagenetc.yaml`` (SGD, LR 1e-3, TEMP 1.0).

Deviations:
- DEVIATION(eval-mode): the model stays in eval mode with BatchNorm on test-batch statistics
  (``norm/batch_stats.py``); ttab puts the whole model in train mode, which differs only for dropout (none in the
  zoo's CNNs) and for the running statistics ttab keeps updating but never reads.
- DEVIATION(solve): y* for eps > 0 comes from ``torch.linalg.solve`` (ttab: the removed ``torch.solve``); for
  eps = 0 the system is the identity and y* = p exactly, so no solve runs.
- DEVIATION(batchnorm1d): BatchNorm1d layers adapt too (ttab: BatchNorm2d only; the zoo's models have none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive
from unitta.search_dimensions import LogUniform

__all__ = ["ConjugatePL", "conjugate_loss"]

# ttab conjugate_pl._initialize_trainable_parameters: modules whose name contains this stay frozen
FROZEN_MARKER = "layer4"


@register_method("conjugate_pl")
class ConjugatePL(TTAMethod):
    """Conjugate PL (Goyal et al., NeurIPS'22): the conjugate loss of the training loss on norm affine parameters."""

    version = 1
    whole_step = True  # compile: true captures forward, loss, backward and update as one graph
    norm_kinds = ("batch", "layer", "group")  # ttab: BatchNorm2d, LayerNorm and GroupNorm affine parameters

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "sgd"  # ttab configs/algorithms.py; tta_conjugate cfgs/cifar.yaml
        lr: float = 1e-3  # ttab parameters.py --lr; tta_conjugate cfgs/{cifar,imagenetc}.yaml OPTIM.LR
        temperature: float = 1.0  # ttab temperature_scaling; tta_conjugate OPTIM.TEMP
        poly_eps: float = 0.0  # ttab model_eps: 0 for cross-entropy-trained models (PolyLoss eps otherwise)
        steps: int = 1  # ttab --n_train_steps; tta_conjugate OPTIM.STEPS
        min_update_batch: int = 1  # ttab adapts on every batch

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_interval("temperature", self.temperature, 0.0, 100.0, open_low=True)
            check_interval("poly_eps", self.poly_eps, 0.0, 100.0)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {}  # ttab and tta_conjugate use the same values on CIFAR-10/100 and ImageNet

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (SGD; ttab's online grid 5e-4 to 5e-3): a decade either side
        "temperature": LogUniform(0.5, 5.0),  # published 1 (ttab, tta_conjugate); the paper tunes T > 1 too
    }

    def setup(self) -> None:
        frozen = tuple(name for name, _ in self.model.named_modules() if FROZEN_MARKER in name)
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model, exclude=frozen), self.cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        """The mean conjugate loss of the batch (module docstring)."""
        return conjugate_loss(logits, self.cfg.temperature, self.cfg.poly_eps).mean()


def conjugate_loss(logits: Tensor, temperature: float = 1.0, poly_eps: float = 0.0) -> Tensor:
    """Per-sample conjugate pseudo-label loss of (B, K) logits (module docstring; paper eq. 9), (B,).

    poly_eps = 0 (cross-entropy): logsumexp(h) - softmax(h)^T h with h = logits / temperature, gradients through
    both terms (the pseudo-label is not detached, as in the authors' code and ttab)."""
    h = logits / temperature
    p = h.softmax(dim=1)
    if poly_eps == 0.0:
        y_star = p
        return torch.logsumexp(h, dim=1) - (y_star * h).sum(dim=1)
    k = h.shape[1]
    eye = torch.eye(k, dtype=h.dtype, device=h.device).expand(h.shape[0], k, k)
    matrix = eye + poly_eps * torch.diag_embed(p) - poly_eps * p.unsqueeze(2) * p.unsqueeze(1)
    y_star = torch.linalg.solve(matrix, p.unsqueeze(2)).squeeze(2)
    return torch.logsumexp(h, dim=1) - (y_star * h - poly_eps * y_star * (1.0 - p)).sum(dim=1)

