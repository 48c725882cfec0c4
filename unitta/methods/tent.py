"""TENT: test entropy minimisation (Wang, Shelhamer, Liu, Olshausen, Darrell; ICLR'21).

Every BatchNorm normalises with the current batch's statistics (running statistics dropped) and only
the normalisation layers' affine parameters (gamma, beta) adapt (on LayerNorm / GroupNorm models their
affine parameters, as the mariodoebler TTA benchmark's ``tent.configure_model``; ``norm/affine.py``), by one
optimisation step per batch on the mean prediction entropy H(softmax(z)) (paper sec. 3; docs/methods.md
"TENT"). The prediction returned is the one computed *before* the step (TENT's online protocol, as in the
original tent.py; with ``steps`` > 1, the output of the last forward, as the original). Everything else is
frozen and the model stays in eval mode.

Hyper-parameters (UT ``configs/adapter/*/tent.yaml`` = md = original; docs/methods.md "TENT"):
CIFAR-10/100: Adam lr 1e-3. ImageNet: SGD lr 2.5e-4, momentum 0.9, Nesterov. One step per batch.

Deviations:
- Batch of size 1: the reference (UT ``TTA.py``) skips such batches entirely. Here they are
  predicted (BN then normalises with the single sample's statistics over H x W, see
  ``norm/batch_stats.py``) but no step is taken, so the adaptation trajectory equals the
  reference's; ``min_update_batch`` sets the threshold.
- On BatchNorm models only the BatchNorm affine parameters adapt (as UT); LayerNorm/GroupNorm layers of a
  model adapt as well (as md), which changes nothing for the BatchNorm-only models of the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.losses import softmax_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive

__all__ = ["Tent"]


@register_method("tent")
class Tent(TTAMethod):
    """TENT (Wang et al., ICLR'21): entropy minimisation on norm affine parameters with batch statistics."""

    norm_kinds = ("batch", "layer", "group")  # md tent.configure_model: BN, LN and GN affine
    whole_step = True  # compile: true captures forward, loss, backward and update as one graph

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # UT configs/adapter/cifar10/tent.yaml OPTIM.METHOD
        lr: float = 1e-3  # UT configs/adapter/cifar10/tent.yaml OPTIM.LR
        steps: int = 1  # OPTIM.STEPS (UT, md, original)
        min_update_batch: int = 2  # DEVIATION: smaller batches are predicted without a step (UT skips them)

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {
        "imagenet": {"optimizer": "sgd", "lr": 2.5e-4},  # UT/md imagenet tent.yaml; TENT paper sec. 4
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (CIFAR, Adam), 2.5e-4 (ImageNet, SGD): tent.yaml
    }

    def setup(self) -> None:
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model), self.cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        """The mean prediction entropy of the batch (paper sec. 3)."""
        return softmax_entropy(logits).mean()
