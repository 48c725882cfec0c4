"""UniTTA: BDN + COFA with three forwards per batch (UniTTA paper section 4; spec 3.2).

Every BatchNorm becomes a BDN layer (``unitta/methods/norm/bdn.py``) and the classifier is split off
so that COFA (``unitta/methods/cofa.py``, filter always on) can average features. Per batch x:

  forward 1 (eval):  p1 = cofa_1(f(x)) with the BBN global statistics, no update; y = argmax p1
  forward 2 (train): p2 = cofa_2(f(x)); every BBN updates with y, then normalises; the prediction layer
                     also assigns each sample to its nearest domain (spec 2.5) and decides expansion
                     (spec 2.6) and pruning (spec 2.7)
  forward 3 (train): p3 = cofa_3(f(x)); every BDN layer uses the prediction layer's domains: counts,
                     expands, updates the domain-class statistics with y, normalises per domain, prunes
  output: with ``filter``, per sample whichever of q2 and p3 has the larger maximum (ties -> q2), where
          q2 = softmax(p2) (the reference's double softmax, ``double_softmax=True``) or p2 itself
          (the filter as the spec/paper describe it, ``double_softmax=False``); else p3.

The three COFA slots carry their previous feature across batches independently. No gradients, no
optimiser. ``unitta/methods/bdn.py`` holds the BDN-only ablations, which share this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from unitta.methods.base import TTAMethod, register_method
from unitta.methods.cofa import FeatureAverager
from unitta.methods.heads import FeatureModel
from unitta.methods.norm.bdn import BalancedDomainNorm2d
from unitta.methods.norm.swap import replace_batchnorms

# Hyper-parameters of configs/adapter/<dataset>/unitta.yaml (spec 4.5). Defaults are CIFAR-10's.
UNITTA_PRESETS = {
    "cifar100": {"eta": 0.05, "gamma": 0.1},
    "imagenet": {"eta": 0.5, "gamma": 0.5, "prune": True, "max_domains": 32},
}


def check_bdn_config(cfg) -> None:
    """Range checks shared by UniTTA and the BDN ablations (bad values name the field and the range)."""
    if not 0.0 < cfg.eta <= 1.0:
        raise ValueError(f"eta={cfg.eta} must be in (0, 1]")
    if not 0.0 <= cfg.gamma <= 1.0:
        raise ValueError(f"gamma={cfg.gamma} must be in [0, 1]")
    if cfg.max_domains < 2:
        raise ValueError(f"max_domains={cfg.max_domains} must be >= 2 (one discovered and the fresh slot)")


class BDNFramework(TTAMethod):
    """The three-forward BDN procedure of spec 3.2/3.3; subclasses pick COFA and the F2/F3 filter."""

    use_cofa: bool = True
    double_softmax_default: bool = True

    def setup(self) -> None:
        cfg = self.cfg
        check_bdn_config(cfg)
        layer_name = self.info.check_bn_layer(cfg.layer if cfg.layer is not None else self.info.bdn_layer)
        self.model.requires_grad_(False)
        K = self.info.num_classes
        replaced = replace_batchnorms(
            self.model,
            lambda name, bn: BalancedDomainNorm2d(bn, K, cfg.eta, cfg.gamma, cfg.distance, cfg.clamp),
        )
        if layer_name not in replaced:
            raise ValueError(f"layer={layer_name!r} is not a BatchNorm layer of the model; found: {', '.join(replaced)}")
        self.layers: list[BalancedDomainNorm2d] = list(replaced.values())
        self.pred_layer: BalancedDomainNorm2d = replaced[layer_name]
        self.pred_layer.predicts_domain = True
        self.head: nn.Module | None = None
        if self.use_cofa:
            self.model = FeatureModel(self.model, self.info.classifier)
            self.head = self.model.head
            self.averagers = [FeatureAverager() for _ in range(3)]
        self.model.eval()
        self.last_domain_pred: Tensor | None = None

    def _scores(self, x: Tensor, slot: int) -> Tensor:
        """One forward -> probabilities: COFA-filtered (UniTTA) or softmax of the logits (BDN)."""
        out = self.model(x)
        if self.use_cofa:
            return self.averagers[slot](out, self.head, True)
        return out

    def _instruct(self, label: Tensor | None, domain: Tensor | None = None, expand: bool = False, prune: bool = False):
        for layer in self.layers:
            layer.instruct(label, domain, expand, prune)

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        # forward 1: eval, BBN global statistics, no update -> pseudo-labels
        self.model.eval()
        self._instruct(None)
        out1 = self._scores(x, 0)
        y = out1.argmax(dim=1)
        # forward 2: train, class-balanced BBN update; the prediction layer assigns domains
        self.model.train()
        self._instruct(y)
        out2 = self._scores(x, 1)
        domain = self.pred_layer.domain_pred
        expand = self.pred_layer.wants_expansion(domain)
        prune = expand and cfg.prune and self.pred_layer.num_domains >= cfg.max_domains
        # forward 3: domain-class update and per-domain normalisation in every layer
        self._instruct(y, domain, expand, prune)
        out3 = self._scores(x, 2)
        self._instruct(None)
        self.model.eval()
        self.last_domain_pred = domain
        p3 = out3 if self.use_cofa else out3.softmax(dim=-1)
        if not cfg.filter:
            return p3
        if self.use_cofa:
            # out2 is already a probability vector; the reference applies softmax to it again (README quirk 1)
            q2 = out2.softmax(dim=-1) if cfg.double_softmax else out2
        else:
            q2 = out2.softmax(dim=-1)
        keep_2 = q2.max(dim=-1).values >= p3.max(dim=-1).values
        return torch.where(keep_2[:, None], q2, p3)

    def num_domains(self) -> int:
        """Discovered domains D - 1 (the last slot is the always-fresh source copy)."""
        return self.pred_layer.num_domains - 1

    def extra_metrics(self) -> dict:
        return {"domain_counts": self.pred_layer.count[:-1].tolist()}


@register_method("unitta")
class UniTTA(BDNFramework):
    """UniTTA (reference adapter ``unitta``, spec 3.2): BDN + COFA, three forwards per batch."""

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # ETA, configs/adapter/cifar10/unitta.yaml (TRIBE's rule, not the paper's 5e-4*K)
        gamma: float = 0.0  # GAMMA (used by the embedded Balanced BN), same file
        distance: Literal["w2", "kl"] = "w2"  # DIST_METRIC default w2; the paper describes symmetric KL
        filter: bool = True  # FILT: the forward-2/forward-3 max-probability filter
        layer: str | None = None  # LAYER: domain-prediction BN layer; None = ModelInfo.bdn_layer
        prune: bool = False  # PRUNE
        max_domains: int = 64  # MAX_DOMAINS
        clamp: bool = False  # False = the reference's unclamped BDN EMA (spec 2.4); True = TRIBE's 1/n clamp
        double_softmax: bool = True  # the reference's softmax of forward 2's probabilities in the filter

    presets = UNITTA_PRESETS
