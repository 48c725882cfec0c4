"""RMT: robust mean teacher (Döbler, Marsden, Yang; CVPR'23), as the mariodoebler TTA benchmark implements it.

What adapts: every weight and bias of the student (the model with batch-statistic BatchNorms; LayerNorm /
GroupNorm models adapt as they are) and a projector MLP; the teacher is an EMA of the student
(``unitta/methods/parts/ema.py``). Source data (``needs_source``): class prototypes, a warm-up and replay.

Set-up (``setup()``, or at the first batch when ``source_batch_size`` is None, see below):

    prototypes p_c = mean encoder feature of the source images of class c (one shuffled pass over the source
        set in batches, stopping after the batch that passes ``prototype_samples`` = 100,000 images), with the
        source model
    projector: Linear(D, 128) -> ReLU -> Linear(128, 128), in the optimiser with the model's learning rate
    warm-up: warmup_samples // source batch size steps on source images (labels unused) with the learning
        rate ramped linearly to lr: loss = SCE(student(x_s), teacher(x_s)), then EMA update of the teacher

Per test batch x (paper sec. 3; md ``methods/rmt.py``):

    f = enc(x), z = cls(f); f' = enc(aug(x)), z' = cls(f'); z_t = teacher(x)     (aug: CoTTA's transform)
    nearest prototype n_i = argmax_c cos(p_c, f_i)
    L_trg = lambda_trg * 1/4 [CE(z_t->z) + CE(z->z_t) + CE(z_t->z') + CE(z'->z_t)]          (symmetric CE)
          + lambda_cont * SupCon over views (p_{n_i}, f_i, f'_i) through the projector, T = 0.1
    L_src = lambda_src * CE(cls(enc(x_src)), y_src) on one replayed labelled source batch
    one step on L_trg + L_src; teacher <- m teacher + (1 - m) student (m = 0.999)
    return z + z_t                                   (the ensemble, computed before the step)

Hyper-parameters (md ``conf.py`` RMT/CONTRAST/M_TEACHER, ``cfgs/*/rmt.yaml``): CIFAR-10 / CIFAR-100: Adam 1e-3;
ImageNet: SGD 0.01 (momentum 0.9, Nesterov); lambda_src = lambda_trg = lambda_cont = 1; T 0.1; projection 128;
m 0.999; warm-up 50,000 source samples. The source batch size is the test batch size (md
``batch_size_src = TEST.BATCH_SIZE``).

CPU cost of the set-up: the prototype pass is one forward over the source set (60,000 Fashion-MNIST images), the
warm-up 50,000 // B steps of student forward + backward + teacher forward (781 at B = 64, under one epoch of
training): on the embedded ResNet-20 with one CPU thread, 95 s for the prototypes and 471 s for both on the
project's shared 2-core machine (load average about 6), where a batch of the stream takes 0.46 s
(docs/methods.md). Both repeat on ``reset()``; ``warmup_samples=0`` and ``prototype_samples`` shorten them. Both
are one-off set-up (``TTAMethod.one_off``): the row's ``setup_*`` columns, not the stream's cost.

Deviations:
- DEVIATION(md): the reference caches the prototypes and the warmed-up weights on disk and loads them on later
  runs; here they are recomputed from the method's seed, so ``reset()`` replays them exactly.
- DEVIATION(md): with ``source_batch_size=None`` (default, the reference's choice) the source batch size is
  the first test batch's size, so prototypes and warm-up run at the first batch; give ``source_batch_size`` to
  run them in ``setup()``.
- DEVIATION(md): a class without source images has no prototype here (the reference's is NaN, which makes
  the contrastive loss NaN when a test feature picks it).
- DEVIATION(md): ``CONTRAST.MODE 'one'`` is not offered (the reference's 'one' mode multiplies unprojected
  anchors with projected features, which fails unless the feature size equals the projection size).
- Host reads: the source order and the colour-jitter order are drawn on the host from CPU generators (CPU
  tensors, no device synchronisation); with a source Dataset without ``get_batch`` (e.g. a ``TensorDataset``)
  each source index is read on the host, which the contract check's host_sync item reports as a warning.
- Batches of one sample adapt, as the reference does with its default window length 1.
- The paper (sec. 4) warms up on source data too, and ablates lambda_src = 0 as the source-free variant; the
  values here are the repository's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.data.source import take_batch
from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.parts.augment import cotta_augment
from unitta.methods.parts.contrastive import Projector, multiview_contrastive_loss
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.ema import ema_update_, make_teacher
from unitta.methods.parts.heads import SplitModel
from unitta.methods.parts.losses import symmetric_cross_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.source_batches import SourceBatches
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive, check_probability
from unitta.nn.batchnorm import replace_batchnorms
from unitta.search_dimensions import LogUniform, Uniform

__all__ = ["RMT"]


@register_method("rmt")
class RMT(TTAMethod):
    """RMT (Döbler et al., CVPR'23): mean teacher, symmetric CE, prototype contrast, source replay and warm-up."""

    version = 1
    needs_source = True
    norm_kinds = ("batch", "layer", "group")

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # md cfgs/cifar10_c/rmt.yaml OPTIM.METHOD
        lr: float = 1e-3  # md cfgs/cifar10_c/rmt.yaml OPTIM.LR
        teacher_momentum: float = 0.999  # md conf.py M_TEACHER.MOMENTUM
        lambda_ce_src: float = 1.0  # md conf.py RMT.LAMBDA_CE_SRC (0: the source-free variant)
        lambda_ce_trg: float = 1.0  # md conf.py RMT.LAMBDA_CE_TRG
        lambda_cont: float = 1.0  # md conf.py RMT.LAMBDA_CONT
        temperature: float = 0.1  # md conf.py CONTRAST.TEMPERATURE
        projection_dim: int = 128  # md conf.py CONTRAST.PROJECTION_DIM
        warmup_samples: int = 50_000  # md conf.py RMT.NUM_SAMPLES_WARM_UP
        source_batch_size: int | None = None  # None: the test batch size (md batch_size_src = TEST.BATCH_SIZE)
        prototype_samples: int = 100_000  # md methods/rmt.py: features stop once more than this many are taken

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_probability("teacher_momentum", self.teacher_momentum)
            check_at_least("lambda_ce_src", self.lambda_ce_src, 0)
            check_at_least("lambda_ce_trg", self.lambda_ce_trg, 0)
            check_at_least("lambda_cont", self.lambda_cont, 0)
            check_positive("temperature", self.temperature)
            check_at_least("projection_dim", self.projection_dim, 1)
            check_at_least("warmup_samples", self.warmup_samples, 0)
            check_at_least("prototype_samples", self.prototype_samples, 1)
            if self.source_batch_size is not None:
                check_at_least("source_batch_size", self.source_batch_size, 1)

    presets = {
        "imagenet": {"optimizer": "sgd", "lr": 0.01},  # md cfgs/imagenet_c/rmt.yaml
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (CIFAR, Adam), 0.01 (ImageNet, SGD): md cfgs/*/rmt.yaml
        "teacher_momentum": Uniform(0.99, 0.9999),  # published 0.999 (md M_TEACHER.MOMENTUM)
        "temperature": LogUniform(0.03, 0.3),  # published 0.1 (md CONTRAST.TEMPERATURE)
        "lambda_ce_src": Uniform(0.0, 1.0),  # published 1 (md RMT.LAMBDA_CE_SRC); 0 is the source-free variant
    }
    # the contract check's first batch has one image: with the test batch size, a 50,000-sample warm-up would
    # be 50,000 steps (and the prototype pass one forward per source image)
    check_overrides = {"warmup_samples": 64, "source_batch_size": 32}

    def setup(self) -> None:
        replace_batchnorms(self.model, lambda name, bn: BatchStatsNorm(bn))
        self.model = SplitModel(self.model, self.info.classifier)
        self.model.requires_grad_(True)
        self.model.eval()
        self.optimizer = optimizer_from_config(self.model.parameters(), self.cfg)
        self.teacher = make_teacher(self.model)
        self.track(self.teacher)
        self.augment = cotta_augment(None, self.device_paths)
        self.device_generator = device_generator(self.generator, self.device)
        self.prototypes: Tensor | None = None
        self.track(self.model.backbone)  # encoder passes (``encode``), which bypass the model's own forward
        if self.cfg.source_batch_size is not None:
            self._prepare(self.cfg.source_batch_size)

    # ------------------------------------------------------------------ source set-up
    def _prepare(self, batch_size: int) -> None:
        """Prototypes, projector and warm-up from the source set, with source batches of ``batch_size``.

        One-off set-up (``one_off``): counted in the row's ``setup_*`` columns, not in the stream's cost.
        """
        with self.one_off():
            self._prepare_source(batch_size)

    def _prepare_source(self, batch_size: int) -> None:
        self.replay = SourceBatches(self.source, batch_size, self.generator, self.device)
        self.prototypes, self.present = self._source_prototypes(batch_size)
        self.projector = Projector(self.prototypes.shape[1], self.cfg.projection_dim, self.generator).to(self.device)
        self.optimizer.add_param_group({"params": list(self.projector.parameters()), "lr": self.cfg.lr})
        self._warm_up(self.cfg.warmup_samples // batch_size)

    @torch.no_grad()
    def _source_prototypes(self, batch_size: int) -> Tensor:
        """(K, D) mean feature per source class (one shuffled pass, batch statistics as in adaptation) and the
        (K,) mask of classes that have source images."""
        order = torch.randperm(len(self.source), generator=self.generator)
        k = self.info.num_classes
        sums = counts = None
        seen = 0
        for start in range(0, len(order), batch_size):
            images, labels = take_batch(self.source, order[start : start + batch_size])
            features = self.model.encode(images.to(self.device)).float()
            labels = labels.to(self.device)
            if sums is None:
                sums = torch.zeros(k, features.shape[1], device=self.device)
                counts = torch.zeros(k, device=self.device)
            sums.index_add_(0, labels, features)
            counts += torch.bincount(labels, minlength=k).float()
            seen += len(labels)
            if seen > self.cfg.prototype_samples:
                break
        present = counts > 0
        return sums / counts.clamp_min(1)[:, None], present

    def _warm_up(self, steps: int) -> None:
        """``steps`` source batches: SCE between student and teacher, learning rate ramped up linearly."""
        for i in range(steps):
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.lr * (i + 1) / steps
            images, _ = next(self.replay)
            with torch.enable_grad():
                loss = symmetric_cross_entropy(self._logits(images), self.teacher(images)).mean()
                self.step(loss)
            ema_update_(self.teacher, self.model, self.cfg.teacher_momentum)
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr

    # ------------------------------------------------------------------ adaptation
    def forward(self, x: Tensor) -> Tensor:
        if self.prototypes is None:
            self._prepare(x.shape[0])
        with torch.enable_grad():
            features = self.model.encode(x)
            logits = self.model.head(features)
            features_aug = self.model.encode(self._augment(x))
            logits_aug = self.model.head(features_aug)
            logits_teacher = self.teacher(x)
            loss = self.cfg.lambda_ce_trg * _self_training(logits, logits_aug, logits_teacher).mean()
            if self.cfg.lambda_cont > 0:
                loss = loss + self.cfg.lambda_cont * self._contrastive(features, features_aug)
            if self.cfg.lambda_ce_src > 0:
                images, labels = next(self.replay)
                loss = loss + self.cfg.lambda_ce_src * F.cross_entropy(self._logits(images), labels)
            self.step(loss)
        ema_update_(self.teacher, self.model, self.cfg.teacher_momentum)
        return (logits + logits_teacher).detach()

    def _augment(self, x: Tensor) -> Tensor:
        """CoTTA's augmentation, one draw for the batch (md ``get_tta_transforms`` on the batch tensor); the op
        order of the colour jitter drawn on the host, so only the five chosen ops run."""
        return self.augment(x, self.device_generator, host_generator=self.generator)

    def _logits(self, x: Tensor) -> Tensor:
        """The student's logits, through ``encode`` so that the pass is counted once."""
        return self.model.head(self.model.encode(x))

    def _contrastive(self, features: Tensor, features_aug: Tensor) -> Tensor:
        """SupCon over (nearest source prototype, test feature, augmented test feature), through the projector."""
        with torch.no_grad():
            similarity = F.normalize(self.prototypes, dim=1) @ F.normalize(features.float(), dim=1).T  # (K, B)
            similarity = similarity.masked_fill(~self.present[:, None], float("-inf"))
            nearest = similarity.argmax(dim=0)
        views = torch.stack([self.prototypes[nearest].to(features.dtype), features, features_aug], dim=1)
        projected = F.normalize(self.projector(views), dim=-1)
        return multiview_contrastive_loss(projected, self.cfg.temperature)


def _self_training(logits: Tensor, logits_aug: Tensor, logits_teacher: Tensor) -> Tensor:
    """RMT's symmetric CE per sample: 1/2 SCE(student, teacher) + 1/2 SCE(augmented student, teacher)."""
    return 0.5 * symmetric_cross_entropy(logits, logits_teacher) + 0.5 * symmetric_cross_entropy(
        logits_aug, logits_teacher
    )
