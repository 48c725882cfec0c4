"""BN-alpha: normalise with a mix of source and test-batch statistics (Schneider et al., NeurIPS'20).

Every BatchNorm2d becomes ``norm/alpha_bn.py``'s ``AlphaBatchNorm``: mean and variance
(1 - alpha) * source + alpha * test batch (the batch variance unbiased, as the reference). Nothing is trained;
the model stays in eval mode; the scores are the logits. alpha = 0.1 (the mariodoebler benchmark's ``BN.ALPHA``
in ``conf.py`` and every ``cfgs/*/norm_alpha.yaml``, its "BN-0.1"), the same for every dataset family.

Deviations:
- From the reference: it runs BN-alpha at ``TEST.BATCH_SIZE 1`` on every dataset; here the batch size is the
  cell's (``batch_size``; set it to 1 to match). BatchNorm1d layers keep their source statistics, as the
  reference replaces only BatchNorm2d. A batch with one value per channel uses the source statistics.
- From the paper: Schneider et al. tune the prior strength N per model and report alpha = n / (N + n) for
  several n; 0.1 is the reference's fixed choice.

BN-alpha is defined on BatchNorm statistics: a model without BatchNorm2d layers is refused with the model's
normalisation kind in the message (``norm_kinds``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from unitta.methods.norm.alpha_bn import AlphaBatchNorm
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_probability
from unitta.nn.batchnorm import set_submodule
from unitta.nn.norms import norm_kind
from unitta.search_dimensions import LogUniform

__all__ = ["BNAlpha"]


@register_method("bn_alpha")
class BNAlpha(TTAMethod):
    """BN-alpha (Schneider et al., NeurIPS'20): BatchNorm statistics (1 - alpha) source + alpha test batch."""

    version = 1

    @dataclass(frozen=True)
    class Config:
        alpha: float = 0.1  # reference conf.py BN.ALPHA and cfgs/*/norm_alpha.yaml

        def __post_init__(self) -> None:
            check_probability("alpha", self.alpha)

    space = {  # docs/methods.md "Search spaces"
        # published 0.1 (BN.ALPHA): a decade below it (nearly the source statistics) up to 1, plain batch
        # statistics (``bn``); log scale, as alpha = n / (N + n) for a prior strength N (Schneider et al. NeurIPS'20)
        "alpha": LogUniform(0.01, 1.0),
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        layers = [(name, m) for name, m in self.model.named_modules() if isinstance(m, nn.BatchNorm2d)]
        if not layers:
            raise ValueError(
                f"bn_alpha mixes BatchNorm statistics, but model {self.info.name!r} has no BatchNorm2d layer "
                f"(its normalisation kind is {norm_kind(self.model)!r}); use a BatchNorm model"
            )
        for name, bn in layers:
            set_submodule(self.model, name, AlphaBatchNorm(bn, self.cfg.alpha, self.device_paths))
        self.model.eval()

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)
