"""Test-time augmentations as batched torch ops with an explicit ``torch.Generator``.

CoTTA (Wang et al., CVPR'22, sec. 3.2: the teacher averages N=32 augmented views) and RoTTA
(Yuan et al., CVPR'23, sec. 3.3: the student sees a "strong augmentation" of the memory) use the same
augmentation (baselines.md 2.4; also TRIBE and UT's ROID). In order:

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

The random parameters (jitter factors and order, affine, blur sigma, flip) are drawn once per call
and shared by the whole batch, as in the references, which apply torchvision transforms to a batch
tensor; the noise is drawn per pixel.

n is the image side. DEVIATION(UT c41bce7): UT's CoTTA hard-codes n = 32 and UT's ImageNet RoTTA
config sets ``INPUT.SIZE (32, 32)`` (baselines.md 2.4, 2.5, 4.2-4.3), so 224-pixel ImageNet images
are padded by 16 and centre-cropped to 32 x 32. By default (``image_size=None``) n is the input's own
side, as in the papers and in md; ``image_size=32`` reproduces the reference (the output is then
32 x 32 whatever the input size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "REFERENCE_AUG_SIZE",
    "TTAugment",
    "cotta_augment",
    "rotta_strong_augment",
    "device_generator",
]

REFERENCE_AUG_SIZE = 32  # UT core/adapter/cotta.py hard-coded size; UT imagenet/rotta.yaml INPUT.SIZE
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

    def __post_init__(self) -> None:
        if self.image_size is not None and self.image_size < 2:
            raise ValueError(f"image_size={self.image_size!r} must be None or an int >= 2")
        if self.padding_mode not in ("edge", "reflect"):
            raise ValueError(f"padding_mode={self.padding_mode!r} is not one of ['edge', 'reflect']")
        if not 0.0 <= self.flip_p <= 1.0:
            raise ValueError(f"flip_p={self.flip_p!r} must lie in [0, 1]")
        if self.noise_std < 0:
            raise ValueError(f"noise_std={self.noise_std!r} must be >= 0")

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Augment a batch ``x`` (B, C, H, W) -> (B, C, n, n) (n = image_size or H)."""
        if x.ndim != 4:
            raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
        n = self.image_size or x.shape[-2]
        x = x.clamp(0.0, 1.0)
        x = self._jitter(x, generator)
        pad = n // 2
        x = F.pad(x, (pad, pad, pad, pad), mode="replicate" if self.padding_mode == "edge" else "reflect")
        x = self._affine(x, generator)
        if self.blur:
            x = _gaussian_blur(x, 5, _uniform(generator, *self.blur_sigma))
        x = _center_crop(x, n)
        if _uniform(generator, 0.0, 1.0) < self.flip_p:
            x = x.flip(-1)
        if self.noise_std > 0:
            noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
            x = x + noise.to(x.device) * self.noise_std
        return x.clamp(0.0, 1.0)

    def _jitter(self, x: Tensor, g: torch.Generator) -> Tensor:
        order = torch.randperm(5, generator=g, device=g.device).tolist()
        factors = (
            _uniform(g, *self.brightness),
            _uniform(g, *self.contrast),
            _uniform(g, *self.saturation),
            _uniform(g, -self.hue, self.hue),
            _uniform(g, *self.gamma),
        )
        for op in order:
            f = factors[op]
            if op == 0:
                x = (x * f).clamp(0.0, 1.0)
            elif op == 1:
                mean = _grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
                x = (f * x + (1.0 - f) * mean).clamp(0.0, 1.0)
            elif op == 2 and x.shape[1] == 3:
                x = (f * x + (1.0 - f) * _grayscale(x)).clamp(0.0, 1.0)
            elif op == 3 and x.shape[1] == 3:
                x = _shift_hue(x, f)
            elif op == 4:
                x = x.clamp(0.0, 1.0).pow(f)
        return x

    def _affine(self, x: Tensor, g: torch.Generator) -> Tensor:
        b, _, h, w = x.shape
        angle = math.radians(_uniform(g, -self.degrees, self.degrees))
        tx = round(_uniform(g, -self.translate * w, self.translate * w))  # whole pixels, as torchvision
        ty = round(_uniform(g, -self.translate * h, self.translate * h))
        s = _uniform(g, *self.scale)
        # Output pixel p (centred pixel coordinates) samples the input at R^-1 (p - t) / s; affine_grid
        # works in coordinates normalised by half the side (align_corners=False), hence D = diag(w/2, h/2).
        cos, sin = math.cos(angle), math.sin(angle)
        inv = torch.tensor([[cos, sin], [-sin, cos]], dtype=torch.float64) / s  # R^T / s
        d = torch.tensor([w / 2.0, h / 2.0], dtype=torch.float64)
        lin = inv * d.view(1, 2) / d.view(2, 1)  # D^-1 (R^T / s) D
        shift = -(inv @ torch.tensor([tx, ty], dtype=torch.float64)) / d
        theta = torch.cat([lin, shift.view(2, 1)], dim=1).to(dtype=x.dtype, device=x.device)
        grid = F.affine_grid(theta.expand(b, 2, 3), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def cotta_augment(image_size: int | None = None) -> TTAugment:
    """CoTTA's teacher augmentation (baselines.md 2.4); ``image_size=32`` = UT's hard-coded variant."""
    return TTAugment(image_size=image_size)


def rotta_strong_augment(image_size: int | None = None) -> TTAugment:
    """RoTTA's strong augmentation: the same transform (baselines.md 2.5); 32 = UT's ImageNet config."""
    return TTAugment(image_size=image_size)


def device_generator(source: torch.Generator, device: torch.device | str) -> torch.Generator:
    """A generator on ``device`` seeded from one draw of ``source`` (so per-pixel randomness can be
    drawn where the tensors live while the whole run still follows the method's single seed)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=source, device=source.device).item())
    return torch.Generator(device=device).manual_seed(seed)


# ---------------------------------------------------------------------- helpers
def _uniform(g: torch.Generator, low: float, high: float) -> float:
    u = float(torch.rand((), generator=g, device=g.device).item())
    return low + (high - low) * u


def _grayscale(x: Tensor) -> Tensor:
    if x.shape[1] != 3:
        return x.mean(dim=1, keepdim=True)
    r, gr, b = x.unbind(dim=1)
    return (_GRAY[0] * r + _GRAY[1] * gr + _GRAY[2] * b).unsqueeze(1)


def _shift_hue(x: Tensor, shift: float) -> Tensor:
    """Rotate the hue of RGB images in [0, 1] by ``shift`` turns (torchvision adjust_hue semantics)."""
    r, g, b = x.unbind(dim=1)
    maxc, _ = x.max(dim=1)
    minc, _ = x.min(dim=1)
    delta = maxc - minc
    safe_delta = torch.where(delta > 0, delta, torch.ones_like(delta))
    sat = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    rc, gc, bc = (maxc - r) / safe_delta, (maxc - g) / safe_delta, (maxc - b) / safe_delta
    hue = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.where(delta > 0, hue / 6.0, torch.zeros_like(hue))
    hue = torch.remainder(hue + shift, 1.0)
    val = maxc
    h6 = hue * 6.0
    i = torch.floor(h6)
    f = h6 - i
    i = i.long() % 6
    p = val * (1.0 - sat)
    q = val * (1.0 - sat * f)
    t = val * (1.0 - sat * (1.0 - f))
    choices_r = torch.stack([val, q, p, p, t, val], dim=1)
    choices_g = torch.stack([t, val, val, q, p, p], dim=1)
    choices_b = torch.stack([p, p, t, val, val, q], dim=1)
    idx = i.unsqueeze(1)
    out = torch.cat(
        [choices_r.gather(1, idx), choices_g.gather(1, idx), choices_b.gather(1, idx)], dim=1
    )
    return out.clamp(0.0, 1.0)


def _gaussian_blur(x: Tensor, kernel_size: int, sigma: float) -> Tensor:
    half = (kernel_size - 1) / 2.0
    coords = torch.linspace(-half, half, kernel_size, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-0.5 * (coords / sigma) ** 2)
    kernel = kernel / kernel.sum()
    c = x.shape[1]
    pad = kernel_size // 2
    x = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    x = F.conv2d(x, kernel.view(1, 1, 1, -1).expand(c, 1, 1, kernel_size), groups=c)
    return F.conv2d(x, kernel.view(1, 1, -1, 1).expand(c, 1, kernel_size, 1), groups=c)


def _center_crop(x: Tensor, n: int) -> Tensor:
    h, w = x.shape[-2:]
    if n > h or n > w:
        raise ValueError(f"centre crop {n} is larger than the image ({h} x {w})")
    top = int(round((h - n) / 2.0))
    left = int(round((w - n) / 2.0))
    return x[..., top : top + n, left : left + n]
