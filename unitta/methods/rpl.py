"""RPL: robust pseudo-labelling (Rusak et al., TMLR 2022).

"If your data distribution shifts, use self-learning": every normalisation layer's affine parameters adapt
(BatchNorm with the current batch's statistics, as TENT; LayerNorm/GroupNorm affine only) by one optimisation
step per batch on the generalised cross-entropy (Zhang & Sabuncu, NeurIPS'18) to the model's own hard
pseudo-labels,

    L = mean_i (1 - p_i[y_i]^q) / q,   y_i = argmax_c z_i,c,   q = 0.8,

which down-weights low-confidence (likely wrong) pseudo-labels compared with the cross-entropy. The prediction
returned is the one computed *before* the step. This follows the mariodoebler TTA benchmark
(mariodoebler/test-time-adaptation @ 8b2ed63, ``classification/methods/rpl.py``; docs/methods.md "RPL").

Hyper-parameters (reference ``cfgs/{cifar10_c,cifar100_c,imagenet_c}/rpl.yaml``, ``conf.py`` ``RPL.Q``):
CIFAR-10/100: Adam lr 1e-3; ImageNet: SGD lr 5e-4 (momentum 0.9, Nesterov); q = 0.8; one step per batch.

Deviations:
- From the reference: none in the computation. A batch of one is adapted on, as the reference does with its
  default ``TEST.WINDOW_LENGTH`` 1 (BatchNorm then normalises with the single image's statistics over H x W);
  ``min_update_batch`` can raise that threshold.
- From the paper: the paper compares further self-learning variants (soft labels, entropy minimisation, other
  adapted parameters) and tunes hyper-parameters per model on hold-out corruptions; the reference's
  configuration above (hard labels, GCE, affine parameters) is what runs here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.losses import generalized_cross_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive
from unitta.search_dimensions import Uniform

__all__ = ["RPL"]


@register_method("rpl")
class RPL(TTAMethod):
    """RPL (Rusak et al., TMLR'22): generalised cross-entropy on hard pseudo-labels, norm affine parameters."""

    version = 1
    whole_step = True  # compile: true captures forward, loss, backward and update as one graph
    norm_kinds = ("batch", "layer", "group")

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # md cfgs/cifar10_c/rpl.yaml OPTIM.METHOD
        lr: float = 1e-3  # md cfgs/cifar10_c/rpl.yaml OPTIM.LR
        q: float = 0.8  # md conf.py RPL.Q (the RPL paper's q)
        steps: int = 1  # md OPTIM.STEPS
        min_update_batch: int = 1  # md adapts on every batch, a batch of one included

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_interval("q", self.q, 0.0, 1.0, open_low=True)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {
        "imagenet": {"optimizer": "sgd", "lr": 5e-4},  # md cfgs/imagenet_c/rpl.yaml
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (CIFAR, Adam), 5e-4 (ImageNet, SGD): md cfgs/*/rpl.yaml
        "q": Uniform(0.5, 1.0),  # published 0.8 (RPL paper, md RPL.Q); q = 1 is the MAE end of GCE
    }

    def setup(self) -> None:
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model), self.cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        """GCE (q = ``cfg.q``) of the logits towards their own hard pseudo-labels."""
        return generalized_cross_entropy(logits, logits.detach().argmax(dim=1), self.cfg.q).mean()
