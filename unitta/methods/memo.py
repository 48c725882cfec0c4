"""MEMO: marginal entropy minimisation with one test point (Zhang, Levine, Finn; NeurIPS'22).

"MEMO: Test time robustness via adaptation and augmentation". Episodic: every test image is adapted on alone,
starting from the source model each time (paper sec. 3; docs/methods.md "MEMO"):

    restore the source weights and a fresh optimiser
    x_1..x_V = V AugMix views of the image x                   (``unitta/methods/parts/augmix.py``)
    one step on H( mean_v softmax(f(x_v)) )                    the marginal entropy, paper eq. 1
    predict f(x)

Every weight and bias of the model adapts (the reference's default ``collect_params``: all parameters named
``weight``/``bias``), and every BatchNorm normalises with (1 - 0.1) x source + 0.1 x current-batch statistics
(``norm/alpha_bn.py``): the V views form the batch of the adaptation step, the single image the batch of the
prediction. This follows the mariodoebler TTA benchmark (mariodoebler/test-time-adaptation @ 8b2ed63,
``classification/methods/memo.py``, ``MODEL.EPISODIC: True``, ``TEST.BATCH_SIZE: 1``).

What a batch means here: MEMO's protocol is batch size 1. A batch of B images is B such episodes. One AugMix call
makes every view of the batch. On a GPU the episodes are computed together (``MEMO.episodes``): ``torch.func.vmap``
of the gradient of each episode's loss gives each image its own gradient from the source weights (the BatchNorm
statistics of an episode are those of its own views: the layers run per episode under ``vmap``), one step of the
optimiser moves the episode-stacked weights (elementwise: the update of B separate optimisers), and a ``vmap`` of
the forward predicts each image with its own adapted weights; large models run the episodes in chunks
(``episodes_per_chunk``) to bound memory. That is a few thousand operator launches per batch instead of B times
one episode's. On the CPU, which is compute-bound and not launch-bound, the episodes run one after another on the
model itself (``MEMO.episode``: the same values up to float rounding, tests/methods/test_memo.py; 2-4x faster
there than the vmapped passes, which regroup every layer's tensors per episode). After a batch the model holds the
weights adapted to its last image (as the reference's after its last sample). On the CPU the outputs do not
depend on how the stream is cut into batches (each image's views take consecutive numbers from the method's
generator); on a GPU the random numbers depend on the cut and the chunks (same distribution).

Hyper-parameters (reference ``cfgs/*/memo.yaml``, ``conf.py``): CIFAR-10/100: SGD lr 0.005, 32 views;
ImageNet: SGD lr 2.5e-4, 64 views; momentum 0.9, Nesterov (``OPTIM.MOMENTUM``/``NESTEROV``), one step;
BN alpha 0.1 (``BN.ALPHA``). Views: AugMix at severity 1 after RandomCrop(padding 4) + flip (32-pixel images)
or RandomResizedCrop + flip (ImageNet).

Deviations:
- From the reference: the views are generated with torch ops from the method's torch.Generator
  (``augmix.py`` lists the differences; the same distribution of views, other random numbers). Each
  episode starts from a copy of the source weights and a fresh optimiser (the reference reloads whole state
  dicts: identical state); the episodes of a batch run side by side (above), not one after another.
- From the paper: the reference's SGD has Nesterov momentum 0.9, so its single step from a fresh optimiser
  moves the weights by 1.9 x lr x gradient (the paper's plain SGD step: lr x gradient). The paper adapts BN
  statistics of single points with a source prior of strength N (Schneider et al.); the reference mixes with
  alpha = 0.1. Both reference choices are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.func import functional_call, grad, vmap

from unitta.methods.norm.alpha_bn import convert_to_alpha_bn
from unitta.methods.parts.augmix import AugMix
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.losses import marginal_entropy
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive, check_probability
from unitta.search_dimensions import LogUniform, Uniform

__all__ = ["MEMO"]

# What one chunk of episodes may hold (``MEMO.episodes_per_chunk``): its views' values (the step keeps their
# activations), here a batch of 64 CIFAR-sized images with 32 views each; and its episodes' copies of the adapted
# weights (weights, gradients, momenta: three such copies), 2**28 values = 1 GiB per copy in float32.
CHUNK_VIEW_VALUES = 64 * 32 * 3 * 32 * 32
CHUNK_WEIGHT_VALUES = 2**28
# What vmap(grad) keeps per activation value of an episode, against the sequential path's estimate, measured
# (docs/benchmarks.md "MEMO batched") on the embedded ResNet-20 (batch 16, 32 views, CUDA branches on the CPU:
# +1,705 MiB batched against +56 MiB sequentially, ~1.9x one sequential batch per batched episode); an estimate,
# so ``chunk_memory`` bounds the peak to about, not exactly, its multiple.
VMAP_ACTIVATION_COPIES = 2


@register_method("memo")
class MEMO(TTAMethod):
    """MEMO (Zhang et al., NeurIPS'22): per-image marginal entropy over AugMix views, reset after every image."""

    version = 2  # the episodes of a batch computed together, the views from one draw per batch
    norm_kinds = ("batch", "layer", "group")

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "sgd"  # md cfgs/cifar10_c/memo.yaml OPTIM.METHOD
        lr: float = 0.005  # md cfgs/cifar10_c/memo.yaml OPTIM.LR
        n_augmentations: int = 32  # md cfgs/cifar10_c/memo.yaml TEST.N_AUGMENTATIONS
        bn_alpha: float = 0.1  # md conf.py BN.ALPHA: (1 - alpha) source + alpha batch statistics
        steps: int = 1  # md cfgs/*/memo.yaml OPTIM.STEPS
        preaugment: Literal["crop", "resized_crop"] = "crop"  # md transforms_augmix: CIFAR crop, else resized crop
        # not MEMO's: the batched (CUDA) path's memory bound, in units of one sequential episode's estimated memory
        # (``episodes_per_chunk``); 2: a batch's peak at most ~2x the sequential path's, whatever the batch size
        chunk_memory: float = 2.0

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("n_augmentations", self.n_augmentations, 1)
            check_probability("bn_alpha", self.bn_alpha)
            check_at_least("steps", self.steps, 1)
            check_at_least("chunk_memory", self.chunk_memory, 1.0)

    presets = {
        # md cfgs/imagenet_c/memo.yaml: SGD 2.5e-4, 64 views; RandomResizedCrop for non-CIFAR images
        "imagenet": {"lr": 2.5e-4, "n_augmentations": 64, "preaugment": "resized_crop"},
    }

    space = {  # docs/methods.md "Search spaces"
        "lr": LogUniform(1e-4, 5e-2),  # published 5e-3 (CIFAR), 2.5e-4 (ImageNet), SGD: md cfgs/*/memo.yaml
        "bn_alpha": Uniform(0.0, 0.5),  # published 0.1 (md BN.ALPHA): from source statistics to half the batch's
    }

    def setup(self) -> None:
        convert_to_alpha_bn(self.model, self.cfg.bn_alpha, self.device_paths)
        self.model.eval()
        self.params: dict[str, torch.nn.Parameter] = {}  # every weight and bias, by name (md collect_params)
        seen: set[int] = set()
        for module_name, module in self.model.named_modules():
            for name, p in module.named_parameters(recurse=False):
                adapt = name in ("weight", "bias")
                p.requires_grad_(adapt)
                if adapt and id(p) not in seen:  # a tied weight once: functional_call ties it everywhere
                    seen.add(id(p))
                    self.params[f"{module_name}.{name}" if module_name else name] = p
        self.source_params = {key: p.detach().clone() for key, p in self.params.items()}
        # the optimiser of an episode on the model itself (``episode``); ``episodes`` steps one of its kind and
        # settings over the episode-stacked weights: elementwise, so every episode's update is its own optimiser's
        self.optimizer = optimizer_from_config(list(self.params.values()), self.cfg)
        self.augmix = AugMix(preaugment=self.cfg.preaugment, paths=self.device_paths)
        self.views_generator = device_generator(self.generator, self.device)
        self._activation_values: dict[tuple[int, ...], int] = {}  # per image size (``activation_values``)

    def forward(self, x: Tensor) -> Tensor:
        if not self.device_paths.cuda(x):  # compute-bound: one episode after another keeps the kernels dense (below)
            views = self.augmix(x, self.cfg.n_augmentations, self.views_generator)  # (B, V, C, H, W)
            return torch.cat([self.episode(image_views, image) for image_views, image in zip(views, x.split(1))])
        return torch.cat([self.episodes(images) for images in x.split(self.episodes_per_chunk(x))])

    def episodes_per_chunk(self, x: Tensor) -> int:
        """How many episodes run together: all of the batch unless their views or their weight copies would pass
        ``CHUNK_VIEW_VALUES`` / ``CHUNK_WEIGHT_VALUES``, or their memory ``chunk_memory`` times one sequential
        episode's; at least one.

        Memory, in values, from the model's sizes: an episode holds its weights' copies (weights, gradients, momenta:
        3 W) and its views' activations (V views x A values per image, every layer's output, kept for the
        backward); the sequential path holds one such episode and the batch's views (B V image values), a chunk of E
        episodes E times (3 W + V A + V image values). vmap's grouped layers keep more per activation than the
        sequential pass (``VMAP_ACTIVATION_COPIES``, measured, docs/benchmarks.md "MEMO batched")."""
        views = self.cfg.n_augmentations
        per_episode_views = views * x[0].numel()
        per_episode_weights = sum(p.numel() for p in self.source_params.values())
        activations = views * self.activation_values(x)
        sequential = 3 * per_episode_weights + activations + x.shape[0] * per_episode_views
        batched = 3 * per_episode_weights + VMAP_ACTIVATION_COPIES * activations + per_episode_views
        bound = min(CHUNK_VIEW_VALUES // per_episode_views, CHUNK_WEIGHT_VALUES // per_episode_weights,
                    int(self.cfg.chunk_memory * sequential // batched))  # fmt: skip
        return max(1, min(x.shape[0], bound))

    def activation_values(self, x: Tensor) -> int:
        """Output values of every leaf module for one image of ``x``'s size (once per size: a forward of one
        image without autograd, outside the steady batches)."""
        key = tuple(x.shape[1:])
        if key not in self._activation_values:
            total = [0]

            def count(_module, _inputs, output) -> None:
                if isinstance(output, Tensor):
                    total[0] += output.numel()

            leaves = [m for m in self.model.modules() if not any(True for _ in m.children())]
            hooks = [m.register_forward_hook(count) for m in leaves]
            try:
                with torch.no_grad():
                    self.model(x[:1])
            finally:
                for hook in hooks:
                    hook.remove()
            self._activation_values[key] = total[0]
        return self._activation_values[key]

    def episodes(self, images: Tensor) -> Tensor:
        """One episode per image, side by side: from the source weights, ``steps`` steps on the marginal entropy
        of the image's views, then the image predicted with its adapted weights; (E, K) scores."""
        e, forwards = images.shape[0], self.cost.forwards
        views = self.augmix(images, self.cfg.n_augmentations, self.views_generator)  # (E, V, C, H, W)
        weights = {key: p.expand(e, *p.shape).clone() for key, p in self.source_params.items()}  # (E, ...) each
        optimizer = type(self.optimizer)(list(weights.values()), **self.optimizer.defaults)
        gradients = vmap(grad(self.views_loss), in_dims=(None, 0))  # the first step: every episode at the source
        for step in range(self.cfg.steps):
            for key, g in gradients(self.source_params if step == 0 else weights, views).items():
                weights[key].grad = g
            optimizer.step()
            gradients = vmap(grad(self.views_loss))
        with torch.no_grad():
            scores = vmap(self.predict_image)(weights, images)
            torch._foreach_copy_(list(self.params.values()), [w[-1] for w in weights.values()])
        self.cost.forwards = forwards + e * (self.cfg.steps + 1)  # E episodes' passes, whatever the hook saw of vmap
        self.cost.backwards += e * self.cfg.steps
        return scores

    def episode(self, views: Tensor, image: Tensor) -> Tensor:
        """``episodes`` for one image (1, C, H, W) and its views (V, C, H, W), on the model itself: the source
        weights back, a fresh optimiser, the steps, the prediction; (1, K) scores."""
        with torch.no_grad():
            torch._foreach_copy_(list(self.params.values()), list(self.source_params.values()))
        self.optimizer.state.clear()
        for _ in range(self.cfg.steps):
            with torch.enable_grad():
                self.step(marginal_entropy(self.model(views)))
        with torch.no_grad():
            return self.model(image)

    def views_loss(self, weights: dict[str, Tensor], views: Tensor) -> Tensor:
        """The marginal entropy (paper eq. 1) of one episode's views (V, C, H, W) under ``weights``."""
        return marginal_entropy(functional_call(self.model, weights, (views,)))

    def predict_image(self, weights: dict[str, Tensor], image: Tensor) -> Tensor:
        """One image's (C, H, W) scores (K,) under its episode's ``weights`` (BN statistics: the image's own)."""
        return functional_call(self.model, weights, (image.unsqueeze(0),))[0]
