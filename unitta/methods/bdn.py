"""BDN-only ablations of UniTTA: three forwards without COFA (reference adapter ``unitta_bdn``; docs/unitta.md).

Forward 1 logits -> pseudo-labels; forward 2 (Balanced BN update, domain prediction) and forward 3
(BDN update, per-domain normalisation) as in ``unitta/methods/unitta.py``; the output is softmax of
forward 3, or with ``filter`` per sample whichever of softmax(forward 2) and softmax(forward 3) is more
confident (single softmax: the BDN adapter has no double-softmax quirk). The reference hard-codes the
embedded Balanced BN's gamma to 0 for this adapter; ``gamma`` is kept as an override.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from unitta.methods.parts.bdn_framework import BDNFramework, check_bdn_config
from unitta.methods.parts.registry import register_method

# the reference's configs/adapter/<dataset>/unitta_bdn.yaml; GAMMA there is ignored (hard-coded 0).
BDN_PRESETS = {
    "cifar100": {"eta": 0.05},
    "imagenet": {"eta": 0.5, "prune": True, "max_domains": 32},
}


@register_method("bdn")
class BDN(BDNFramework):
    """BDN with the forward-2/forward-3 filter (reference ``unitta_bdn``)."""

    use_cofa = False

    @dataclass(frozen=True)
    class Config:
        eta: float = 0.01  # ETA, configs/adapter/cifar10/unitta_bdn.yaml
        gamma: float = 0.0  # hard-coded 0 in the reference BDN adapter
        distance: Literal["w2", "kl"] = "w2"  # DIST_METRIC default w2
        filter: bool = True  # FILT
        layer: str | None = None  # LAYER; None = ModelInfo.bdn_layer
        prune: bool = False  # PRUNE
        max_domains: int = 64  # MAX_DOMAINS
        clamp: bool = False  # False = unclamped EMA as the reference (docs/unitta.md)

        def __post_init__(self) -> None:
            check_bdn_config(self)

    presets = BDN_PRESETS


@register_method("bdn_nofilter")
class BDNNoFilter(BDN):
    """BDN without the forward-2/forward-3 filter (reference ``unitta_bdn_no_filt``, FILT False)."""

    @dataclass(frozen=True)
    class Config(BDN.Config):
        filter: bool = False  # configs/adapter/cifar10/unitta_bdn_no_filt.yaml
