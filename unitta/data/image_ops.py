"""The image operators the 15 corruptions of ``unitta.data.corruptions`` are built from, on batches of images
with one numpy generator per image: spatial Gaussian blur, clipped zoom, line and disk blur kernels, the plasma
fractal and the frost pictures (hendrycks/robustness make_cifar_c.py, re-written for batches)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np
from scipy import ndimage

_FROST_SCALE = 0.2  # make_cifar_c.py shrinks the frost pictures x0.2 before cropping
_FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
FROST_CHOICES = 5  # reference quirk: np.random.randint(5), frost6 never used

Rngs = Sequence[np.random.Generator]


def per_image(rngs: Rngs, draw: Callable[[np.random.Generator], np.ndarray]) -> np.ndarray:
    """Stack one draw per image (each image's own generator)."""
    return np.stack([np.asarray(draw(rng)) for rng in rngs])


def to_uint8(x01: np.ndarray) -> np.ndarray:
    """[0, 1] floats -> uint8 by truncation, like the reference's ``np.uint8(clip(x) * 255)``."""
    return (np.clip(x01, 0, 1) * 255).astype(np.uint8)


def gaussian_hw(x: np.ndarray, sigma: float, mode: str, truncate: float) -> np.ndarray:
    """skimage.filters.gaussian over the two spatial axes of a (N, H, W[, C]) batch."""
    sigmas = (0, sigma, sigma) + (0,) * (x.ndim - 3)
    return ndimage.gaussian_filter(x, sigma=sigmas, mode=mode, truncate=truncate)


def _clipped_zoom_1d(size: int, factor: float) -> np.ndarray:
    """make_cifar_c.py's ``clipped_zoom`` along one axis, as a (size, size) matrix.

    Crop the centre ceil(size / factor), zoom it linearly (scipy, order 1), trim the centre ``size``.
    Built by zooming the identity basis, so it is the scipy computation itself; linear zoom is a
    tensor product over axes, so the 2-D operator is ``kron(rows, cols)``.
    """
    crop = int(np.ceil(size / factor))
    top = (size - crop) // 2
    zoomed = ndimage.zoom(np.eye(size)[top : top + crop], (factor, 1), order=1)
    trim = (zoomed.shape[0] - size) // 2
    return zoomed[trim : trim + size]


def clipped_zoom_operator(h: int, w: int, factor: float) -> np.ndarray:
    """The (H*W, H*W) matrix of ``clipped_zoom`` on an (H, W) image (row-major pixels)."""
    return np.kron(_clipped_zoom_1d(h, factor), _clipped_zoom_1d(w, factor))


def apply_hw_operator(op: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Apply an (H*W, H*W) linear map to every channel of every image in a (N, H, W[, C]) batch."""
    n, h, w = x.shape[:3]
    flat = np.moveaxis(x.reshape(n, h * w, -1), 1, 0).reshape(h * w, -1)  # (HW, N*C)
    out = (op @ flat).reshape(h * w, n, -1)
    return np.moveaxis(out, 0, 1).reshape(x.shape)


def line_blur(x: np.ndarray, radius: int, sigma: float, angles_deg: np.ndarray) -> np.ndarray:
    """Motion blur of a float batch (N, H, W[, C]): Gaussian-weighted one-sided shifts along each angle.

    Stands in for ImageMagick's MotionBlurImage (see module docstring). Edges are replicated.
    """
    n, h, w = x.shape[:3]
    width = 2 * radius + 1
    weights = np.exp(-(np.arange(width) ** 2) / (2 * sigma**2))
    weights /= weights.sum()
    theta = np.deg2rad(angles_deg)
    image_idx = np.arange(n)[:, None, None]
    active = np.ones(n, dtype=bool)
    out = np.zeros(x.shape, dtype=np.float32)
    for i in range(width):
        dy = -np.ceil(i * np.sin(theta) - 0.5).astype(np.int64)
        dx = -np.ceil(i * np.cos(theta) - 0.5).astype(np.int64)
        active &= (np.abs(dy) < h) & (np.abs(dx) < w)  # the shift left the image: stop adding
        rows = np.clip(np.arange(h)[None, :] - dy[:, None], 0, h - 1)
        cols = np.clip(np.arange(w)[None, :] - dx[:, None], 0, w - 1)
        shifted = x[image_idx, rows[:, :, None], cols[:, None, :]]
        scale = (weights[i] * active).astype(np.float32).reshape((n,) + (1,) * (x.ndim - 1))
        out += scale * shifted
    return out


def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """make_cifar_c.py's anti-aliased disk, cropped to its non-zero support (same filter result)."""
    half = 8 if radius <= 8 else int(radius)
    coords = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(coords, coords)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float32)
    disk /= disk.sum()
    ksize = (3, 3) if radius <= 8 else (5, 5)
    kernel = cv2.GaussianBlur(disk, ksize=ksize, sigmaX=alias_blur)
    nz = np.argwhere(kernel != 0)
    extent = int(np.abs(nz - half).max())
    return kernel[half - extent : half + extent + 1, half - extent : half + extent + 1]


def plasma_fractal(uniforms: np.ndarray, mapsize: int, decay: float) -> np.ndarray:
    """Diamond-square plasma fractal for a batch, in [0, 1]; ``uniforms`` (N, K) in [-1, 1).

    The same construction as make_cifar_c.py's ``plasma_fractal``, with a leading batch axis.
    """
    n = uniforms.shape[0]
    grid = np.zeros((n, mapsize, mapsize), dtype=np.float64)
    step, wibble, used = mapsize, 100.0, 0

    def noisy_mean(total: np.ndarray) -> np.ndarray:
        nonlocal used
        size = total.shape[1] * total.shape[2]
        noise = uniforms[:, used : used + size].reshape(total.shape)
        used += size
        return total / 4 + wibble * wibble * noise

    while step >= 2:
        half = step // 2
        corners = grid[:, ::step, ::step]
        total = corners + np.roll(corners, -1, axis=1)
        total = total + np.roll(total, -1, axis=2)
        grid[:, half::step, half::step] = noisy_mean(total)
        centres, corners = grid[:, half::step, half::step], grid[:, ::step, ::step]
        total = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        grid[:, ::step, half::step] = noisy_mean(total)
        total = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        grid[:, half::step, ::step] = noisy_mean(total)
        step //= 2
        wibble /= decay
    grid -= grid.min(axis=(1, 2), keepdims=True)
    return grid / grid.max(axis=(1, 2), keepdims=True)


def plasma_draws(mapsize: int) -> int:
    """How many uniforms one plasma fractal of side ``mapsize`` consumes."""
    total, step = 0, mapsize
    while step >= 2:
        total += 3 * (mapsize // step) ** 2
        step //= 2
    return total


@functools.cache
def frost_pictures() -> tuple[np.ndarray, ...]:
    """The frost overlays (RGB uint8), shrunk as the reference does. Shipped by imagecorruptions-imaug."""
    spec = importlib.util.find_spec("imagecorruptions")  # locate only: importing it pulls in numba
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "frost needs the frost pictures of the 'imagecorruptions-imaug' package: pip install imagecorruptions-imaug"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "frost"
    pictures = []
    for name in _FROST_FILES[:FROST_CHOICES]:
        bgr = cv2.imread(str(folder / name))
        if bgr is None:
            raise FileNotFoundError(f"frost picture {folder / name} is missing or unreadable")
        small = cv2.resize(bgr, (0, 0), fx=_FROST_SCALE, fy=_FROST_SCALE)
        pictures.append(np.ascontiguousarray(small[..., ::-1]))
    return tuple(pictures)
