"""SAR: sharpness-aware and reliable entropy minimisation with model recovery (Niu et al., ICLR'23, sec. 4).

What adapts: the affine weight and bias of the normalisation layers (BatchNorm with test-batch statistics,
LayerNorm, GroupNorm; ``norm/affine.py``) except those of the top of the network, which SAR leaves alone (paper
sec. 5; the mariodoebler TTA benchmark's ``collect_params``): every layer whose dotted name contains ``layer4``
(ResNet-50's last stage), ``blocks.9``, ``blocks.10``, ``blocks.11`` (timm ViT-B's last three blocks) or
``norm.``, or is named ``norm`` (timm's final norm), and, for torchvision's ViT, the same blocks
``encoder_layer_9``..``encoder_layer_11`` and the final ``encoder.ln``. The CIFAR models have none of these.

Per batch (SAR's ``forward_and_adapt``):

1. logits z = f(x; w) (returned); reliable samples H(z) < E_0 = 0.4 ln K (eq. 2); L1 = mean entropy of the
   reliable ones; back-propagate; SAM ascent w -> w + e (``sam.py``, rho 0.05);
2. at w + e, entropies H2 of the same batch; the samples reliable in step 1 whose H2 < E_0 give
   L2 = their mean H2; back-propagate; back to w and an SGD step (momentum 0.9, no Nesterov) with that gradient
   (eq. 4-5). When no sample is reliable the gradients are zero and SGD still applies its momentum, as the
   reference;
3. recovery (sec. 4, "model recovery"): when L2 had samples, e <- 0.9 e + 0.1 L2 (the first value starts e);
   if e < ``reset_constant`` (0.2), the model returns to its initial state and e is forgotten (``snapshot.py``).
   The SGD momentum is kept, as in SAR's code and the reference: their reset reloads the state of the SAM
   wrapper, which does not hold the base optimiser's momentum buffers.

Hyper-parameters (reference ``classification/cfgs/*/sar.yaml``, ``conf.py``, ``methods/sar.py``): SGD lr 1e-3 on
CIFAR-10/100-C, 2.5e-4 on ImageNet-C, 1e-3 for ViT/Swin models (model names containing ``vit_`` or ``swin_``,
the reference's transformer override); momentum 0.9; rho 0.05; E_0 = 0.4 ln K; e_m = 0.2.

Deviations:
- From the paper: it uses lr 2.5e-4 x (B/64) on ImageNet with B = 64 (the same) and does not evaluate CIFAR;
  the CIFAR learning rate is the reference's.
- From the reference: reliable samples are masks over the batch, not index selections (same losses up to
  summation order; an empty selection gives loss 0 with zero gradient where the reference's mean is NaN with
  zero gradient). L2 and its sample count are read on the host once per batch, as the reference's
  ``loss_second.item()``; the recovery is a host-side decision. A batch of one is adapted on like any other
  (the reference's default window of 1 does the same).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.entropy_filter import entropy_margin
from unitta.methods.parts.losses import masked_mean, softmax_entropy
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.sam import SAM, SAM_RHO
from unitta.methods.parts.search_space import ADAM_LR, CONFIDENCE_MARGIN
from unitta.methods.parts.snapshot import Snapshot
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive, check_probability
from unitta.nn.norms import NORM_KINDS
from unitta.search_dimensions import LogUniform, Uniform

__all__ = ["SAR", "sar_frozen_layers"]

# Layers SAR leaves out, by substring of the dotted name (reference methods/sar.py collect_params; timm names),
# plus torchvision ViT's names for the same blocks.
FROZEN_SUBSTRINGS = (
    "layer4", "blocks.9", "blocks.10", "blocks.11", "norm.",
    "encoder_layer_9", "encoder_layer_10", "encoder_layer_11",
)  # fmt: skip
FROZEN_NAMES = ("norm", "encoder.ln")
TRANSFORMER_MARKERS = ("vit_", "swin_")  # reference sar.setup_optimizer: "vit_"/"swin_" in MODEL.ARCH


def sar_frozen_layers(model: nn.Module) -> tuple[str, ...]:
    """Dotted names of the modules whose normalisation parameters SAR does not adapt (module docstring)."""
    return tuple(
        name
        for name, _ in model.named_modules()
        if name and (name in FROZEN_NAMES or any(part in name for part in FROZEN_SUBSTRINGS))
    )


@register_method("sar")
class SAR(TTAMethod):
    """SAR (Niu et al., ICLR'23): reliable entropy, SAM updates of normalisation affine parameters, recovery."""

    version = 1
    norm_kinds = NORM_KINDS

    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3  # reference cfgs/cifar10_c/sar.yaml OPTIM.LR (SGD inside SAM)
        transformer_lr: float = 1e-3  # reference sar.setup_optimizer: lr 0.001 for vit_/swin_ architectures
        momentum: float = 0.9  # reference conf.py OPTIM.MOMENTUM; SAR code SGD momentum 0.9
        rho: float = SAM_RHO  # SAM neighbourhood (SAR code / reference default 0.05)
        e_factor: float = 0.4  # E_0 = 0.4 ln K: SAR eq. 2, reference sar.py margin_e0
        reset_constant: float = 0.2  # e_m: reference conf.py SAR.RESET_CONSTANT_EM; SAR paper sec. 5
        ema_momentum: float = 0.9  # loss EMA: reference sar.py update_ema alpha 0.9

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_positive("transformer_lr", self.transformer_lr)
            check_probability("momentum", self.momentum)
            check_at_least("rho", self.rho, 0.0)
            check_interval("e_factor", self.e_factor, 0.0, 1.0, open_low=True)
            check_at_least("reset_constant", self.reset_constant, 0.0)
            check_probability("ema_momentum", self.ema_momentum)

    presets = {
        "imagenet": {"lr": 2.5e-4},  # reference cfgs/imagenet_c/sar.yaml OPTIM.LR; SAR paper sec. 5 (B = 64)
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (cfgs/cifar10_c/sar.yaml), 2.5e-4 (ImageNet; SGD in both)
        "rho": LogUniform(0.01, 0.5),  # published 0.05 (SAR code): SAM's (Foret et al. ICLR'21) rho grid 0.01-0.5
        "e_factor": CONFIDENCE_MARGIN,  # published 0.4 (SAR eq. 2)
        "reset_constant": Uniform(0.05, 0.4),  # published e_m = 0.2 (SAR paper sec. 5): a factor 4 / 2 around it
    }

    def setup(self) -> None:
        params = adapt_norm_affine(self.model, exclude=sar_frozen_layers(self.model))
        if not params:
            raise ValueError(
                f"sar: model {self.info.name!r} has no normalisation layer with affine parameters outside the "
                "layers SAR leaves out (layer4, blocks.9-11, norm); nothing to adapt"
            )
        transformer = any(marker in self.info.name for marker in TRANSFORMER_MARKERS)
        lr = self.cfg.transformer_lr if transformer else self.cfg.lr
        self.optimizer = torch.optim.SGD(params, lr=lr, momentum=self.cfg.momentum)  # SAR: no Nesterov, no decay
        self.sam = SAM(params, self.optimizer, rho=self.cfg.rho)
        self.snapshot = Snapshot(self.model, None)  # the model only: the momentum survives a recovery (docstring)
        self.e_margin = entropy_margin(self.info.num_classes, self.cfg.e_factor)
        self.ema: float | None = None
        self.recoveries = 0

    def forward(self, x: Tensor) -> Tensor:
        self.sam.zero_grad()
        with torch.enable_grad():
            logits = self.model(x)
            entropy = softmax_entropy(logits)
            reliable = entropy.detach() < self.e_margin
            self.backward(masked_mean(entropy, reliable))
        self.sam.ascend()
        with torch.enable_grad():
            entropy2 = softmax_entropy(self.model(x))
            reliable2 = reliable & (entropy2.detach() < self.e_margin)
            loss2 = masked_mean(entropy2, reliable2)
            self.backward(loss2)
        self.sam.descend()
        self._recover_if_collapsed(loss2.detach(), reliable2.sum())
        return logits.detach()

    def _recover_if_collapsed(self, loss: Tensor, count: Tensor) -> None:
        value, n = torch.stack([loss.float(), count.float()]).tolist()  # one host read per batch
        if n > 0:
            m = self.cfg.ema_momentum
            self.ema = value if self.ema is None else m * self.ema + (1.0 - m) * value
        if self.ema is not None and self.ema < self.cfg.reset_constant:
            self.snapshot.restore()
            self.ema = None
            self.recoveries += 1

    def own_resets(self) -> int:
        return self.recoveries

    def extra_metrics(self) -> dict[str, int]:
        return {"sar_recoveries": self.recoveries}
