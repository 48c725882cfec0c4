"""SHOT, online: source hypothesis transfer by information maximisation and self-supervised pseudo-labels (Liang,
Hu, Feng, "Do We Really Need to Access the Source Data? Source Hypothesis Transfer for Unsupervised Domain
Adaptation", ICML 2020), in the online form that LINs-lab/ttab (``model_adaptation/shot.py``, ttab below) runs as
a test-time adaptation baseline.

The classifier (hypothesis) is frozen; every other parameter of the network (the feature extractor, convolutions
and normalisation affine parameters alike) adapts by one SGD step per batch on

    L = beta * CE(z[reliable], argmax z[reliable])                       (self-supervised pseudo-labels)
        + w_im * ( mean_i H(p_i) + sum_c pbar_c log(pbar_c + 1e-5) )    (information maximisation, paper eq. 2-3)

with p_i = softmax(z_i), pbar the batch's mean prediction (its negative entropy: the diversity term), and
"reliable" the samples whose top probability exceeds ``threshold`` (ttab's online pseudo-labels; SHOT's offline
clustering of the whole target set into pseudo-labels, paper eq. 4-6, needs the whole stream and is not run).
BatchNorm normalises with the test batch's statistics. The logits returned are the step's own forward, before the
step (ttab's ``yhat`` of its one step).

Hyper-parameters (the same on every dataset family, as ttab runs them): SGD lr 1e-3 (momentum 0.9, Nesterov;
ttab ``parameters.py`` ``--lr``, ``configs/algorithms.py`` ``shot`` optimizer SGD), beta 0.3 (``cls_par``: the
SHOT paper's beta), w_im 1.0 (``ent_par``), threshold 0.9 (``threshold_shot``), one step per batch
(``--n_train_steps`` 1).

Deviations:
- DEVIATION(empty-selection): a batch without a reliable sample gives the pseudo-label term 0 with zero gradient
  (``losses.masked_mean``); ttab's cross-entropy over the empty selection is NaN with zero gradient, so the step
  is the same, only the logged loss differs. No sample is selected by index: no data-dependent shape.
- DEVIATION(eval-mode): the model stays in eval mode with BatchNorm on test-batch statistics
  (``norm/batch_stats.py``); ttab's train mode differs only for dropout (none in the zoo's CNNs; the zoo's ViT has
  dropout rate 0) and for the running statistics it updates but never reads.
- DEVIATION(classifier-by-name): the frozen classifier is the model's ``ModelInfo.classifier`` layer; ttab freezes
  the top-level children named ``fc``, ``classifier`` or ``head`` (the same layer on the zoo's models).
- From the paper: offline SHOT trains for epochs over the whole target set with clustered pseudo-labels
  (yuyongcan/Benchmark-TTA runs that form, ``src/methods/shot.py``); online SHOT sees each batch once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.parts.losses import masked_mean, softmax_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive
from unitta.nn.batchnorm import get_submodule, replace_batchnorms
from unitta.search_dimensions import Uniform

__all__ = ["SHOT", "shot_loss_terms"]

DIVERSITY_EPS = 1e-5  # ttab shot.py: torch.log(msoftmax + 1e-5) (SHOT's code: args.epsilon)


@register_method("shot")
class SHOT(TTAMethod):
    """Online SHOT (Liang et al., ICML'20; as ttab): information maximisation + confident pseudo-labels, frozen head."""

    version = 1
    whole_step = True  # compile: true captures forward, loss, backward and update as one graph
    norm_kinds = ("batch", "layer", "group")  # the whole feature extractor adapts, whatever its normalisation

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "sgd"  # ttab configs/algorithms.py shot: SGD
        lr: float = 1e-3  # ttab parameters.py --lr (its online grid: 5e-4, 1e-3, 5e-3)
        pseudo_label_weight: float = 0.3  # ttab cls_par = the SHOT paper's beta
        im_weight: float = 1.0  # ttab ent_par (information maximisation)
        threshold: float = 0.9  # ttab threshold_shot: top probability of a reliable pseudo-label
        steps: int = 1  # ttab --n_train_steps
        min_update_batch: int = 1  # ttab adapts on every batch

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_interval("pseudo_label_weight", self.pseudo_label_weight, 0.0, 100.0)
            check_interval("im_weight", self.im_weight, 0.0, 100.0)
            check_interval("threshold", self.threshold, 0.0, 1.0)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {}  # ttab runs SHOT with the same values on CIFAR-10/100 and ImageNet

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (ttab, SGD; its online grid 5e-4 to 5e-3): a decade either side
        "pseudo_label_weight": Uniform(0.0, 0.6),  # published 0.3 (SHOT paper, ttab), 0.1 (Office-Home); 0 = SHOT-IM
        "threshold": Uniform(0.5, 0.99),  # published 0.9 (ttab threshold_shot)
    }

    def setup(self) -> None:
        replace_batchnorms(self.model, lambda name, bn: BatchStatsNorm(bn))
        self.model.requires_grad_(True)
        get_submodule(self.model, self.info.classifier).requires_grad_(False)  # the source hypothesis stays
        self.model.eval()
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = optimizer_from_config(params, self.cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)

    def loss(self, x: Tensor, logits: Tensor) -> Tensor:
        pseudo_label, entropy, diversity = shot_loss_terms(logits, self.cfg.threshold)
        return self.cfg.pseudo_label_weight * pseudo_label + self.cfg.im_weight * (entropy + diversity)


def shot_loss_terms(logits: Tensor, threshold: float) -> tuple[Tensor, Tensor, Tensor]:
    """SHOT's three loss terms on (B, K) logits (module docstring), unweighted scalars:

    - the mean cross-entropy to the hard pseudo-label over the samples with max softmax > ``threshold`` (0 when
      none is);
    - the mean prediction entropy, mean_i H(p_i);
    - the diversity term sum_c pbar_c log(pbar_c + 1e-5), the negative entropy of the mean prediction."""
    probs = logits.softmax(dim=1)
    confidence, labels = probs.detach().max(dim=1)
    pseudo_label = masked_mean(F.cross_entropy(logits, labels, reduction="none"), confidence > threshold)
    entropy = softmax_entropy(logits).mean()
    mean_probs = probs.mean(dim=0)
    diversity = torch.sum(mean_probs * torch.log(mean_probs + DIVERSITY_EPS))
    return pseudo_label, entropy, diversity
