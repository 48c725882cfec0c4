"""AdaContrast: contrastive test-time adaptation (Chen, Wang, Darrell, Ebrahimi; CVPR'22), as the reference TTA
benchmark implements it (md ``methods/adacontrast.py``, built on the authors' code).

What adapts: every weight and bias of the model (BatchNorms in train mode: batch statistics, running statistics
updated with the model's BN momentum). A key encoder (the "momentum model", an EMA of the model's parameters,
``unitta/methods/parts/ema.py``) fills a MoCo queue of K keys with their pseudo-labels; a feature bank of the key
encoder's features and probabilities refines the pseudo-labels by k nearest neighbours. Per test batch x, with
views x_w = random flip (weak), x_q, x_k = MoCo-v2-light (strong; ``unitta/methods/parts/augment.py``):

    z_w, f_w = model(x_w)                                     (train mode)
    pseudo-labels y = argmax softmax(z_w) for the first 1024 samples of the stream, afterwards
        y = argmax of the mean probability of the 10 bank entries nearest to f_w (cosine)   (paper eq. 2-3)
    z_q, f_q = model(x_q); key encoder <- m key + (1 - m) model (m 0.999); k = key encoder(x_k) features
    logits = [q.k, q.queue] / T with q, k L2-normalised (T 0.07)
    queue <- (k, y) at the queue pointer                      (before the loss, as the reference)
    L = alpha CE(z_q, y) + beta InfoNCE(logits; same-pseudo-label queue entries masked)
        + eta sum_c pbar_c log(pbar_c + 1e-8)  (pbar = mean softmax(z_q))                  (paper eq. 4-6)
    one step on L; bank <- key encoder(x_w) features and probabilities (train mode)
    return model(x) in eval mode (running statistics)          (after the step)

The queue starts as K random unit vectors with random labels, and the bank grows until it holds at least K
entries, then is overwritten in a ring from the position after its last growth (all as the reference).

Hyper-parameters (md ``conf.py`` ADACONTRAST/CONTRAST/M_TEACHER and ``cfgs/*/adacontrast.yaml``, the same for
CIFAR-10, CIFAR-100 and ImageNet): SGD lr 2e-4, momentum 0.9, Nesterov, weight decay 1e-4; queue 16,384;
T 0.07; m 0.999; alpha = beta = eta = 1; 10 neighbours, cosine distance; class-aware contrast; CE on the strong
view ("weak_strong"). The AdaContrast paper (sec. 4) uses the same values on VisDA/DomainNet (its lr 2e-4 with
10x on the classifier head: DEVIATION(paper): one learning rate here, as md on the corruption benchmarks).

Deviations:
- DEVIATION(md): the views are made from the batch on its device (``MoCoAugment``) instead of per image by PIL in
  the data loader; same operations and probabilities, float arithmetic instead of uint8 rounding. The reference
  turns a tensor into a PIL image first, which clips it to [0, 1] and quantises it to 256 levels; here only the
  strong view clips (``MoCoAugment``) and nothing is quantised, so inputs outside [0, 1] (normalised images, say)
  give other views than the reference's (the one difference a side-by-side run on the same batches reported).
- DEVIATION(paper): the authors' code fills the kNN bank with a pass over the whole target set before adapting
  (not online); md, and this, start with an empty bank and use the argmax for the first 1,024 samples.
- The random initial queue is drawn from the method's generator (md: the global RNG), so ``reset()`` replays it.
- DEVIATION(md): the nearest neighbours are found with ``topk`` (md sorts all distances): the same set up to ties.
- Batches of one sample adapt, as the reference with its default window length 1 (train-mode BatchNorm then
  normalises with the single image's statistics over H x W).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.parts.augment import MoCoAugment, random_hflip
from unitta.methods.parts.contrastive import class_aware_instance_loss, moco_logits
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.ema import ema_update_, make_teacher
from unitta.methods.parts.heads import SplitModel
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive, check_probability
from unitta.search_dimensions import IntUniform, LogUniform, Uniform

__all__ = ["AdaContrast"]

_DIVERSITY_EPS = 1e-8  # md methods/adacontrast.py div()


@register_method("adacontrast")
class AdaContrast(TTAMethod):
    """AdaContrast (Chen et al., CVPR'22): MoCo queue, kNN-refined pseudo-labels, diversity loss."""

    version = 1
    norm_kinds = ("batch", "layer", "group")

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "sgd"  # md cfgs/*/adacontrast.yaml OPTIM.METHOD
        lr: float = 2e-4  # md cfgs/*/adacontrast.yaml OPTIM.LR
        weight_decay: float = 1e-4  # md cfgs/*/adacontrast.yaml OPTIM.WD
        queue_size: int = 16384  # md conf.py ADACONTRAST.QUEUE_SIZE
        momentum: float = 0.999  # md conf.py M_TEACHER.MOMENTUM (key encoder)
        temperature: float = 0.07  # md cfgs/*/adacontrast.yaml CONTRAST.TEMPERATURE
        alpha: float = 1.0  # md conf.py ADACONTRAST.ALPHA (classification)
        beta: float = 1.0  # md conf.py ADACONTRAST.BETA (instance discrimination)
        eta: float = 1.0  # md conf.py ADACONTRAST.ETA (diversity)
        num_neighbors: int = 10  # md conf.py ADACONTRAST.NUM_NEIGHBORS
        distance: Literal["cosine", "euclidean"] = "cosine"  # md conf.py ADACONTRAST.DIST_TYPE
        contrast: Literal["class_aware", "nearest"] = "class_aware"  # md ADACONTRAST.CONTRAST_TYPE
        knn_after: int = 1024  # md methods/adacontrast.py: argmax pseudo-labels for the first 1024 samples

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("weight_decay", self.weight_decay, 0)
            check_at_least("queue_size", self.queue_size, 1)
            check_probability("momentum", self.momentum)
            check_positive("temperature", self.temperature)
            check_at_least("alpha", self.alpha, 0)
            check_at_least("beta", self.beta, 0)
            check_at_least("eta", self.eta, 0)
            check_at_least("num_neighbors", self.num_neighbors, 1)
            check_at_least("knn_after", self.knn_after, 0)

    presets: dict = {}  # md cfgs/{cifar100_c,imagenet_c}/adacontrast.yaml = the CIFAR-10 values

    space = {  # docs/methods.md "Search spaces"
        "lr": LogUniform(2e-5, 2e-3),  # published 2e-4 (SGD, md cfgs/*/adacontrast.yaml): a decade either side
        "momentum": Uniform(0.99, 0.9999),  # published 0.999 (md M_TEACHER.MOMENTUM, the key encoder)
        "temperature": LogUniform(0.03, 0.3),  # published 0.07 (md CONTRAST.TEMPERATURE)
        "num_neighbors": IntUniform(1, 20),  # published 10 (md ADACONTRAST.NUM_NEIGHBORS): up to twice that
    }

    def setup(self) -> None:
        self.model = SplitModel(self.model, self.info.classifier)
        self.model.requires_grad_(True)
        self.optimizer = optimizer_from_config(self.model.parameters(), self.cfg)
        self.key_encoder = make_teacher(self.model)
        # every pass goes through ``encode``, so the encoders are what is counted
        self.track(self.model.backbone)
        self.track(self.key_encoder.backbone)
        self.device_generator = device_generator(self.generator, self.device)
        self.strong = MoCoAugment()
        dim, k = self.model.head.in_features, self.cfg.queue_size
        queue = torch.randn(dim, k, generator=self.generator)  # md AdaMoCo: random initial keys and labels
        self.queue = F.normalize(queue, dim=0).to(self.device)
        self.queue_labels = torch.randint(0, self.info.num_classes, (k,), generator=self.generator).to(self.device)
        self.queue_ptr = 0
        self.bank_features = torch.empty(0, dim, device=self.device)
        self.bank_probs = torch.empty(0, self.info.num_classes, device=self.device)
        self.bank_ptr = 0
        self.samples_seen = 0

    def forward(self, x: Tensor) -> Tensor:
        x_w = random_hflip(x, self.device_generator)
        x_q, x_k = self.strong(x, self.device_generator, views=2).split(x.shape[0])  # as two calls, in one pass
        self.model.train()
        self.key_encoder.train()
        with torch.enable_grad():
            self._adapt(x_w, x_q, x_k)
        with torch.no_grad():
            self._update_bank(x_w)
        self.model.eval()
        self.key_encoder.eval()
        with torch.no_grad():
            return self.model.head(self.model.encode(x))

    def _adapt(self, x_w: Tensor, x_q: Tensor, x_k: Tensor) -> None:
        """One optimisation step on the classification, instance and diversity losses."""
        features_w = self.model.encode(x_w)
        logits_w = self.model.head(features_w)
        with torch.no_grad():
            pseudo_labels = self._pseudo_labels(features_w, logits_w)
        features_q = self.model.encode(x_q)
        logits_q = self.model.head(features_q)
        with torch.no_grad():
            ema_update_(self.key_encoder, self.model, self.cfg.momentum)
            keys = F.normalize(self.key_encoder.encode(x_k), dim=1)
        logits_ins = moco_logits(F.normalize(features_q, dim=1), keys, self.queue.clone(), self.cfg.temperature)
        self._enqueue(keys, pseudo_labels)
        loss = self.cfg.alpha * F.cross_entropy(logits_q, pseudo_labels)
        loss = loss + self.cfg.beta * self._instance_loss(logits_ins, pseudo_labels)
        if self.cfg.eta > 0:
            mean_probs = logits_q.softmax(dim=1).mean(dim=0)
            loss = loss + self.cfg.eta * (mean_probs * torch.log(mean_probs + _DIVERSITY_EPS)).sum()
        self.step(loss)

    def _instance_loss(self, logits_ins: Tensor, pseudo_labels: Tensor) -> Tensor:
        if self.cfg.contrast == "class_aware":
            return class_aware_instance_loss(logits_ins, pseudo_labels, self.queue_labels)
        target = torch.zeros(logits_ins.shape[0], dtype=torch.long, device=logits_ins.device)
        return F.cross_entropy(logits_ins, target)

    def _pseudo_labels(self, features: Tensor, logits: Tensor) -> Tensor:
        """argmax of the prediction for the first ``knn_after`` samples, then of the bank's soft kNN vote."""
        if self.samples_seen < self.cfg.knn_after:
            self.samples_seen += features.shape[0]
            return logits.argmax(dim=1)
        if self.cfg.distance == "cosine":
            distances = 1.0 - F.normalize(features.float(), dim=1) @ F.normalize(self.bank_features, dim=1).T
        else:
            distances = torch.cdist(features.float(), self.bank_features)
        k = min(self.cfg.num_neighbors, self.bank_features.shape[0])
        nearest = distances.topk(k, dim=1, largest=False).indices
        return self.bank_probs[nearest].mean(dim=1).argmax(dim=1)

    def _enqueue(self, keys: Tensor, labels: Tensor) -> None:
        """Write keys (B, D) and their pseudo-labels into the MoCo queue at its pointer (a ring of size K)."""
        k = self.cfg.queue_size
        slots = torch.arange(self.queue_ptr, self.queue_ptr + keys.shape[0], device=self.queue.device) % k
        self.queue[:, slots] = keys.T.to(self.queue.dtype)
        self.queue_labels[slots] = labels
        self.queue_ptr = (self.queue_ptr + keys.shape[0]) % k

    def _update_bank(self, x_w: Tensor) -> None:
        """Add the key encoder's features and probabilities of the weak view to the kNN bank (md update_labels)."""
        features = self.key_encoder.encode(x_w).float()
        probs = self.key_encoder.head(features).float().softmax(dim=1)
        start, end = self.bank_ptr, self.bank_ptr + features.shape[0]
        if self.bank_features.shape[0] < self.cfg.queue_size:
            self.bank_features = torch.cat([self.bank_features, features])
            self.bank_probs = torch.cat([self.bank_probs, probs])
        else:
            slots = torch.arange(start, end, device=self.bank_features.device) % self.bank_features.shape[0]
            self.bank_features[slots] = features
            self.bank_probs[slots] = probs
        self.bank_ptr = end % self.bank_features.shape[0]

    def extra_metrics(self) -> dict:
        return {"bank_size": int(self.bank_features.shape[0])}
