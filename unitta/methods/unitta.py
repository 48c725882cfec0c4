"""UniTTA: BDN + COFA with three forwards per batch (UniTTA paper section 4; docs/unitta.md "Methods").

Every BatchNorm becomes a BDN layer (``unitta/methods/norm/bdn_layer.py``) and the classifier is split off
so that COFA (``unitta/methods/cofa.py``, filter always on) can average features. Per batch x:

  forward 1 (eval):  p1 = cofa_1(f(x)) with the BBN global statistics, no update; y = argmax p1
  forward 2 (train): p2 = cofa_2(f(x)); every BBN updates with y, then normalises; the prediction layer
                     also assigns each sample to its nearest domain (paper section 4.2, domain
                     prediction) and decides expansion and pruning (docs/unitta.md "Layers")
  forward 3 (train): p3 = cofa_3(f(x)); every BDN layer uses the prediction layer's domains: counts,
                     expands, updates the domain-class statistics with y, normalises per domain, prunes
  output: with ``filter``, per sample whichever of q2 and p3 has the larger maximum (ties -> q2), where
          q2 = softmax(p2) (the reference's double softmax, ``double_softmax=True``) or p2 itself
          (the filter as the paper describes it, ``double_softmax=False``); else p3.

The three COFA slots carry their previous feature across batches independently. No gradients, no
optimiser. The procedure is ``unitta/methods/parts/bdn_framework.py``'s, shared with the BDN-only ablations of
``unitta/methods/bdn.py``; this module holds UniTTA's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from unitta.methods.parts.bdn_framework import BDNFramework, check_bdn_config
from unitta.methods.parts.registry import register_method

# Hyper-parameters of the reference's configs/adapter/<dataset>/unitta.yaml. Defaults are CIFAR-10's.
UNITTA_PRESETS = {
    "cifar100": {"eta": 0.05, "gamma": 0.1},
    "imagenet": {"eta": 0.5, "gamma": 0.5, "prune": True, "max_domains": 32},
}


@register_method("unitta")
class UniTTA(BDNFramework):
    """UniTTA (reference adapter ``unitta``; paper section 4): BDN + COFA, three forwards per batch."""

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # ETA, configs/adapter/cifar10/unitta.yaml (TRIBE's rule, not the paper's 5e-4*K)
        gamma: float = 0.0  # GAMMA (used by the embedded Balanced BN), same file
        distance: Literal["w2", "kl"] = "w2"  # DIST_METRIC default w2; the paper describes symmetric KL
        filter: bool = True  # FILT: the forward-2/forward-3 max-probability filter
        layer: str | None = None  # LAYER: domain-prediction BN layer; None = ModelInfo.bdn_layer
        prune: bool = False  # PRUNE
        max_domains: int = 64  # MAX_DOMAINS
        clamp: bool = False  # False = the reference's unclamped BDN EMA (docs/unitta.md); True = TRIBE's 1/n clamp
        double_softmax: bool = True  # the reference's softmax of forward 2's probabilities in the filter

        def __post_init__(self) -> None:
            check_bdn_config(self)

    presets = UNITTA_PRESETS
