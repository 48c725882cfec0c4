"""Pseudo-labelling at test time: self-training on the model's own confident predictions.

Hard pseudo-labels (Lee, "Pseudo-Label: The Simple and Efficient Semi-Supervised Learning Method for Deep
Neural Networks", ICML 2013 workshop) as a TTA method: every BatchNorm normalises with the batch's statistics,
and only the BN affine parameters adapt, by one Adam step per batch on the cross-entropy between the
predictions and their argmax, counted for the predictions at least ``threshold`` confident. A worked example
of docs/adding_a_method.md: ``python -m unitta.sweep examples/my_method/sweep.yaml``.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.methods import LogUniform, TTAMethod, Uniform, register_method


@register_method("pseudo_label")
class PseudoLabel(TTAMethod):
    """Self-training on confident hard pseudo-labels (Lee, 2013), BN affine parameters only."""

    version = 1  # bump when the behaviour changes: results of another version are recomputed

    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3  # Adam's learning rate, TENT's CIFAR value (Wang et al., ICLR'21)
        threshold: float = 0.9  # confidence a prediction needs to become a training label

        def __post_init__(self) -> None:
            if not self.lr > 0:
                raise ValueError(f"lr must be > 0, got {self.lr}")
            if not 0.0 <= self.threshold < 1.0:
                raise ValueError(f"threshold must be in [0, 1), got {self.threshold}")

    presets = {"imagenet": {"lr": 2.5e-4}}  # dataset family -> overrides (TENT's ImageNet value)
    # what `unitta select` searches: TENT's 1e-3 a decade either side; Lee's 0.9 among lower thresholds
    space = {"lr": LogUniform(1e-4, 1e-2), "threshold": Uniform(0.5, 0.95)}

    def setup(self) -> None:
        """On ``self.model``, a fresh copy of the source: batch statistics, trainable BN affine parameters."""
        self.model.requires_grad_(False)
        params = []
        for bn in (m for m in self.model.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.track_running_stats, bn.running_mean, bn.running_var = False, None, None
            bn.requires_grad_(True)
            params += [bn.weight, bn.bias]
        self.optimizer = torch.optim.Adam(params, lr=self.cfg.lr)

    def forward(self, x: Tensor) -> Tensor:
        with torch.enable_grad():
            logits = self.model(x)
            confidence, labels = logits.detach().softmax(dim=1).max(dim=1)
            keep = (confidence >= self.cfg.threshold).float()  # a mask, not an index: no host synchronisation
            loss = (F.cross_entropy(logits, labels, reduction="none") * keep).sum() / keep.sum().clamp_min(1.0)
            self.step(loss)  # zero_grad, counted backward, optimizer step
        return logits.detach()
