"""Test-time augmentations as batched torch ops with an explicit ``torch.Generator``.

CoTTA (Wang et al., CVPR'22, sec. 3.2: the teacher averages N=32 augmented views) and RoTTA
(Yuan et al., CVPR'23, sec. 3.3: the student sees a "strong augmentation" of the memory) use the same
augmentation (docs/methods.md "CoTTA"; also TRIBE and UT's ROID). In order:

    clip to [0, 1]
    colour jitter "pro", its five ops in random order: brightness [0.6, 1.4], contrast [0.7, 1.3],
        saturation [0.5, 1.5], hue +-0.06, gamma [0.7, 1.3]
    pad by n/2 pixels (edge padding)
    random affine: rotation +-15 deg, translation up to 1/16 of the padded side, scale [0.9, 1.1],
        bilinear, zero fill
    Gaussian blur, kernel 5, sigma in [0.001, 0.5]
    centre crop to n x n
    horizontal flip with probability 0.5
    Gaussian noise, std 0.005
    clip to [0, 1]

The random parameters (jitter factors and order, affine, blur sigma, flip) are drawn once per view
and shared by the whole batch, as in the references, which apply torchvision transforms to a batch
tensor; the noise is drawn per pixel. ``aug(x, g, views=V)`` returns V independently augmented
copies of the batch in one pass (CoTTA's 32 teacher views), view-major. For GPU efficiency every
random parameter is drawn as a tensor on the generator's device and applied with batched tensor ops
(per-view factors, one affine grid per view, a per-view blur kernel), so an augmentation never reads a
value back to the host; the random order of the jitter ops is applied by running, at each of the five
positions, every op with the identity factor (or the unchanged input) for the views that do not pick it.
DEVIATION(from this project's earlier version): the parameters are drawn in another order and as
tensors, so the same seed gives other (equally distributed) augmentations than before.
On the CPU the op order is host memory already, so each view runs only its five ops (``grouped_jitter``), and
the affine and the blur compute only the centre crop and the blur's margin: the same values (the identities
skipped are exact; a pixel's sample does not depend on the others), 7x less CPU time for CoTTA's 32 views.

n is the image side. DEVIATION(UT c41bce7): UT's CoTTA hard-codes n = 32 and UT's ImageNet RoTTA
config sets ``INPUT.SIZE (32, 32)`` (docs/methods.md "CoTTA", "RoTTA"), so 224-pixel ImageNet images
are padded by 16 and centre-cropped to 32 x 32. By default (``image_size=None``) n is the input's own
side, as in the papers and in md; ``image_size=32`` reproduces the reference (the output is then
32 x 32 whatever the input size).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.parts.augment_ops import (
    between,
    blur_views,
    center_crop,  # noqa: F401 - part of this module's helpers (tests reach them as augment._name)
    centre_window,
    grayscale,
    grouped_jitter,
    jitter_op,
    shift_hue,
)
from unitta.methods.parts.device import DevicePaths, device_generator, host_values, is_device_generator

__all__ = [
    "TTAugment",
    "cotta_augment",
    "rotta_strong_augment",
    "MoCoAugment",
    "random_hflip",
    "device_generator",
    "patch_shuffle",
]

_GRAY = (0.2989, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision's rgb_to_grayscale


@dataclass(frozen=True)
class TTAugment:
    """The CoTTA / RoTTA test-time augmentation (module docstring); call it as ``aug(x, generator)``.

    image_size: side n of the padding (n/2) and of the centre crop; None = the input's side (paper).
    The other fields default to the "strong" (``soft=False``) values of the references.
    """

    image_size: int | None = None
    brightness: tuple[float, float] = (0.6, 1.4)
    contrast: tuple[float, float] = (0.7, 1.3)
    saturation: tuple[float, float] = (0.5, 1.5)
    hue: float = 0.06
    gamma: tuple[float, float] = (0.7, 1.3)
    padding_mode: Literal["edge", "reflect"] = "edge"
    degrees: float = 15.0
    translate: float = 1.0 / 16.0
    scale: tuple[float, float] = (0.9, 1.1)
    blur: bool = True
    blur_sigma: tuple[float, float] = (0.001, 0.5)
    flip_p: float = 0.5
    noise_std: float = 0.005
    # the branches its device-dependent steps take: the building method's (``unitta/methods/parts/device.py``)
    paths: DevicePaths = field(default_factory=DevicePaths.from_environment)

    def __post_init__(self) -> None:
        if self.image_size is not None and self.image_size < 2:
            raise ValueError(f"image_size={self.image_size!r} must be None or an int >= 2")
        if self.padding_mode not in ("edge", "reflect"):
            raise ValueError(f"padding_mode={self.padding_mode!r} is not one of ['edge', 'reflect']")
        if not 0.0 <= self.flip_p <= 1.0:
            raise ValueError(f"flip_p={self.flip_p!r} must lie in [0, 1]")
        if self.noise_std < 0:
            raise ValueError(f"noise_std={self.noise_std!r} must be >= 0")

    def __call__(
        self, x: Tensor, generator: torch.Generator, views: int = 1, host_generator: torch.Generator | None = None
    ) -> Tensor:
        """Augment a batch ``x`` (B, C, H, W) -> (views * B, C, n, n) (n = image_size or H), view-major.

        ``host_generator`` (a CPU generator, optional): with one view, the jitter order is drawn from it
        on the host, so that only the five chosen ops run (instead of all five at every position).
        """
        if x.ndim != 4:
            raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
        if views < 1:
            raise ValueError(f"views={views!r} must be >= 1")
        b, c = x.shape[:2]
        n = self.image_size or x.shape[-2]
        u = torch.rand(views, _N_DRAWS, generator=generator, device=generator.device)
        u = u.to(device=x.device, dtype=x.dtype, non_blocking=True)
        x = x.clamp(0.0, 1.0).unsqueeze(0).expand(views, *x.shape)
        order = None
        if views == 1 and host_generator is not None and not is_device_generator(host_generator):
            order = host_values(torch.randperm(5, generator=host_generator))  # host memory: no device read
        x = self._jitter(x, u[:, :10], order).reshape(views * b, *x.shape[2:])
        pad = n // 2
        x = F.pad(x, (pad, pad, pad, pad), mode="replicate" if self.padding_mode == "edge" else "reflect")
        # Only the centre crop (and the blur's margin around it) is kept: the affine samples and the blur
        # convolves those output pixels alone, the same values as on the whole padded image, cropped after.
        margin = _BLUR_KERNEL // 2 if self.blur else 0
        window = centre_window(x.shape[-2:], n, margin)
        x = self._affine_views(x, u[:, 10:14], b, window)
        if self.blur:
            x = blur_views(x, _BLUR_KERNEL, between(u[:, 14], *self.blur_sigma), b, padding=False)
        x = x.reshape(views, b, c, n, n)
        flip = (u[:, 15] < self.flip_p).view(views, 1, 1, 1, 1)
        x = torch.where(flip, x.flip(-1), x).reshape(views * b, c, n, n)
        if self.noise_std > 0:
            noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
            x = x + noise.to(x.device, non_blocking=True) * self.noise_std
        return x.clamp(0.0, 1.0)

    def _jitter(self, x: Tensor, u: Tensor, host_order: list[int] | None = None, grouped: bool | None = None) -> Tensor:
        """Colour jitter "pro" of (V, B, C, H, W) images; ``u`` (V, 10): 5 order keys, then the 5 factors.

        ``host_order``: the op order of a single view, known on the host (the order keys are then unused).
        ``grouped``: run each view's five ops only (``grouped_jitter``: reads the order to the host), else every
        op at every position with identity factors (no host read); None = grouped on the CPU only.
        """
        views = x.shape[0]
        f = u[:, 5:]
        factors = (
            between(f[:, 0], *self.brightness),
            between(f[:, 1], *self.contrast),
            between(f[:, 2], *self.saturation),
            between(f[:, 3], -self.hue, self.hue),
            between(f[:, 4], *self.gamma),
        )
        rgb = x.shape[2] == 3
        shape = (views, 1, 1, 1, 1)
        if host_order is not None:
            for op in host_order:
                x = jitter_op(op, x, factors[op], rgb)
            return x
        order = u[:, :5].argsort(dim=1)  # a uniformly random permutation of the five ops per view
        if not self.paths.cuda(x) if grouped is None else grouped:  # on the CPU the order is host memory already
            # ops whose range is exactly 1 are the identity (hue is not: its HSV round trip rounds): not run
            ranges = (self.brightness, self.contrast, self.saturation, None, self.gamma)
            skip = {op for op, r in enumerate(ranges) if r is not None and tuple(r) == (1.0, 1.0)}
            return grouped_jitter(x, [[op for op in ops if op not in skip] for ops in order.tolist()], factors, rgb)
        for position in range(5):
            op = order[:, position]
            # op k's factor for the views that apply it at this position, 1 (the identity) for the others
            f0, f1, f2, _, f4 = (torch.where(op == k, factors[k], 1.0).view(shape) for k in range(5))
            x = (x * f0).clamp(0.0, 1.0)  # brightness; x * 1 is exact on [0, 1]
            mean = grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
            x = (f1 * x + (1.0 - f1) * mean).clamp(0.0, 1.0)  # contrast; f = 1 gives x exactly
            if rgb:
                x = (f2 * x + (1.0 - f2) * grayscale(x)).clamp(0.0, 1.0)  # saturation
                hue_here = (op == 3).view(shape)
                x = torch.where(hue_here, shift_hue(x, factors[3].view(views, 1, 1, 1)), x)
            x = x.pow(f4)  # gamma; x ** 1 is exact
        return x

    def _affine(self, x: Tensor, g: torch.Generator) -> Tensor:
        """The random affine step alone, one draw of (angle, tx, ty, scale) for the batch ``x``."""
        u = torch.rand(1, 4, generator=g, device=g.device).to(device=x.device, dtype=x.dtype)
        return self._affine_views(x, u, x.shape[0])

    def _affine_views(self, x: Tensor, u: Tensor, batch: int,
                      window: tuple[int, int, int, int] | None = None) -> Tensor:
        """Per-view random affine of (V * batch, C, h, w) images; ``u`` (V, 4) uniforms: angle, tx, ty, scale.

        ``window`` (top, left, height, width): only those output pixels, sampled as in the whole output."""
        _, _, h, w = x.shape
        views = u.shape[0]
        angle = torch.deg2rad(between(u[:, 0], -self.degrees, self.degrees))
        tx = torch.round(between(u[:, 1], -self.translate * w, self.translate * w))  # whole pixels, as torchvision
        ty = torch.round(between(u[:, 2], -self.translate * h, self.translate * h))
        s = between(u[:, 3], *self.scale)
        # Output pixel p (centred pixel coordinates) samples the input at R^-1 (p - t) / s; affine_grid
        # works in coordinates normalised by half the side (align_corners=False), hence D = diag(w/2, h/2):
        # theta = [D^-1 (R^T / s) D | -D^-1 (R^T / s) t].
        cos, sin = torch.cos(angle) / s, torch.sin(angle) / s
        dx, dy = w / 2.0, h / 2.0
        theta = torch.stack(
            [cos, sin * (dy / dx), -(cos * tx + sin * ty) / dx, -sin * (dx / dy), cos, (sin * tx - cos * ty) / dy],
            dim=1,
        ).view(views, 2, 3)
        grid = F.affine_grid(theta, [views, 1, h, w], align_corners=False)  # one grid per view, not per image
        if window is not None:
            top, left, height, width = window
            grid = grid[:, top : top + height, left : left + width]
        grid = grid.unsqueeze(1).expand(views, batch, *grid.shape[1:]).reshape(views * batch, *grid.shape[1:])
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


_N_DRAWS = 16  # uniforms per view: 5 jitter-order keys, 5 jitter factors, 4 affine, blur sigma, flip
_BLUR_KERNEL = 5  # CoTTA's GaussianBlur(kernel_size=5)


def cotta_augment(image_size: int | None = None, paths: DevicePaths | None = None) -> TTAugment:
    """CoTTA's teacher augmentation (docs/methods.md "CoTTA"); ``image_size=32`` = UT's hard-coded variant.
    ``paths``: the building method's device paths (None: read from the environment now)."""
    return TTAugment(image_size=image_size, paths=paths if paths is not None else DevicePaths.from_environment())


def rotta_strong_augment(image_size: int | None = None, paths: DevicePaths | None = None) -> TTAugment:
    """RoTTA's strong augmentation: the same transform (docs/methods.md "RoTTA"); 32 = UT's ImageNet config."""
    return cotta_augment(image_size, paths)


@dataclass(frozen=True)
class MoCoAugment:
    """AdaContrast's strong view, "moco-v2-light" (Chen et al., CVPR'22, sec. 4; the mariodoebler TTA benchmark's
    ``augmentations/transforms_adacontrast.py`` on CIFAR and ImageNet-C), with independent draws per image:

        with probability 0.8: colour jitter (brightness, contrast, saturation in [0.6, 1.4], hue +-0.1, in a
            random order)
        with probability 0.2: greyscale (3 channels)
        with probability 0.5: Gaussian blur, sigma in [0.1, 2.0]
        horizontal flip with probability 0.5

    (The reference's resize to the input's own size is the identity.) DEVIATION(md): the reference applies
    these to uint8 PIL images in the data loader (rounding after each op; PIL's box-filter approximation of a
    Gaussian blur); here they run on the float batch, the blur as an exact Gaussian of ``blur_kernel`` taps.
    On the CPU each step runs on the images that draw it only (the draws are host memory there; the same values).
    """

    jitter_p: float = 0.8
    strength: float = 0.4  # ColorJitter(0.4, 0.4, 0.4, 0.1)
    hue: float = 0.1
    grayscale_p: float = 0.2
    blur_p: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = 13  # 2 * ceil(3 * sigma_max) + 1
    flip_p: float = 0.5
    # the branches its device-dependent steps take: the building method's (``unitta/methods/parts/device.py``)
    paths: DevicePaths = field(default_factory=DevicePaths.from_environment)

    def __call__(
        self, x: Tensor, generator: torch.Generator, views: int = 1, selected: bool | None = None
    ) -> Tensor:
        """(B, C, H, W) images in [0, 1] -> ``views`` augmented views of each, (views * B, C, H, W), view-major:
        the same values as ``views`` calls in turn (the draws are made view by view), in one pass.

        ``selected``: run each step on the images that draw it only (``_selected``: reads the draws to the host),
        else on every image, kept per image with ``torch.where`` (no host read); None = selected on the CPU only.
        """
        u = torch.cat([torch.rand(x.shape[0], 15, generator=generator, device=generator.device) for _ in range(views)])
        u = u.to(device=x.device, dtype=x.dtype)
        x = x.clamp(0.0, 1.0).repeat(views, 1, 1, 1)
        b = x.shape[0]
        if not self.paths.cuda(x) if selected is None else selected:  # on the CPU the draws are host memory
            return self._selected(x, u)
        shape = (b, 1, 1, 1)
        jittered = self._jitter._jitter(x.unsqueeze(1), u[:, :10]).squeeze(1)
        x = torch.where((u[:, 10] < self.jitter_p).view(shape), jittered, x)
        x = torch.where((u[:, 11] < self.grayscale_p).view(shape), grayscale(x).expand_as(x), x)
        if self._blurs(x):
            blurred = blur_views(x, self.blur_kernel, between(u[:, 12], *self.blur_sigma), 1)
            x = torch.where((u[:, 13] < self.blur_p).view(shape), blurred, x)
        return torch.where((u[:, 14] < self.flip_p).view(shape), x.flip(-1), x)

    def _selected(self, x: Tensor, u: Tensor) -> Tensor:
        """``__call__`` computing each step on the images that draw it only: the same values (every op acts on
        each image alone), without the jitter, greyscale, blur and flip of the images that skip them. Writes into
        ``x`` (``__call__``'s own copy)."""

        def picked(column: int, p: float) -> Tensor | None:
            index = (u[:, column] < p).nonzero().flatten()
            return index if index.numel() else None

        # ``.to(x.dtype)``: under autocast the blur's convolution gives bfloat16 (``torch.where`` promotes it back)
        if (i := picked(10, self.jitter_p)) is not None:
            x[i] = self._jitter._jitter(x[i].unsqueeze(1), u[i, :10]).squeeze(1).to(x.dtype)
        if (i := picked(11, self.grayscale_p)) is not None:
            x[i] = grayscale(x[i]).expand(-1, x.shape[1], -1, -1).to(x.dtype)
        if self._blurs(x) and (i := picked(13, self.blur_p)) is not None:
            x[i] = blur_views(x[i], self.blur_kernel, between(u[i, 12], *self.blur_sigma), 1).to(x.dtype)
        if (i := picked(14, self.flip_p)) is not None:
            x[i] = x[i].flip(-1)
        return x

    def _blurs(self, x: Tensor) -> bool:
        """Whether the images are large enough for the blur's reflect padding (the blur is skipped otherwise)."""
        return x.shape[-1] > self.blur_kernel // 2 and x.shape[-2] > self.blur_kernel // 2

    @functools.cached_property
    def _jitter(self) -> TTAugment:
        """The colour jitter, built once: gamma 1, so four ops in a uniformly random order per image."""
        low, high = 1.0 - self.strength, 1.0 + self.strength
        return TTAugment(brightness=(low, high), contrast=(low, high), saturation=(low, high), hue=self.hue,
                         gamma=(1.0, 1.0), paths=self.paths)


def random_hflip(x: Tensor, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """Flip each image of (B, C, H, W) horizontally with probability ``p`` (AdaContrast's weak view, "plain":
    its resize and random crop to the input's own size are the identity)."""
    u = torch.rand(x.shape[0], generator=generator, device=generator.device).to(x.device)
    return torch.where((u < p).view(-1, 1, 1, 1), x.flip(-1), x)


def patch_shuffle(x: Tensor, patch_len: int, generator: torch.Generator) -> Tensor:
    """DeYO's shape-destroying augmentation (Lee et al., ICLR'24, sec. 4.1; mariodoebler TTA benchmark
    ``methods/deyo.py``, ``AUG_TYPE: patch``): every image is cut into ``patch_len`` x ``patch_len`` patches that
    are put back in a random order of its own (``argsort`` of uniforms drawn from ``generator``).

    Square images whose side is not a multiple of ``patch_len`` are first resized to the nearest lower multiple
    and back afterwards (bilinear, antialiased: torchvision's tensor ``Resize``), as the reference does.
    """
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
    if patch_len < 1:
        raise ValueError(f"patch_len={patch_len!r} must be >= 1")
    b, c, h, w = x.shape
    side = (w // patch_len) * patch_len  # the reference sizes both sides from the width
    if side < patch_len:
        raise ValueError(f"images of width {w} are smaller than patch_len={patch_len}")
    resized = (h, w) != (side, side)
    if resized:
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False, antialias=True)
    p = side // patch_len
    patches = x.reshape(b, c, patch_len, p, patch_len, p).permute(0, 2, 4, 1, 3, 5).reshape(b, patch_len**2, c, p, p)
    keys = torch.rand(b, patch_len**2, generator=generator, device=generator.device)
    order = keys.argsort(dim=1).to(x.device, non_blocking=True)
    patches = patches.gather(1, order.view(b, -1, 1, 1, 1).expand_as(patches))
    x = patches.reshape(b, patch_len, patch_len, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, side, side)
    if resized:
        x = F.interpolate(x, size=(w, w), mode="bilinear", align_corners=False, antialias=True)
    return x


# ---------------------------------------------------------------------- helpers
def _uniform(g: torch.Generator, low: float, high: float) -> float:
    """One uniform draw on the host (for callers that need a Python number; the augmentation itself never does)."""
    u = float(torch.rand((), generator=g, device=g.device).item())
    return low + (high - low) * u
