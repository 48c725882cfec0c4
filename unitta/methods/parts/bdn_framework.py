"""The three-forward BDN procedure of UniTTA (paper section 4; docs/unitta.md "Methods"), shared by UniTTA
(``unitta/methods/unitta.py``, with COFA) and the BDN-only ablations (``unitta/methods/bdn.py``): every BatchNorm
becomes a BDN layer (``unitta/methods/norm/bdn_layer.py``); forward 1 gives pseudo-labels, forward 2 updates the
class-balanced statistics and predicts domains, forward 3 updates the domain-class statistics and normalises per
domain; the F2/F3 filter picks the more confident of forwards 2 and 3. A subclass holds its Config and picks COFA
(``use_cofa``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unitta.methods.norm.bdn_layer import BalancedDomainNorm2d
from unitta.methods.norm.groups import ClassGroups, SlotGroups
from unitta.methods.parts.feature_averaging import FeatureAverager
from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.search_space import BN_EMA, BN_GAMMA
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_probability
from unitta.nn.batchnorm import replace_batchnorms

__all__ = ["BDNFramework", "check_bdn_config"]


def check_bdn_config(cfg) -> None:
    """Range checks shared by the Configs of UniTTA and the BDN ablations (called in ``__post_init__``)."""
    check_interval("eta", cfg.eta, 0.0, 1.0, open_low=True)
    check_probability("gamma", cfg.gamma)
    check_at_least("max_domains", cfg.max_domains, 2, "one discovered domain and the fresh slot")


class BDNFramework(TTAMethod):
    """The three-forward BDN procedure (docs/unitta.md "Methods"); subclasses pick COFA and the F2/F3 filter."""

    use_cofa: bool = True

    def setup(self) -> None:
        cfg = self.cfg
        layer_name = self.info.check_bn_layer(cfg.layer if cfg.layer is not None else self.info.bdn_layer)
        self.model.requires_grad_(False)
        K = self.info.num_classes
        replaced = replace_batchnorms(
            self.model,
            lambda name, bn: BalancedDomainNorm2d(
                bn, K, cfg.eta, cfg.gamma, cfg.distance, cfg.clamp, self.device_paths
            ),
        )
        if layer_name not in replaced:
            found = ", ".join(replaced)
            raise ValueError(f"layer={layer_name!r} is not a BatchNorm layer of the model; found: {found}")
        self.layers: list[BalancedDomainNorm2d] = list(replaced.values())
        self.pred_layer: BalancedDomainNorm2d = replaced[layer_name]
        self.pred_layer.predicts_domain = True
        if cfg.prune:  # pruning keeps D <= max_domains, so no layer ever needs more slots than that
            for layer in self.layers:
                layer.domain_limit = cfg.max_domains
        self.head: nn.Module | None = None
        if self.use_cofa:
            self.model = FeatureModel(self.model, self.info.classifier)
            self.head = self.model.head
            self.averagers = [FeatureAverager() for _ in range(3)]
        self.model.eval()
        self.last_domain_pred: Tensor | None = None

    scores = "probabilities"

    space = {  # docs/methods.md "Search spaces"
        "eta": BN_EMA,  # published 0.01 / 0.05 / 0.5 (configs/adapter/*/unitta.yaml ETA, as presets)
        "gamma": BN_GAMMA,  # published 0 / 0.1 / 0.5 (GAMMA, same files)
    }

    def predict_scores(self, x: Tensor) -> Tensor:
        """Non-adapting prediction: ``forward``'s first pass (evaluation mode, the balanced BN's global
        statistics, no update), without COFA's averaging, which carries state from batch to batch."""
        self._instruct(None)
        out = self.model(x)
        return (self.head(out) if self.use_cofa else out).softmax(dim=-1)

    def _scores(self, x: Tensor, slot: int) -> Tensor:
        """One forward -> probabilities: COFA-filtered (UniTTA) or softmax of the logits (BDN)."""
        out = self.model(x)
        if self.use_cofa:
            return self.averagers[slot](out, self.head, True)
        return out

    def _instruct(self, label=None, domain=None, expand: bool | Tensor = False, prune: bool | Tensor = False):
        for layer in self.layers:
            layer.instruct(label, domain, expand, prune)

    def _reserve_slots(self) -> None:
        """Room for one more domain slot in every layer; reads D from the device (once for all layers)
        only when the host's bound of D reaches the slot capacity (norm/bdn_layer.py "GPU efficiency")."""
        if any(layer.needs_room() for layer in self.layers):
            d = self.pred_layer.num_domains
            for layer in self.layers:
                layer.reserve(d)

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        # forward 1: eval, BBN global statistics, no update -> pseudo-labels
        self.model.eval()
        self._instruct(None)
        out1 = self._scores(x, 0)
        y = out1.argmax(dim=1)
        # forward 2: train, class-balanced BBN update; the prediction layer assigns domains. The groupings
        # are built once per batch for all layers, and every decision stays on the device (no host sync)
        self.model.train()
        K, dtype = self.info.num_classes, x.dtype
        self._instruct(ClassGroups(y, K, cfg.eta, dtype))
        out2 = self._scores(x, 1)
        domain = self.pred_layer.domain_pred
        expand = self.pred_layer.wants_expansion(domain)
        prune = expand & (self.pred_layer.num_active >= cfg.max_domains) if cfg.prune else False
        # forward 3: domain-class update and per-domain normalisation in every layer
        self._reserve_slots()
        slots = SlotGroups(domain, y, self.pred_layer.capacity, K, cfg.eta, cfg.clamp, dtype)
        self._instruct(y, slots, expand.long(), prune)  # D += expand, as an integer in every layer
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
        keep_2 = torch.amax(q2, dim=-1, keepdim=True) >= torch.amax(p3, dim=-1, keepdim=True)
        return torch.where(keep_2, q2, p3)

    def num_domains(self) -> int:
        """Discovered domains D - 1 (the last slot is the always-fresh source copy)."""
        return self.pred_layer.num_domains - 1

    def extra_metrics(self) -> dict:
        return {"domain_counts": self.pred_layer.count[:-1].tolist()}
