"""TRIBE: a tri-net of class-balanced BatchNorm models trained by masked self-training.

Paper:     Su, Xu, Jia, "Towards Real-World Test-Time Adaptation: Tri-Net Self-Training with Balanced
           Normalization", AAAI 2024 (docs/methods.md "TRIBE").
Upstream:  Gorilla-Lab-SCUT/TRIBE core/adapter/tribe.py; UniTTA's ``tribe`` adapter is the same code.
Algorithm: every BatchNorm becomes a Balanced BN (norm/balanced_bn_layer.py). A teacher that shares the
           student's affine parameters (but has its own statistics) predicts in eval mode; its argmax
           labels then drive class-balanced statistic updates in the teacher, the student (on a strong
           augmentation) and a frozen source anchor; the loss is the student's CE to the teacher's
           argmax plus lambda * MSE(teacher logits, anchor logits), both over the samples whose teacher
           entropy is below H0 log K. One Adam step per batch; the eval teacher's logits are returned.
Batch size: every forward normalises with the (global) balanced statistics, so B = 1 works; the
           update then moves one class with momentum eta.
Deviations:
- an empty entropy mask gives a loss of 0 instead of the reference's NaN; the gradients are zero in
  both cases and the optimiser still steps (Adam's moments move the parameters as in the reference);
- batches of size 1 are adapted on (UniTTA's harness skips them);
- randomness (the strong augmentation) comes from the method's seeded generator.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.norm.groups import ClassGroups
from unitta.methods.parts.augment import cotta_augment
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.losses import masked_mean, softmax_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR, BN_EMA, BN_GAMMA
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive, check_probability
from unitta.nn.batchnorm import replace_batchnorms
from unitta.search_dimensions import Uniform


@register_method("tribe")
class TRIBE(TTAMethod):
    """TRIBE (Su et al., AAAI'24): tri-net self-training on Balanced BN."""

    # 2: augmentation parameters drawn as tensors in one batch (same distribution, other random draws)
    version = 2

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # UT/TRIBE configs/adapter/cifar10/tribe.yaml ADAPTER.TRIBE.ETA
        gamma: float = 0.0  # ADAPTER.TRIBE.GAMMA
        h0: float = 0.05  # ADAPTER.TRIBE.H0: entropy threshold as a fraction of log K
        lam: float = 0.5  # ADAPTER.TRIBE.LAMBDA: weight of the anchor MSE
        optimizer: Literal["adam", "sgd"] = "adam"  # OPTIM.METHOD
        lr: float = 1e-3  # OPTIM.LR (CIFAR dataset configs)

        def __post_init__(self) -> None:
            check_interval("eta", self.eta, 0.0, 1.0, open_low=True)
            check_probability("gamma", self.gamma)
            check_positive("h0", self.h0)
            check_at_least("lam", self.lam, 0)
            check_positive("lr", self.lr)

    presets = {
        "cifar100": {"eta": 0.05, "gamma": 0.1, "h0": 0.2},  # configs/adapter/cifar100/tribe.yaml
        # configs/adapter/imagenet/tribe.yaml; lr 5e-4 is UT's ImageNet dataset LR (configs/dataset/imagenet)
        "imagenet": {"eta": 0.5, "gamma": 0.5, "h0": 0.4, "lr": 5e-4},
    }

    space = {  # docs/methods.md "Search spaces"
        "eta": BN_EMA,  # published 0.01 / 0.05 / 0.5 (tribe.yaml ADAPTER.TRIBE.ETA, as presets)
        "gamma": BN_GAMMA,  # published 0 / 0.1 / 0.5 (ADAPTER.TRIBE.GAMMA)
        "h0": Uniform(0.05, 0.4),  # published 0.05 / 0.2 / 0.4 (ADAPTER.TRIBE.H0): their span
        "lam": Uniform(0.0, 1.0),  # published 0.5 (ADAPTER.TRIBE.LAMBDA): from no anchor to twice the weight
        "lr": ADAM_LR,  # published 1e-3 (CIFAR), 5e-4 (ImageNet)
    }

    def setup(self) -> None:
        K = self.info.num_classes
        self.model.requires_grad_(False)
        paths = self.device_paths
        replace_batchnorms(self.model, lambda name, bn: BalancedBatchNorm2d(bn, K, self.cfg.eta, self.cfg.gamma, paths))
        params = []
        for module in self.model.modules():
            if isinstance(module, BalancedBatchNorm2d):
                for p in (module.weight, module.bias):
                    if p is not None:
                        p.requires_grad_(True)
                        params.append(p)
        # the anchor: source weights, frozen, with its own Balanced BN statistics
        self.anchor = copy.deepcopy(self.model)
        self.anchor.requires_grad_(False)
        # the teacher ("aux_model"): own statistics, parameters *shared* with the student
        self.teacher = copy.deepcopy(self.model)
        _share_parameters(self.teacher, self.model)
        self.optimizer = optimizer_from_config(params, self.cfg)
        self.augment = cotta_augment(paths=self.device_paths)
        self.aug_generator = (
            device_generator(self.generator, self.device) if self.device_paths.cuda(self.device) else self.generator
        )
        self.mask_threshold = self.cfg.h0 * math.log(K)
        self.last_mask: Tensor | None = None  # read back only when asked for (extra_metrics), not per batch
        self.track(self.teacher)
        self.track(self.anchor)

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            self.teacher.eval()
            prediction = self.teacher(x)
        labels = prediction.argmax(dim=1)
        # one grouping per batch, shared by every Balanced BN layer of the three nets (same labels, K, eta)
        groups = ClassGroups(labels, self.info.num_classes, self.cfg.eta, x.dtype)
        with torch.enable_grad():
            self.teacher.train()
            _set_labels(self.teacher, groups)
            logits_t = self.teacher(x)
            self.model.train()
            _set_labels(self.model, groups)
            logits_s = self.model(self.augment(x, self.aug_generator, host_generator=self.generator))
            with torch.no_grad():
                self.anchor.train()
                _set_labels(self.anchor, groups)
                logits_a = self.anchor(x)
            mask = softmax_entropy(logits_t).detach() < self.mask_threshold
            ce = F.cross_entropy(logits_s, logits_t.argmax(dim=1).detach(), reduction="none")
            mse = F.mse_loss(logits_t, logits_a, reduction="none").mean(dim=1)
            self.step(masked_mean(ce, mask) + self.cfg.lam * masked_mean(mse, mask))
        for net in (self.model, self.teacher, self.anchor):
            net.eval()
        self.last_mask = mask
        return prediction

    @property
    def last_mask_fraction(self) -> float:
        """Share of the last batch's samples that passed the entropy filter (NaN before any batch)."""
        return float("nan") if self.last_mask is None else float(self.last_mask.float().mean())

    def extra_metrics(self) -> dict[str, float]:
        return {"tribe_mask_fraction_last_batch": self.last_mask_fraction}


def _share_parameters(target: nn.Module, source: nn.Module) -> None:
    """Make every parameter of ``target`` the very Parameter object of ``source`` (same structure)."""
    for (name_t, mod_t), (name_s, mod_s) in zip(target.named_modules(), source.named_modules()):
        if name_t != name_s:
            raise ValueError(f"module structures differ: {name_t!r} vs {name_s!r}")
        for pname, param in mod_s.named_parameters(recurse=False):
            setattr(mod_t, pname, param)


def _set_labels(model: nn.Module, labels: Tensor | ClassGroups) -> None:
    for module in model.modules():
        if isinstance(module, BalancedBatchNorm2d):
            module.label = labels
