"""The pixel operations of the test-time augmentations (``unitta/methods/parts/augment.py``): luma, hue rotation,
the colour-jitter ops (one at a time, or grouped by the op each view picks), separable Gaussian blur and the
centre-crop window, on batched tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.norm.stats import constant

_GRAY = (0.2989, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision's rgb_to_grayscale


def jitter_op(op: int, x: Tensor, factor: Tensor, rgb: bool) -> Tensor:
    """Jitter op ``op`` (0 brightness, 1 contrast, 2 saturation, 3 hue, 4 gamma) on (V, B, C, H, W) images with
    one factor per view (V,); saturation and hue leave a single-channel image unchanged."""
    f = factor.view(-1, 1, 1, 1, 1)
    if op == 0:
        return (x * f).clamp(0.0, 1.0)
    if op == 1:
        return (f * x + (1.0 - f) * grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)).clamp(0.0, 1.0)
    if op == 2 and rgb:
        return (f * x + (1.0 - f) * grayscale(x)).clamp(0.0, 1.0)
    if op == 3 and rgb:
        return shift_hue(x, factor.view(-1, 1, 1, 1))
    if op == 4:
        return x.pow(f)
    return x


def grouped_jitter(x: Tensor, order: list[list[int]], factors: tuple[Tensor, ...], rgb: bool) -> Tensor:
    """The jitter with each view's op order known on the host: at each position the views are grouped by the op
    they pick, and each group runs that op alone (5 ops per view instead of 25). The same values as running
    every op with the identity factor for the other views, since those identities are exact. ``order`` may leave
    out ops that are the identity for every view (all of a view's lists have the same length)."""
    x = x.clone(memory_format=torch.contiguous_format)  # written in place below: never the caller's tensor
    for position in range(len(order[0]) if order else 0):
        for op in range(5):
            views = [v for v, ops in enumerate(order) if ops[position] == op]
            if views:
                index = torch.tensor(views, device=x.device)
                x[index] = jitter_op(op, x[index], factors[op][index], rgb)
    return x


def centre_window(size: tuple[int, int], n: int, margin: int) -> tuple[int, int, int, int]:
    """(top, left, height, width) of ``center_crop``'s n x n window of an image of ``size``, grown by ``margin``
    on every side (the pixels a blur of the crop reads)."""
    h, w = size
    if n > h or n > w:
        raise ValueError(f"centre crop {n} is larger than the image ({h} x {w})")
    top, left = int(round((h - n) / 2.0)) - margin, int(round((w - n) / 2.0)) - margin
    if top < 0 or left < 0:
        raise ValueError(f"centre crop {n} with a blur margin of {margin} does not fit the image ({h} x {w})")
    return top, left, n + 2 * margin, n + 2 * margin


def between(u: Tensor, low: float, high: float) -> Tensor:
    """Map uniforms in [0, 1) to [low, high): low + (high - low) u as one operator (a cached 0-dim ``low`` and the
    span as ``alpha``: a Python number operand costs a host-side conversion per call)."""
    return torch.add(constant(float(low), u), u, alpha=high - low)


def grayscale(x: Tensor) -> Tensor:
    if x.shape[-3] != 3:
        return x.mean(dim=-3, keepdim=True)
    r, gr, b = x.unbind(dim=-3)
    return (_GRAY[0] * r + _GRAY[1] * gr + _GRAY[2] * b).unsqueeze(-3)


def shift_hue(x: Tensor, shift: float | Tensor) -> Tensor:
    """Rotate the hue of RGB images (..., 3, H, W) in [0, 1] by ``shift`` turns (torchvision adjust_hue
    semantics); a tensor ``shift`` broadcasts against (..., H, W)."""
    r, g, b = x.unbind(dim=-3)
    maxc, _ = x.max(dim=-3)
    minc, _ = x.min(dim=-3)
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
    choices_r = torch.stack([val, q, p, p, t, val], dim=-3)
    choices_g = torch.stack([t, val, val, q, p, p], dim=-3)
    choices_b = torch.stack([p, p, t, val, val, q], dim=-3)
    idx = i.unsqueeze(-3)
    out = torch.cat([choices_r.gather(-3, idx), choices_g.gather(-3, idx), choices_b.gather(-3, idx)], dim=-3)
    return out.clamp(0.0, 1.0)


def blur_views(x: Tensor, kernel_size: int, sigma: Tensor, batch: int, padding: bool = True) -> Tensor:
    """Separable Gaussian blur (reflect padding) of (V * batch, C, H, W) images, one ``sigma`` (V,) per view;
    ``padding=False``: only the pixels whose whole kernel lies inside (the output shrinks by kernel_size - 1)."""
    half = (kernel_size - 1) / 2.0
    coords = torch.linspace(-half, half, kernel_size, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-0.5 * (coords / sigma.unsqueeze(1)) ** 2)  # (V, k)
    kernel = kernel / kernel.sum(dim=1, keepdim=True)
    n, c, h, w = x.shape
    # one depthwise convolution over all images: every (image, channel) plane gets its view's kernel
    kernel = kernel.repeat_interleave(batch * c, dim=0)  # (V * batch * C, k)
    pad = kernel_size // 2
    if padding:
        x = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    else:
        h, w = h - 2 * pad, w - 2 * pad
    planes = x.reshape(1, n * c, h + 2 * pad, w + 2 * pad)
    planes = F.conv2d(planes, kernel.view(n * c, 1, 1, kernel_size), groups=n * c)
    planes = F.conv2d(planes, kernel.view(n * c, 1, kernel_size, 1), groups=n * c)
    return planes.reshape(n, c, h, w)


def center_crop(x: Tensor, n: int) -> Tensor:
    h, w = x.shape[-2:]
    if n > h or n > w:
        raise ValueError(f"centre crop {n} is larger than the image ({h} x {w})")
    top = int(round((h - n) / 2.0))
    left = int(round((w - n) / 2.0))
    return x[..., top : top + n, left : left + n]
