"""AugMix views (Hendrycks et al., ICLR'20) as batched torch ops with an explicit ``torch.Generator``: MEMO's views.

MEMO (Zhang et al., NeurIPS'22, sec. 3) adapts on the marginal prediction over AugMix views of one test
image. The mariodoebler TTA benchmark (``augmentations/transforms_augmix.py`` + ``augmix_ops.py``, used for MEMO
through ``AugMixAugmenter(..., use_augmix=True)``) builds every view from the image as a PIL image:

    pre-augment   32-pixel (CIFAR) images: RandomCrop(32, padding=4) + RandomHorizontalFlip
                  others: RandomResizedCrop(side) + RandomHorizontalFlip
    3 chains      each of depth d ~ U{1, 2, 3}; each step one op drawn uniformly from
                  autocontrast, equalize, posterize, rotate, solarize, shear_x, shear_y, translate_x, translate_y
                  at severity 1 (level ~ U(0.1, severity); rotate int(3 level) degrees, shear 0.03 level,
                  translate int(level side / 30) pixels, solarize threshold 256 - int(25.6 level),
                  posterize to 4 - int(0.4 level) bits), random sign for the geometric ops, zero fill
    mix           w ~ Dirichlet(1, 1, 1), m ~ Beta(1, 1): view = m x_pre + (1 - m) sum_i w_i chain_i

Here the same ops run on a batch of images in uint8 value space (0..255 held in float, rounded after every op
like PIL's 8-bit results), every view's random choices drawn as one tensor of uniforms per call (``_Draws``: one
row per view), and each op evaluated for the whole batch and selected per image (``torch.where``), so that no
value is read back to the host (on the CPU, where the drawn ops are host memory anyway, each image runs its own op
only, and a chain past its depth none: the same values, about 3x less CPU time for MEMO's 32 views). The
geometric ops sample bilinearly at PIL's pixel-centre coordinates (output pixel centre -> input position by the
op's affine matrix), zero outside, as PIL's ``Image.transform(..., BILINEAR)``.

Deviations from the reference (same distribution of views, other random numbers):
- the random stream is the method's torch.Generator, not numpy's global RNG; the integer draws are floors of
  uniforms;
- RandomResizedCrop resizes with a bilinear ``grid_sample`` without antialiasing (PIL's resize filters over
  the whole footprint); it only applies to non-32-pixel images (ImageNet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.parts.device import DevicePaths

__all__ = ["AugMix", "N_OPS"]

N_OPS = 9  # augmix_ops.augmentations: autocontrast, equalize, posterize, rotate, solarize, shear_x/y, translate_x/y
_AUTOCONTRAST, _EQUALIZE, _POSTERIZE, _ROTATE, _SOLARIZE, _SHEAR_X, _SHEAR_Y, _TRANSLATE_X, _TRANSLATE_Y = range(N_OPS)
_GEOMETRIC = (_ROTATE, _SHEAR_X, _SHEAR_Y, _TRANSLATE_X, _TRANSLATE_Y)
_RESIZED_CROP_ATTEMPTS = 10  # torchvision RandomResizedCrop.get_params: range(10)


@dataclass(frozen=True)
class AugMix:
    """AugMix views of a batch (module docstring); ``augmix(x, views, generator)`` -> (B, views, C, H, W).

    width: chains per view (3); max_depth: ops per chain drawn from 1..max_depth (3); severity: the op level
    bound (1, the reference's ``AugMixAugmenter`` default); preaugment: 'crop' (RandomCrop with ``crop_padding``,
    the reference's choice for 32-pixel CIFAR images) or 'resized_crop' (RandomResizedCrop, other datasets).
    """

    width: int = 3  # augmix(): range(3) chains
    max_depth: int = 3  # np.random.randint(1, 4)
    severity: int = 1  # AugMixAugmenter severity=1
    preaugment: Literal["crop", "resized_crop"] = "crop"
    crop_padding: int = 4  # transforms.RandomCrop(32, padding=4)
    # the branches its device-dependent steps take: the building method's (``unitta/methods/parts/device.py``)
    paths: DevicePaths = field(default_factory=DevicePaths.from_environment)

    def __post_init__(self) -> None:
        if self.width < 1 or self.max_depth < 1 or not 1 <= self.severity <= 10:
            raise ValueError(f"AugMix: width={self.width}, max_depth={self.max_depth} must be >= 1, severity in 1..10")
        if self.preaugment not in ("crop", "resized_crop"):
            raise ValueError(f"preaugment={self.preaugment!r} is not one of ['crop', 'resized_crop']")

    def __call__(self, x: Tensor, views: int, generator: torch.Generator) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
        b, c, h, w = x.shape
        n = b * views
        rand = _Draws.drawn(generator, n, self.draws_per_view(), x.device, x.dtype)
        pixels = (x.clamp(0.0, 1.0) * 255.0).round()
        pixels = pixels.unsqueeze(1).expand(b, views, c, h, w).reshape(n, c, h, w)
        pre = self._preaugment(pixels, rand)
        chains = pre.unsqueeze(1).expand(n, self.width, c, h, w).reshape(n * self.width, c, h, w)
        depth = rand.integers(1, self.max_depth + 1, (n * self.width,))
        for position in range(self.max_depth):  # chains shorter than this position keep their images
            chains = self._random_op(chains, rand, position < depth)
        weights = -torch.log(rand.uniform((n, self.width)).clamp_min(1e-12))  # Gamma(1) draws -> Dirichlet(1, 1, 1)
        weights = weights / weights.sum(dim=1, keepdim=True)
        mix = (chains.view(n, self.width, c, h, w) * weights.view(n, self.width, 1, 1, 1)).sum(dim=1) / 255.0
        m = rand.uniform((n,)).view(n, 1, 1, 1)  # Beta(1, 1)
        rand.check_used()
        return (m * (pre / 255.0) + (1.0 - m) * mix).view(b, views, c, h, w)

    def draws_per_view(self) -> int:
        """The uniforms one view takes: its pre-augmentation's, each chain's depth and (op, level, sign) per step,
        the mixing weights and m."""
        pre = 3 if self.preaugment == "crop" else 2 * _RESIZED_CROP_ATTEMPTS + 3  # + the flip
        return pre + self.width * (2 + 3 * self.max_depth) + 1

    # ------------------------------------------------------------------ pre-augmentation
    def _preaugment(self, pixels: Tensor, rand: _Draws) -> Tensor:
        n, _, h, w = pixels.shape
        if self.preaugment == "crop":
            p = self.crop_padding
            padded = F.pad(pixels, (p, p, p, p))
            top = rand.integers(0, 2 * p + 1, (n,))
            left = rand.integers(0, 2 * p + 1, (n,))
            if not self.paths.cuda(pixels):  # the offsets are host memory: one slice per image (4x faster)
                out = torch.stack([padded[i, :, a : a + h, b : b + w] for i, (a, b) in
                                   enumerate(zip(top.tolist(), left.tolist()))])
            else:
                rows = (top.view(n, 1) + torch.arange(h, device=pixels.device)).view(n, 1, h, 1)
                cols = (left.view(n, 1) + torch.arange(w, device=pixels.device)).view(n, 1, 1, w)
                images = torch.arange(n, device=pixels.device).view(n, 1, 1, 1)
                channels = torch.arange(pixels.shape[1], device=pixels.device).view(1, -1, 1, 1)
                out = padded[images, channels, rows, cols]
        else:
            out = _random_resized_crop(pixels, rand)
        flip = (rand.uniform((n,)) < 0.5).view(n, 1, 1, 1)
        return torch.where(flip, out.flip(-1), out)

    # ------------------------------------------------------------------ one chain step
    def _random_op(self, v: Tensor, rand: _Draws, active: Tensor, grouped: bool | None = None) -> Tensor:
        """One op per image, drawn uniformly from the nine (``augmix_ops.augmentations``), applied to the images
        where ``active`` (N,) is True; the others stay as they are (their draws are made all the same). ``grouped``:
        each active image runs its own op only (``_grouped_op``: reads the ops to the host), else all nine on every
        image, selected per image (no host read); None = grouped on the CPU only."""
        n, _, h, w = v.shape
        op = rand.integers(0, N_OPS, (n,))
        level = 0.1 + (self.severity - 0.1) * rand.uniform((n,))  # sample_level(severity)
        sign = torch.where(rand.uniform((n,)) > 0.5, -1.0, 1.0).to(v.dtype)
        if not self.paths.cuda(v) if grouped is None else grouped:  # on the CPU the ops are host memory already
            return self._grouped_op(v, op, level, sign, active)
        out = self._geometric(v, op, level, sign)
        candidates = {
            _AUTOCONTRAST: _autocontrast(v),
            _EQUALIZE: _equalize(v),
            _POSTERIZE: _posterize(v, 4 - torch.floor(level * 4 / 10)),
            _SOLARIZE: _solarize(v, 256 - torch.floor(level * 256 / 10)),
        }
        for index, result in candidates.items():
            out = torch.where((op == index).view(n, 1, 1, 1), result, out)
        return torch.where(active.view(n, 1, 1, 1), out, v)

    def _grouped_op(self, v: Tensor, op: Tensor, level: Tensor, sign: Tensor, active: Tensor) -> Tensor:
        """``_random_op``'s result computing each op on the active images that drew it only (not all nine on
        every image)."""
        out = v.clone()
        ops = [k if on else -1 for k, on in zip(op.tolist(), active.tolist())]
        geometric = [i for i, k in enumerate(ops) if k in _GEOMETRIC]
        if geometric:
            g = torch.tensor(geometric)
            out[g] = self._geometric(v[g], op[g], level[g], sign[g])
        others = {
            _AUTOCONTRAST: lambda idx: _autocontrast(v[idx]),
            _EQUALIZE: lambda idx: _equalize(v[idx]),
            _POSTERIZE: lambda idx: _posterize(v[idx], 4 - torch.floor(level[idx] * 4 / 10)),
            _SOLARIZE: lambda idx: _solarize(v[idx], 256 - torch.floor(level[idx] * 256 / 10)),
        }
        for index, run in others.items():
            picked = [i for i, k in enumerate(ops) if k == index]
            if picked:
                idx = torch.tensor(picked)
                out[idx] = run(idx)
        return out

    def _geometric(self, v: Tensor, op: Tensor, level: Tensor, sign: Tensor) -> Tensor:
        """rotate / shear / translate as one batched affine resampling (identity for the other ops)."""
        n, _, h, w = v.shape
        one, zero = torch.ones_like(level), torch.zeros_like(level)
        degrees = sign * torch.floor(level * 30 / 10)  # int_parameter(level, 30), random sign
        theta = -torch.deg2rad(degrees)  # PIL rotate: angle counter-clockwise, matrix of -angle
        cos, sin = torch.cos(theta), torch.sin(theta)
        shear = sign * level * 0.3 / 10  # float_parameter(level, 0.3)
        shift = sign * torch.floor(level * (w / 3) / 10)  # int_parameter(level, img_size / 3)
        a = torch.stack([one, zero, zero, zero, one, zero], dim=1)  # identity (x_in = a0 x + a1 y + a2, ...)
        cx, cy = w / 2.0, h / 2.0
        rotate = torch.stack([cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy], dim=1)
        matrices = {
            _ROTATE: rotate,
            _SHEAR_X: torch.stack([one, shear, zero, zero, one, zero], dim=1),
            _SHEAR_Y: torch.stack([one, zero, zero, shear, one, zero], dim=1),
            _TRANSLATE_X: torch.stack([one, zero, shift, zero, one, zero], dim=1),
            _TRANSLATE_Y: torch.stack([one, zero, zero, zero, one, shift], dim=1),
        }
        for index in _GEOMETRIC:
            a = torch.where((op == index).view(n, 1), matrices[index], a)
        return _affine_pixels(v, a.view(n, 2, 3)).round()


class _Draws:
    """Every random number of one ``AugMix`` call, drawn at once as uniforms, one row per view (the rows of an
    image's views next to each other), handed out column by column in the order the ops ask for them.

    One draw: no host-to-device copy per op on a device generator (one in all from a host generator), and on
    the CPU an image's views get the same numbers whatever other images share the call (a CPU generator's
    ``rand`` of ``(n, r)`` values is its ``rand`` of each row in turn).
    """

    def __init__(self, u: Tensor, dtype: torch.dtype):
        self.u, self.dtype, self.used = u, dtype, 0

    @classmethod
    def drawn(cls, generator: torch.Generator, n: int, per_view: int, device: torch.device, dtype: torch.dtype):
        u = torch.rand((n, per_view), generator=generator, device=generator.device)
        return cls(u.to(device, non_blocking=True), dtype)

    def _columns(self, shape: tuple[int, ...]) -> Tensor:
        n = self.u.shape[0]
        count = math.prod(shape) // n
        if count * n != math.prod(shape) or self.used + count > self.u.shape[1]:
            raise RuntimeError(f"AugMix draws: {shape} does not fit the {self.u.shape[1] - self.used} columns left")
        columns = self.u[:, self.used : self.used + count]
        self.used += count
        return columns.reshape(shape)  # (n, count) row-major: view i's j-th draw at i * count + j

    def uniform(self, shape: tuple[int, ...]) -> Tensor:
        return self._columns(shape).to(self.dtype)

    def integers(self, low: int, high: int, shape: tuple[int, ...]) -> Tensor:
        """Uniform integers in [low, high) as int64."""
        return (low + self._columns(shape) * (high - low)).floor().clamp_max(high - 1).long()

    def check_used(self) -> None:
        if self.used != self.u.shape[1]:
            raise RuntimeError(f"AugMix draws: {self.u.shape[1] - self.used} of {self.u.shape[1]} columns unused")


_HALF_SIZES: dict[tuple, Tensor] = {}


def _half_size(w: int, h: int, like: Tensor) -> Tensor:
    """(w / 2, h / 2) on ``like``'s device and dtype, made once per (size, dtype, device): a tensor made from host
    values every batch is a host-to-device copy on a GPU (docs/benchmarks.md "Device paths")."""
    key = (w, h, like.dtype, like.device)
    out = _HALF_SIZES.get(key)
    if out is None:
        out = _HALF_SIZES[key] = torch.tensor([w / 2.0, h / 2.0], dtype=like.dtype, device=like.device)
    return out


def _affine_pixels(v: Tensor, a: Tensor) -> Tensor:
    """Bilinear resampling, zero outside: output pixel centre P (pixel units, origin at the top-left corner)
    reads the input at A P (PIL's ``Image.transform(AFFINE)`` convention); ``a`` (N, 2, 3)."""
    n, _, h, w = v.shape
    # P = D (u + 1) with D = diag(w/2, h/2) maps affine_grid's normalised u (align_corners=False) to pixels
    d = _half_size(w, h, v)
    m = a[:, :, :2]
    t = a[:, :, 2]
    m_u = m * d.view(1, 1, 2) / d.view(1, 2, 1)  # D^-1 M D
    t_u = m_u.sum(dim=2) + t / d.view(1, 2) - 1.0  # D^-1 M D 1 + D^-1 t - 1
    theta = torch.cat([m_u, t_u.unsqueeze(2)], dim=2)
    grid = F.affine_grid(theta, [n, v.shape[1], h, w], align_corners=False)
    return F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _autocontrast(v: Tensor) -> Tensor:
    """PIL ImageOps.autocontrast (cutoff 0) per image and channel: [lo, hi] -> [0, 255], truncated."""
    lo = v.amin(dim=(2, 3), keepdim=True).double()
    hi = v.amax(dim=(2, 3), keepdim=True).double()
    span = hi - lo
    scale = 255.0 / torch.where(span > 0, span, torch.ones_like(span))
    # PIL's lut int(ix * scale - lo * scale) in double precision (float32 turns 255 into 254.99998)
    out = torch.floor(v.double() * scale - lo * scale).clamp(0, 255).to(v.dtype)
    return torch.where(span > 0, out, v)


def _equalize(v: Tensor) -> Tensor:
    """PIL ImageOps.equalize per image and channel: lut[i] = (step // 2 + #pixels below i) // step with
    step = (#pixels - #pixels at the largest value) // 255; identity when step is 0."""
    n, c, h, w = v.shape
    flat = v.reshape(n * c, h * w).long().clamp(0, 255)
    hist = torch.zeros(n * c, 256, dtype=v.dtype, device=v.device).scatter_add_(
        1, flat, torch.ones_like(v).view(n * c, -1)
    )
    top = flat.amax(dim=1, keepdim=True)
    step = torch.floor((h * w - hist.gather(1, top)) / 255.0)
    below = torch.cumsum(hist, dim=1) - hist
    safe = torch.where(step > 0, step, torch.ones_like(step))
    lut = torch.floor((torch.floor(safe / 2) + below) / safe).clamp(max=255)
    out = lut.gather(1, flat).view(n, c, h, w)
    return torch.where((step > 0).view(n, c, 1, 1), out, v)


def _posterize(v: Tensor, bits: Tensor) -> Tensor:
    """Keep the top ``bits`` bits (per image) of every 8-bit value."""
    quantum = torch.pow(2.0, 8 - bits).view(-1, 1, 1, 1)
    return torch.floor(v / quantum) * quantum


def _solarize(v: Tensor, threshold: Tensor) -> Tensor:
    """Values >= ``threshold`` (per image) become 255 - value."""
    return torch.where(v >= threshold.view(-1, 1, 1, 1), 255.0 - v, v)


def _random_resized_crop(pixels: Tensor, rand: _Draws, attempts: int = _RESIZED_CROP_ATTEMPTS) -> Tensor:
    """torchvision RandomResizedCrop(side) (scale (0.08, 1), ratio (3/4, 4/3), 10 attempts, then the whole
    image) as one bilinear resampling per image; the crop box is drawn per image."""
    n, _, h, w = pixels.shape
    area = h * w * (0.08 + 0.92 * rand.uniform((n, attempts)))
    log_ratio = math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * rand.uniform((n, attempts))
    ratio = torch.exp(log_ratio)
    cw = torch.round(torch.sqrt(area * ratio))
    ch = torch.round(torch.sqrt(area / ratio))
    ok = (cw > 0) & (ch > 0) & (cw <= w) & (ch <= h)
    first = torch.where(ok.any(dim=1), ok.float().argmax(dim=1), torch.zeros(n, dtype=torch.long, device=ok.device))
    pick = first.view(n, 1)
    found = ok.any(dim=1)
    cw = torch.where(found, cw.gather(1, pick).squeeze(1), torch.full_like(cw[:, 0], float(w)))
    ch = torch.where(found, ch.gather(1, pick).squeeze(1), torch.full_like(ch[:, 0], float(h)))
    top = torch.floor(rand.uniform((n,)) * (h - ch + 1))
    left = torch.floor(rand.uniform((n,)) * (w - cw + 1))
    zero = torch.zeros_like(cw)
    # output pixel centre P (0..w) reads the input at left + P cw / w
    a = torch.stack([cw / w, zero, left, zero, ch / h, top], dim=1).view(n, 2, 3)
    return _affine_pixels(pixels, a).round()
