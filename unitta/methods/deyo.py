"""DeYO: destroy your object (Lee et al., ICLR'24).

"Entropy is not enough for test-time adaptation: from the perspective of disentangled factors". The normalisation
layers' affine parameters adapt (BatchNorm with the current batch's statistics; LayerNorm/GroupNorm affine only;
the layers of the last stage are left out, see ``EXCLUDE``) by one step per batch on a filtered, reweighted
entropy (paper sec. 4; docs/methods.md "DeYO"):

    z = f(x);  H_i = H(softmax(z_i))
    S1 = { i : H_i < margin ln K }                               entropy filter (margin 0.5)
    x'_i = patch_shuffle(x_i), i in S1                           4 x 4 patches in a random order per image
    PLPD_i = p_i[y_i] - p'_i[y_i],  y_i = argmax p_i,  p' = softmax(f(x'))   (no gradient through x')
    S2 = { i in S1 : PLPD_i > tau_PLPD }                         tau_PLPD = 0.2
    L = mean_{i in S2} H_i (exp(-(H_i - e0 ln K)) + exp(PLPD_i))   e0 = 0.4, both weights detached

and no step when S1 or S2 is empty. The prediction returned is z (computed before the step). This follows the
mariodoebler TTA benchmark (mariodoebler/test-time-adaptation @ 8b2ed63, ``classification/methods/deyo.py``):
same filters, weights, parameter selection and order of operations. The shuffled forward sees only the
images of S1, so BatchNorm normalises it with S1's statistics, as in the reference.

Hyper-parameters (reference ``conf.py`` ``DEYO.*``, ``EATA.MARGIN_E0``; ``cfgs/*/deyo.yaml``):
CIFAR-10/100: Adam lr 1e-3; ImageNet: SGD lr 2.5e-4 (momentum 0.9, Nesterov). margin 0.5, e0 0.4, PLPD 0.2,
reweighting by entropy and PLPD on, augmentation 'patch' with 4 x 4 patches ('occ': a 112-pixel square at
(56, 56) filled with the image's channel means; 'pixel': one random pixel permutation for the batch).

Deviations:
- From the reference: on the CUDA path one host read per adapted batch (is S2 empty: no step), where the
  reference's ``len(...) == 0`` tests make two: with S1 empty the shuffled forward still runs (its draws are
  consumed, its output unused; S2 is then empty and no step is taken), since knowing S1 empty before it would be
  a second read (one read cannot serve both: S2 needs the shuffled forward), and a step cannot be skipped
  without a read (Adam and momentum SGD move the parameters on a zero gradient). On the CPU path (host memory,
  reads free) S1 is read first and the method returns before the shuffled forward, as the reference does.
  The shuffled forward sees every image, with the batch statistics of S1's
  alone (``norm.row_mask.masked_rows``), and S1 and S2 are masks: the same values as the reference's forward of
  S1's images, without a data-dependent shape. The shuffles are drawn from the method's torch.Generator (on the
  CUDA path a device generator seeded from it; the reference: the global RNG), so a seed gives other (equally
  distributed) shuffles.
  A batch of one is adapted on, as the reference does with ``TEST.WINDOW_LENGTH`` 1.
- From the paper: the paper tunes the PLPD threshold per model and benchmark and reports mainly ResNet-50-GN
  and ViT-B/16 on ImageNet; the reference's single set of values above is used on every dataset family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.norm.row_mask import masked_rows
from unitta.methods.parts.augment import patch_shuffle
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.losses import masked_mean, softmax_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR, CONFIDENCE_MARGIN
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_interval, check_positive
from unitta.search_dimensions import Uniform

__all__ = ["DeYO", "EXCLUDE"]

# Layers whose affine parameters DeYO leaves out (reference ``DeYO.collect_params``): a module whose name
# contains one of these (ResNet's last stage, ViT-B's blocks 9-11, the final norm's children) or is "norm".
EXCLUDE = ("layer4", "blocks.9", "blocks.10", "blocks.11", "norm.")


@register_method("deyo")
class DeYO(TTAMethod):
    """DeYO (Lee et al., ICLR'24): entropy + PLPD filtering under patch shuffling, reweighted entropy."""

    version = 3  # 2: every image shuffled, S1 a mask (other draws); one host read. 3: CPU path returns on an empty S1
    norm_kinds = ("batch", "layer", "group")

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # md cfgs/cifar10_c/deyo.yaml OPTIM.METHOD
        lr: float = 1e-3  # md cfgs/cifar10_c/deyo.yaml OPTIM.LR
        margin: float = 0.5  # md conf.py DEYO.MARGIN (x ln K)
        margin_e0: float = 0.4  # md conf.py EATA.MARGIN_E0 (x ln K), the entropy reweighting's e0
        plpd_threshold: float = 0.2  # md conf.py DEYO.PLPD
        reweight_ent: bool = True  # md conf.py DEYO.REWEIGHT_ENT
        reweight_plpd: bool = True  # md conf.py DEYO.REWEIGHT_PLPD
        aug_type: Literal["patch", "occ", "pixel"] = "patch"  # md conf.py DEYO.AUG_TYPE
        patch_len: int = 4  # md conf.py DEYO.PATCH_LEN
        occlusion_size: int = 112  # md conf.py DEYO.OCCLUSION_SIZE
        row_start: int = 56  # md conf.py DEYO.ROW_START
        column_start: int = 56  # md conf.py DEYO.COLUMN_START
        steps: int = 1  # md OPTIM.STEPS
        min_update_batch: int = 1  # md adapts on every batch, a batch of one included

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_positive("margin", self.margin)
            check_interval("margin_e0", self.margin_e0, 0.0, 10.0)
            check_interval("plpd_threshold", self.plpd_threshold, -1.0, 1.0)
            check_at_least("patch_len", self.patch_len, 1)
            check_at_least("occlusion_size", self.occlusion_size, 0)
            check_at_least("row_start", self.row_start, 0)
            check_at_least("column_start", self.column_start, 0)
            check_at_least("steps", self.steps, 1)
            check_at_least("min_update_batch", self.min_update_batch, 1)

    presets = {
        "imagenet": {"optimizer": "sgd", "lr": 2.5e-4},  # md cfgs/imagenet_c/deyo.yaml
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (CIFAR, Adam), 2.5e-4 (ImageNet, SGD): md cfgs/*/deyo.yaml
        "margin": Uniform(0.3, 0.7),  # published 0.5 (md DEYO.MARGIN, x ln K)
        "margin_e0": CONFIDENCE_MARGIN,  # published 0.4 (md EATA.MARGIN_E0, x ln K)
        "plpd_threshold": Uniform(0.0, 0.5),  # published 0.2 (md DEYO.PLPD)
    }

    def setup(self) -> None:
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model, exclude=excluded(self.model)), self.cfg)
        log_k = math.log(self.info.num_classes)
        self.entropy_margin = self.cfg.margin * log_k
        self.e0 = self.cfg.margin_e0 * log_k
        self.kept_last: Tensor | int = 0  # |S2| of the last adapted batch (a tensor: no host read)
        # the augmentation's draws: where the images are on the CUDA path (no host-to-device copy)
        # on the CUDA path the one host read per batch is S2's; S1's emptiness cannot be known before the shuffled
        # forward without a second read (module docstring), on the CPU path it is read first, as the reference does
        self.one_read = self.device_paths.cuda(self.device)
        self.aug_generator = (
            device_generator(self.generator, self.device) if self.device_paths.cuda(self.device) else self.generator
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.self_train(x, self.loss)  # loss None: every sample filtered out, the reference skips the step

    def loss(self, x: Tensor, logits: Tensor) -> Tensor | None:
        """The filtered, reweighted entropy of the module docstring; None when S1 or S2 is empty."""
        entropy = softmax_entropy(logits)
        first = entropy < self.entropy_margin  # S1, a mask: every row goes on, so that no shape depends on it
        if not self.one_read and not bool(first.any()):  # host memory: free; the reference returns before shuffling
            self.kept_last = first.sum()
            return None
        with torch.no_grad(), masked_rows(self.model, first):  # batch statistics of S1, as a forward of S1 alone
            probs_shuffled = self.model(self.destroy(x.detach())).softmax(dim=1)
        probs = logits.softmax(dim=1)
        label = probs.argmax(dim=1, keepdim=True)
        plpd = (probs.gather(1, label) - probs_shuffled.gather(1, label)).squeeze(1)
        second = first & (plpd > self.cfg.plpd_threshold)  # S2
        self.kept_last = second.sum()
        if not bool(second.any()):  # the one host read: the reference takes no step without samples
            return None
        if self.cfg.reweight_ent or self.cfg.reweight_plpd:
            ent, gap = entropy.detach(), plpd.detach()
            weight_ent = float(self.cfg.reweight_ent) / torch.exp(ent - self.e0)
            weight_plpd = float(self.cfg.reweight_plpd) / torch.exp(-gap)
            entropy = entropy * (weight_ent + weight_plpd)
        return masked_mean(entropy, second)

    def destroy(self, x: Tensor) -> Tensor:
        """The object-destroying augmentation ``aug_type`` of the images ``x`` (module docstring)."""
        if self.cfg.aug_type == "patch":
            return patch_shuffle(x, self.cfg.patch_len, self.aug_generator)
        if self.cfg.aug_type == "occ":
            x = x.clone()
            mean = x.mean(dim=(2, 3), keepdim=True)
            rows = slice(self.cfg.row_start, self.cfg.row_start + self.cfg.occlusion_size)
            cols = slice(self.cfg.column_start, self.cfg.column_start + self.cfg.occlusion_size)
            window = x[:, :, rows, cols]
            x[:, :, rows, cols] = mean.expand_as(window)
            return x
        b, c, h, w = x.shape
        keys = torch.rand(h * w, generator=self.aug_generator, device=self.aug_generator.device)
        order = keys.argsort().to(x.device, non_blocking=True)  # a uniformly random permutation of the pixels
        return x.reshape(b, c, h * w)[:, :, order].reshape(b, c, h, w)


def excluded(model: nn.Module) -> tuple[str, ...]:
    """Names of the modules whose normalisation parameters DeYO does not adapt (``EXCLUDE``)."""
    return tuple(name for name, _ in model.named_modules() if name == "norm" or any(s in name for s in EXCLUDE))
