"""ROID: certainty- and diversity-weighted self-training with weight ensembling and prior correction.

Paper:     Marsden, Döbler, Yang, "Universal Test-time Adaptation through Weight Ensembling, Diversity
           Weighting, and Prior Correction", WACV 2024 (docs/methods.md "ROID").
Upstream:  mariodoebler/test-time-adaptation methods/roid.py (official); UniTTA's ``roid`` adapter
           (a copy of the version in devavratTomar/unmixtns) gives the per-dataset values used here.
Algorithm: BN layers normalise with batch statistics and their affine parameters are trained on the
           soft-likelihood-ratio loss plus a symmetric-CE consistency to an augmented view, each sample
           weighted by certainty x diversity (samples resembling the running class prior are dropped);
           after each step the parameters are averaged back towards the source (0.99 / 0.01), and the
           output is corrected by an adaptively smoothed batch class prior.

On LayerNorm / GroupNorm models (md runs ROID on ViT-B/16, Swin-B and ResNet-26-GN) the affine parameters of
those layers are trained instead (md ``roid.configure_model``; ``norm/affine.py``).

Also here: ``roid_unmixtns`` (UniTTA's ROID with ``USE_UNMIXTNS``): the same method with every
BatchNorm2d replaced by an UnMix-TNS layer (norm/unmixtns_layer.py) instead of a batch-statistics layer.

Deviations:
- Prior correction (``prior_on``): by default the correction reweights the *probabilities*,
  p_c pi_c / sum_c' p_c' pi_c', as the paper describes it (a reweighting of the predictions by the
  class prior). Both reference implementations multiply the *logits* by pi, which for negative logits
  pushes the prediction *away* from likely classes; ``prior_on="logits"`` reproduces them.
- Loss normalisation: the reference divides the summed weighted losses by the configured batch size
  (``TEST.BATCH_SIZE``); here by the actual batch size (identical on full batches), or by
  ``loss_batch_size`` when set (> 0) to reproduce the reference on short batches.
- Batches smaller than ``min_update_batch`` (default 2) are predicted with no update: ROID's min-max
  weight normalisation is 0/0 on one sample (NaN in the reference, which UniTTA's harness hides by
  skipping batches of size 1). A batch whose weights are all equal (identical predictions) gets weight
  1 for every sample instead of NaN.
- Augmentation: UniTTA's full CoTTA set (edge padding, blur, noise) at the input's size; md uses a
  lighter set (reflect padding, no blur, no noise).
- The source copy for weight ensembling holds only the trained parameters, on the model's device
  (md keeps a whole model on the CPU); numerically identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.norm.row_mask import masked_rows
from unitta.methods.norm.unmixtns_layer import UnMixTNS2d, convert_to_unmixtns
from unitta.methods.parts.augment import cotta_augment
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.losses import soft_likelihood_ratio, softmax_entropy, symmetric_cross_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive, check_probability
from unitta.nn.batchnorm import train_affine
from unitta.search_dimensions import Uniform


@register_method("roid")
class ROID(TTAMethod):
    """ROID (Marsden et al., WACV'24): weighted SLR + consistency, weight ensembling, prior correction."""

    # 2: augmentation parameters drawn as tensors in one batch (same distribution, other random draws)
    version = 3  # 3: static shapes (the augmented forward on every image, masked statistics)
    norm_kinds = ("batch", "layer", "group")  # md roid.configure_model: BN, LN and GN affine

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # UT configs/adapter/cifar10/roid.yaml (md likewise)
        lr: float = 1e-3  # UT configs/adapter/cifar10/roid.yaml (md likewise)
        use_weighting: bool = True  # ROID.USE_WEIGHTING (UT, md)
        use_prior_correction: bool = True  # ROID.USE_PRIOR_CORRECTION
        use_consistency: bool = True  # ROID.USE_CONSISTENCY
        momentum_src: float = 0.99  # ROID.MOMENTUM_SRC: theta <- 0.99 theta + 0.01 theta_src
        momentum_probs: float = 0.9  # ROID.MOMENTUM_PROBS: class-prior EMA
        temperature: float = 1.0 / 3.0  # ROID.TEMPERATURE
        prior_on: Literal["probs", "logits"] = "probs"  # DEVIATION from UT/md ("logits"), see module doc
        loss_batch_size: int = 0  # 0: divide by the actual batch size; > 0: by this (UT/md TEST.BATCH_SIZE)
        min_update_batch: int = 2  # DEVIATION: smaller batches are predicted without a step (UT skips them)

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_probability("momentum_src", self.momentum_src)
            check_probability("momentum_probs", self.momentum_probs)
            check_positive("temperature", self.temperature)
            check_at_least("loss_batch_size", self.loss_batch_size, 0, "0: the actual batch size")
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {
        # UT configs/adapter/imagenet/roid.yaml: SGD 1e-3 (md: SGD 2.5e-4), momentum 0.9, Nesterov
        "imagenet": {"optimizer": "sgd", "lr": 1e-3},
    }
    # UT core/adapter/roid.py: the prior correction scales the logits (outputs * smoothed_prior); the same for
    # roid_unmixtns (UT configs/adapter/<dataset>/roid_unmixtns.yaml: the same roid.py with USE_UNMIXTNS).
    # Not here, because it changes no prediction: UT's ROID divides its loss by the configured TEST.BATCH_SIZE
    # and UT's UnMix-TNS fixes its momentum from it. Both differ from the actual batch size only on a stream's
    # last, short batch, whose step (or component update) comes after its own prediction, and nothing is
    # predicted after it. A fixed 64 (``loss_batch_size``) would be wrong for cells run at another batch size.
    profiles = {"reference": {"prior_on": "logits"}}

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (UT/md roid.yaml, CIFAR Adam, ImageNet SGD; md ImageNet 2.5e-4)
        "momentum_src": Uniform(0.9, 0.999),  # published 0.99 (ROID.MOMENTUM_SRC)
        "momentum_probs": Uniform(0.5, 0.99),  # published 0.9 (ROID.MOMENTUM_PROBS)
    }

    # ------------------------------------------------------------------ set-up
    def configure(self) -> list[nn.Parameter]:
        """Set the normalisation layers up for adaptation; returns the parameters ROID trains.

        ROID: every BatchNorm normalises with the current batch's statistics (BatchStatsNorm); the affine
        parameters of every BatchNorm, LayerNorm and GroupNorm are trained (``adapt_norm_affine``).
        """
        return adapt_norm_affine(self.model)

    def setup(self) -> None:
        self.model.requires_grad_(False)
        params = self.configure()
        self.params = params
        self.source_params = [p.detach().clone() for p in params]
        self.model.eval()
        self.optimizer = optimizer_from_config(params, self.cfg)
        self.class_probs_ema = torch.full((self.info.num_classes,), 1.0 / self.info.num_classes, device=self.device)
        self.augment = cotta_augment(paths=self.device_paths)
        self.aug_generator = (
            device_generator(self.generator, self.device) if self.device_paths.cuda(self.device) else self.generator
        )

    @property
    def scores(self) -> str:  # the prior correction on probabilities returns probabilities
        return "probabilities" if self.cfg.use_prior_correction and self.cfg.prior_on == "probs" else "logits"

    def predict_scores(self, x: Tensor) -> Tensor:
        """Non-adapting prediction: the current model with the (stateless, per-batch) prior correction."""
        return self.prior_correct(self.model(x))

    # ------------------------------------------------------------------ per batch
    def forward(self, x: Tensor) -> Tensor:
        if x.shape[0] < self.cfg.min_update_batch:
            with torch.no_grad():
                logits = self.model(x)
            return self.prior_correct(logits)
        with torch.enable_grad():
            logits = self.model(x)
            self.step(self.loss(x, logits))
        self.ensemble_with_source()
        return self.prior_correct(logits.detach())

    def sample_weights(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(weights (B,), keep (B,) bool) of the paper's certainty x diversity weighting (ROID paper sec. 3).

        w_div = minmax(1 - cos(p_ema, p_i)); samples with w_div below the batch mean are dropped;
        w_cert = minmax(-H(p_i)); w = exp(w_div w_cert / T). Uses the class-prior EMA *before* this
        batch updates it, as the reference.
        """
        probs = logits.softmax(dim=1)
        div = _minmax(1.0 - torch.cosine_similarity(self.class_probs_ema.unsqueeze(0), probs, dim=1))
        keep = ~(div < div.mean())
        cert = _minmax(-softmax_entropy(logits))
        weights = torch.exp(div * cert / self.cfg.temperature)
        return weights * keep, keep

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        """Weighted SLR + weighted symmetric-CE consistency, summed over kept samples / batch size."""
        denom = float(self.cfg.loss_batch_size or x.shape[0])
        if self.cfg.use_weighting:
            with torch.no_grad():
                weights, keep = self.sample_weights(logits)
                m = self.cfg.momentum_probs
                self.class_probs_ema = m * self.class_probs_ema + (1.0 - m) * logits.softmax(dim=1).mean(0)
        else:
            weights = torch.ones(x.shape[0], device=logits.device)
            keep = torch.ones(x.shape[0], dtype=torch.bool, device=logits.device)
        # dropped samples have weight 0: a masked sum, the same value and gradient as summing the kept rows
        zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
        loss = torch.where(keep, soft_likelihood_ratio(logits) * weights, zero).sum() / denom
        if self.cfg.use_consistency:
            # static shapes: the augmented forward sees every image, with the batch statistics of the kept ones
            # (``masked_rows``) and zero weight on the others: the kept rows' values of a forward of the kept
            # rows alone, without a data-dependent batch size (docs/methods.md "ROID")
            mask = keep if self.cfg.use_weighting else None
            self.before_augmented_forward()
            try:
                with masked_rows(self.model, mask):
                    logits_aug = self.model(self.augment(x, self.aug_generator, host_generator=self.generator))
            finally:
                self.after_augmented_forward()
            consistency = torch.where(keep, symmetric_cross_entropy(logits_aug, logits) * weights, zero)
            loss = loss + consistency.sum() / denom
        return loss

    def before_augmented_forward(self) -> None:
        """Hook around the consistency forward (roid_unmixtns may freeze its statistics there)."""

    def after_augmented_forward(self) -> None:
        """Hook around the consistency forward."""

    @torch.no_grad()
    def ensemble_with_source(self) -> None:
        """theta <- a theta + (1 - a) theta_src over the trained parameters (a = momentum_src)."""
        a = self.cfg.momentum_src
        if a >= 1.0:
            return
        torch._foreach_mul_(self.params, a)  # two multi-tensor ops, the arithmetic of p.mul_(a).add_(src, 1 - a)
        torch._foreach_add_(self.params, self.source_params, alpha=1.0 - a)

    @torch.no_grad()
    def prior_correct(self, logits: Tensor) -> Tensor:
        """Adaptive additive prior correction (ROID paper sec. 3): pi_bar = mean_i p_i,
        s = max(1/B, 1/K) / max_c pi_bar_c, pi = (pi_bar + s) / (1 + s K); returns p * pi normalised
        (``prior_on="probs"``) or the reference's logits * pi (``"logits"``)."""
        if not self.cfg.use_prior_correction:
            return logits
        probs = logits.softmax(dim=1)
        b, k = probs.shape
        prior = probs.mean(0)
        smooth = max(1.0 / b, 1.0 / k) / prior.max()
        smoothed = (prior + smooth) / (1.0 + smooth * k)
        if self.cfg.prior_on == "logits":
            return logits * smoothed
        corrected = probs * smoothed
        return corrected / corrected.sum(dim=1, keepdim=True)


@register_method("roid_unmixtns")
class ROIDUnMixTNS(ROID):
    """ROID with UnMix-TNS normalisation layers (UniTTA ``roid_unmixtns``; Tomar et al., ICLR'24 sec. 4).

    Every BatchNorm2d becomes an UnMixTNS2d whose affine parameters ROID trains; BatchNorm1d layers
    keep their source statistics (as the reference's UnMixTNS1d). All ROID deviations apply.
    """

    @dataclass(frozen=True)
    class Config(ROID.Config):
        num_components: int = 128  # UT ADAPTER.ROID.UNMIXTNS default K (standalone unmixtns: 16)
        max_batch_size: int = 64  # UT: B_max = 64
        update_on_augmented: bool = True  # UT: the consistency forward also moves the components

        def __post_init__(self) -> None:
            super().__post_init__()
            check_at_least("num_components", self.num_components, 1)
            check_at_least("max_batch_size", self.max_batch_size, 1)

    presets = ROID.presets  # UT: ROID's learning rates on every dataset
    profiles = ROID.profiles  # UT: the same core/adapter/roid.py
    norm_kinds = ("batch",)  # UnMix-TNS replaces BatchNorm statistics

    def configure(self) -> list[nn.Parameter]:
        layers: list[nn.Module] = list(
            convert_to_unmixtns(self.model, self.cfg.num_components, self.cfg.max_batch_size, self.generator,
                                self.device_paths).values()
        )
        # BatchNorm1d layers stay source-statistics BNs (eval mode); their affine is trained too
        layers += [m for m in self.model.modules() if isinstance(m, nn.BatchNorm1d)]
        self.norm_layers = layers
        return train_affine(layers)

    def before_augmented_forward(self) -> None:
        if not self.cfg.update_on_augmented:
            for layer in self.norm_layers:
                if isinstance(layer, UnMixTNS2d):
                    layer.update_stats = False

    def after_augmented_forward(self) -> None:
        for layer in self.norm_layers:
            if isinstance(layer, UnMixTNS2d):
                layer.update_stats = True


def _minmax(v: Tensor) -> Tensor:
    """(v - min) / (max - min); all zeros when the range is 0 (one sample, or equal values)."""
    low, high = v.min(), v.max()
    span = high - low
    # where instead of an if: no host read; (v - low) / 0 in the unused branch is discarded
    return torch.where(span > 0, (v - low) / span, torch.zeros((), dtype=v.dtype, device=v.device))
