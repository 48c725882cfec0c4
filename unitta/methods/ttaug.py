"""TTAug: test-time augmentation, the mariodoebler TTA benchmark's no-adaptation baseline.

Every test image is predicted as the mean of the model's logits over the image itself and V AugMix views of it
(mariodoebler/test-time-adaptation @ 8b2ed63, ``classification/methods/ttaug.py``: ``model(cat(views)).mean(0)``,
the views from ``AugMixAugmenter`` in ``datasets/data_loading.py``, the same views MEMO adapts on;
``unitta/methods/parts/augmix.py``). Nothing is trained and no state carries from one image to the next: every
BatchNorm normalises with 0.9 x source + 0.1 x the statistics of the image's own V + 1 views (md
``AlphaBatchNorm`` with ``BN.ALPHA``; ``norm/alpha_bn.py``), which never change the model. LayerNorm and GroupNorm
models (no BatchNorm) run unchanged: TTAug runs on every model kind (docs/methods.md "TTAug").

What a batch means here: md runs TTAug at batch size 1 (its view list is one image's). A batch of B images is B
such predictions: on the CPU one image's V + 1 views after another (as md); on a GPU all the batch's views in one
``torch.func.vmap`` of the model over the images (each image's BatchNorm statistics over its own views), in chunks
that bound memory (``VMAP_CHUNK_VALUES``). Models without BatchNorm take every view of the batch as one batch
(their layers are per sample). The outputs depend neither on the path nor on how the stream is cut into batches
on the CPU (each image's views take consecutive numbers from the method's generator).

Hyper-parameters (md ``conf.py``; TTAug has no ``cfgs/*/ttaug.yaml``): V = 32 (``TEST.N_AUGMENTATIONS``) for every
dataset family, BN alpha 0.1 (``BN.ALPHA``); views: AugMix at severity 1 after RandomCrop(padding 4) + flip for
32-pixel images, RandomResizedCrop + flip otherwise (md ``get_preaugment``).

Deviations:
- From md: the views come from the method's torch.Generator (``augmix.py`` lists how they are made; the same
  distribution, other random numbers); given the same views the scores are md's up to float rounding
  (bench/vs_authors.py). A batch of B images is B predictions side by side (above), not a batch of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.func import vmap

from unitta.methods.norm.alpha_bn import convert_to_alpha_bn
from unitta.methods.parts.augmix import AugMix
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_probability
from unitta.search_dimensions import Uniform

__all__ = ["TTAug"]

# The views one vmapped chunk holds (GPU path): a batch of 64 CIFAR-sized images with 32 views each (MEMO's bound,
# ``memo.py``; here no activations are kept for a backward, so this is conservative).
VMAP_CHUNK_VALUES = 64 * 32 * 3 * 32 * 32


@register_method("ttaug")
class TTAug(TTAMethod):
    """TTAug (md ``methods/ttaug.py``): the mean logits over an image and its AugMix views, no adaptation."""

    version = 1
    norm_kinds = ("batch", "layer", "group")  # BN-alpha where there is BatchNorm; views averaged on any model

    @dataclass(frozen=True)
    class Config:
        n_augmentations: int = 32  # md conf.py TEST.N_AUGMENTATIONS (no ttaug.yaml overrides it)
        bn_alpha: float = 0.1  # md conf.py BN.ALPHA: (1 - alpha) source + alpha statistics of the image's views
        preaugment: Literal["crop", "resized_crop"] = "crop"  # md get_preaugment: CIFAR crop, else resized crop

        def __post_init__(self) -> None:
            check_at_least("n_augmentations", self.n_augmentations, 1)
            check_probability("bn_alpha", self.bn_alpha)

    presets = {
        "imagenet": {"preaugment": "resized_crop"},  # md get_preaugment: RandomResizedCrop for non-CIFAR images
    }

    # ``unitta methods check``: 4 views per image (32 x 64 images per batch dominate the check's time on a CPU); what it
    # checks does not depend on the number of views
    check_overrides = {"n_augmentations": 4}

    space = {  # docs/methods.md "Search spaces"
        "bn_alpha": Uniform(0.0, 0.5),  # published 0.1 (md BN.ALPHA): from source statistics to half the views'
    }

    def setup(self) -> None:
        self.model.requires_grad_(False)
        self.has_batchnorm = bool(convert_to_alpha_bn(self.model, self.cfg.bn_alpha, self.device_paths))
        self.model.eval()
        self.augmix = AugMix(preaugment=self.cfg.preaugment, paths=self.device_paths)
        self.views_generator = device_generator(self.generator, self.device)

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.views_scores(self.views(x))

    def views(self, x: Tensor) -> Tensor:
        """(B, V + 1, C, H, W): each image followed by its V AugMix views (md ``AugMixAugmenter``'s list)."""
        augmented = self.augmix(x, self.cfg.n_augmentations, self.views_generator)
        return torch.cat([x.unsqueeze(1), augmented.to(x.dtype)], dim=1)

    def views_scores(self, views: Tensor) -> Tensor:
        """(B, K): per image the mean logits over its views, BatchNorm statistics from those views alone."""
        b, v = views.shape[:2]
        forwards = self.cost.forwards
        if not self.has_batchnorm:  # per-sample layers: the whole batch's views at once
            scores = self.model(views.flatten(0, 1)).view(b, v, -1).mean(dim=1)
        elif not self.device_paths.cuda(views):  # compute-bound: one image's views after another, as md
            scores = torch.cat([self.model(image_views).mean(dim=0, keepdim=True) for image_views in views])
        else:
            per_chunk = max(1, VMAP_CHUNK_VALUES // views[0].numel())
            scores = torch.cat([vmap(self._image_scores)(chunk) for chunk in views.split(per_chunk)])
        self.cost.forwards = forwards + b  # one forward (of V + 1 views) per image, as md's batch of one
        return scores

    def _image_scores(self, image_views: Tensor) -> Tensor:
        return self.model(image_views).mean(dim=0)
