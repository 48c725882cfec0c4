"""RoTTA: robust test-time adaptation in dynamic scenarios (Yuan, Xie, Li; CVPR'23).

Every BatchNorm becomes a Robust BN (``norm/robust_bn_layer.py``, alpha = 0.05). The student trains only
the RBN affine parameters; the teacher is an EMA of the student (all parameters, nu = 0.001) and
predicts. Incoming samples go through a category-balanced memory (CSTU, ``memory.py``); every 64
samples (counted in samples, not batches) both networks run in train mode on the memory (which
updates their RBN statistics) and the student takes one step on the timeliness-weighted
teacher->student cross-entropy (paper sec. 3; docs/methods.md "RoTTA"):

    z = teacher.eval()(x); p = softmax(z)               # the prediction returned
    for each sample: offer (x_i, argmax p_i, H(p_i)) to CSTU; every 64th sample: update
    update: M, a = memory (ages / N); w = exp(-a) / (1 + exp(-a))
            L = mean_j w_j CE(softmax(teacher.train()(M_j)) -> student.train()(strong_aug(M_j)))
            step(L); teacher <- (1 - nu) teacher + nu student

Hyper-parameters (UT ``configs/adapter/*/rotta.yaml`` = original RoTTA, identical on the three
datasets): Adam 1e-3, memory 64, update every 64 samples, nu 0.001, alpha 0.05,
lambda_t = lambda_u = 1. H(p) uses log(p + 1e-6) as the reference.

Deviations:
- DEVIATION(UT c41bce7): UT's ImageNet config keeps ``INPUT.SIZE (32, 32)``, so the strong
  augmentation centre-crops ImageNet memory images to 32 x 32. Here the
  augmentation is sized to the input (``aug_size=None``, the paper's); ``aug_size=32`` gives UT's.
- Works for every batch size: predictions use stored RBN statistics; updates are counted in samples.
  Updates fire after the whole batch has been predicted (the reference does the same).
- Only BatchNorm affine parameters train (as UT); md also trains LayerNorm/GroupNorm affine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from unitta.methods.norm.robust_bn_layer import RobustBN
from unitta.methods.norm.row_mask import masked_rows
from unitta.methods.parts.augment import rotta_strong_augment
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.ema import ema_update_, make_teacher
from unitta.methods.parts.memory import CSTUMemory, split_at_updates
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.profiles import UT_AUG_SIZE
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_optional_size, check_positive, check_probability
from unitta.nn.batchnorm import replace_batchnorms, train_affine
from unitta.search_dimensions import IntUniform, LogUniform

__all__ = ["RoTTA"]


@register_method("rotta")
class RoTTA(TTAMethod):
    """RoTTA (Yuan et al., CVPR'23): Robust BN + CSTU memory + timeliness-weighted EMA teacher."""

    # 2: augmentation parameters drawn as tensors in one batch (same distribution, other random draws)
    version = 3  # 3: the memory batch padded to the capacity, masked statistics

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # UT configs/adapter/*/rotta.yaml OPTIM.METHOD
        lr: float = 1e-3  # UT configs/adapter/*/rotta.yaml OPTIM.LR (all datasets)
        memory_size: int = 64  # ADAPTER.RoTTA.MEMORY_SIZE
        update_every: int = 64  # ADAPTER.RoTTA.UPDATE_FREQUENCY, in samples
        nu: float = 0.001  # ADAPTER.RoTTA.NU: teacher <- (1 - nu) teacher + nu student
        alpha: float = 0.05  # ADAPTER.RoTTA.ALPHA: Robust BN momentum
        lambda_t: float = 1.0  # ADAPTER.RoTTA.LAMBDA_T
        lambda_u: float = 1.0  # ADAPTER.RoTTA.LAMBDA_U
        aug_size: int | None = None  # None: the input's side (paper); 32: UT's ImageNet INPUT.SIZE

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("memory_size", self.memory_size, 1)
            check_at_least("update_every", self.update_every, 1)
            check_probability("nu", self.nu)
            check_probability("alpha", self.alpha)
            check_at_least("lambda_t", self.lambda_t, 0)
            check_at_least("lambda_u", self.lambda_u, 0)
            check_optional_size("aug_size", self.aug_size)

    presets: dict = {}  # RoTTA uses the same values on CIFAR-10, CIFAR-100 and ImageNet
    # UT configs/adapter/<dataset>/rotta.yaml INPUT.SIZE (32, 32): 32x32 strong views, also on ImageNet.
    profiles = {"reference": {"aug_size": UT_AUG_SIZE}}

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (UT configs/adapter/*/rotta.yaml, every dataset)
        "memory_size": IntUniform(16, 128),  # published 64 (ADAPTER.RoTTA.MEMORY_SIZE): a factor 4 below, 2 above
        "nu": LogUniform(1e-4, 1e-2),  # published 0.001 (ADAPTER.RoTTA.NU): a decade either side
        "alpha": LogUniform(5e-3, 0.5),  # published 0.05 (ADAPTER.RoTTA.ALPHA): a decade either side
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        layers = replace_batchnorms(self.model, lambda name, bn: RobustBN(bn, self.cfg.alpha))
        params = train_affine(layers.values())
        self.optimizer = optimizer_from_config(params, self.cfg)
        self.teacher = make_teacher(self.model)
        self.track(self.teacher)
        self.memory = CSTUMemory(self.cfg.memory_size, self.info.num_classes, self.cfg.lambda_t, self.cfg.lambda_u)
        self.augment = rotta_strong_augment(self.cfg.aug_size, self.device_paths)
        self.device_generator = device_generator(self.generator, self.device)
        self.samples_seen = 0
        self.updates = 0

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            self.model.eval()
            self.teacher.eval()
            logits = self.teacher(x)
            p = logits.softmax(dim=1)
            labels = p.argmax(dim=1)
            uncertainty = -(p * torch.log(p + 1e-6)).sum(dim=1)  # RoTTA's entropy (log(p + 1e-6))
        # the memory's decisions are host work: one transfer of the batch's labels and uncertainties
        labels_h, uncertainty_h = torch.stack([labels.to(torch.float64), uncertainty.to(torch.float64)]).tolist()
        for start, end, update in split_at_updates(self.samples_seen, x.shape[0], self.cfg.update_every):
            self.memory.add_batch(x[start:end], labels_h[start:end], uncertainty_h[start:end])
            if update:
                self._update()
        self.samples_seen += x.shape[0]
        return logits

    def _update(self) -> None:
        # static shapes: the memory batch is padded to the capacity; until the memory is full the padding is masked
        # out of the batch statistics (``masked_rows``) and weighs 0 in the loss (docs/methods.md "RoTTA")
        memory_x, ages, stored = self.memory.padded_batch()
        count = len(self.memory)
        mask = stored if count < self.memory.capacity else None
        self.model.train()
        self.teacher.train()
        with torch.no_grad(), masked_rows(self.teacher, mask):
            teacher_logits = self.teacher(memory_x)  # train mode: updates the teacher's RBN statistics
        with torch.enable_grad(), masked_rows(self.model, mask):
            student_logits = self.model(self.augment(memory_x, self.device_generator, host_generator=self.generator))
            weight = torch.exp(-ages) / (1.0 + torch.exp(-ages))  # timeliness reweighting (RoTTA sec. 3.3)
            ce = -(teacher_logits.softmax(dim=1) * student_logits.log_softmax(dim=1)).sum(dim=1)
            zero = torch.zeros((), dtype=ce.dtype, device=ce.device)
            self.step(torch.where(stored, ce * weight, zero).sum() / count)  # the mean over the stored items
        ema_update_(self.teacher, self.model, 1.0 - self.cfg.nu)
        self.model.eval()
        self.teacher.eval()
        self.updates += 1

    def extra_metrics(self) -> dict:
        return {"memory_size": len(self.memory), "updates": self.updates}
