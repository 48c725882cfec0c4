"""The 15 common corruptions at CIFAR-10-C's strengths, on batches of uint8 images (and, through ``corrupt``,
the four held-out ones of ``unitta.data.held_out_corruptions``).

What it is for: building Fashion-MNIST-C (docs/models.md), the embedded
default benchmark. The severity tables are those of hendrycks/robustness
``ImageNet-C/create_c/make_cifar_c.py`` (the script that produced CIFAR-10-C); the code here is a
re-implementation on current numpy / scipy / OpenCV / Pillow that works on a whole batch
``(N, H, W, 3) uint8`` at once where the operation allows it (noise, blurs, zoom blur as one linear
operator, fog's plasma fractal, glass blur's pixel shuffle vectorised over images).

Randomness: every image draws its random numbers from its own ``numpy.random.Generator`` seeded with
``(seed, corruption id, severity, image id)``. An image's corrupted version therefore depends only on
those four numbers, never on the batch it is processed in: a subset is bit-identical to the same
rows of the full set, and chunking does not change the result.

Faithfulness notes (deliberate departures or quirks kept):
- ImageMagick's motion blur (used by motion_blur and snow in the reference) is replaced by a
  numpy line kernel: Gaussian weights over ``2 * radius + 1`` one-sided shifts along the angle,
  edges replicated (the form ``imagecorruptions`` uses).
- glass_blur: the reference's ``x[h, w], x[h', w'] = x[h', w'], x[h, w]`` on numpy views copies
  ``x[h', w']`` into ``x[h, w]`` and leaves ``x[h', w']`` unchanged (not a swap). Kept, since that
  is what produced CIFAR-10-C. Offsets come from ``randint(-delta, delta)`` (upper bound excluded).
- frost: the reference picks among the first 5 of its 6 frost images (``randint(5)``). Kept. The
  frost pictures are the ones shipped in the ``imagecorruptions-imaug`` wheel.
- Float -> uint8 conversion truncates (the reference's ``np.uint8(...)``), except where the
  reference gets a uint8 image back from an encoder (motion blur, JPEG, pixelate).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable

import cv2
import numpy as np
from PIL import Image
from scipy import ndimage

from unitta.data.base import CORRUPTIONS
from unitta.data.held_out_corruptions import HELD_OUT_FUNCTIONS
from unitta.data.image_ops import (
    _FROST_CHOICES,
    Rngs,
    _apply_hw_operator,
    _clipped_zoom_operator,
    _disk_kernel,
    _frost_pictures,
    _gaussian_hw,
    _line_blur,
    _per_image,
    _plasma,
    _plasma_draws,
    _to_uint8,
)
from unitta.data.records import ALL_CORRUPTIONS

SEVERITIES = (1, 2, 3, 4, 5)

# Severity tables, index = severity - 1. Source: hendrycks/robustness make_cifar_c.py (CIFAR-10-C).
_IM = 32  # make_cifar_c.py's IMSIZE (elastic_transform constants are fractions of it)
PARAMS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # sigma on [0, 1]
    "shot_noise": (500, 250, 100, 75, 50),  # Poisson rate (lower = stronger)
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # salt & pepper amount
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),  # disk radius, alias blur
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),  # sigma, delta, iters
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),  # radius, sigma
    "zoom_blur": tuple(np.arange(1, top, 0.01) for top in (1.06, 1.11, 1.16, 1.21, 1.26)),  # zoom factors
    "snow": (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),  # loc, scale, zoom, threshold, blur radius, blur sigma, image weight
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),  # image weight, frost weight
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),  # strength, plasma wibble decay
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor around the per-channel mean
    "elastic_transform": (
        (_IM * 0, _IM * 0, _IM * 0.08),
        (_IM * 0.05, _IM * 0.2, _IM * 0.07),
        (_IM * 0.08, _IM * 0.06, _IM * 0.06),
        (_IM * 0.1, _IM * 0.04, _IM * 0.05),
        (_IM * 0.1, _IM * 0.03, _IM * 0.03),
    ),  # displacement alpha, displacement smoothing sigma, affine jitter
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # downscale factor (BOX resampling both ways)
    "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
}
_PLASMA_SIZE = 32  # make_cifar_c.py's plasma_fractal(mapsize=32)


# ----------------------------------------------------------------------------------------------
# the 15 corruptions: (images uint8 (N, H, W, 3), severity, one generator per image) -> uint8


def gaussian_noise(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    sigma = PARAMS["gaussian_noise"][severity - 1]
    noise = _per_image(rngs, lambda r: r.normal(size=x.shape[1:], scale=sigma))
    return _to_uint8(x / 255.0 + noise)


def shot_noise(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    rate = PARAMS["shot_noise"][severity - 1]
    x01 = x / 255.0
    return _to_uint8(np.stack([rng.poisson(img * rate) for rng, img in zip(rngs, x01)]) / rate)


def impulse_noise(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    amount = PARAMS["impulse_noise"][severity - 1]
    # skimage random_noise(mode='s&p'): each value flipped with p=amount, to 1 or 0 with p=1/2
    draws = _per_image(rngs, lambda r: r.random((2,) + x.shape[1:]))
    flipped, salt = draws[:, 0] < amount, draws[:, 1] < 0.5
    out = x / 255.0
    out[flipped & salt] = 1.0
    out[flipped & ~salt] = 0.0
    return _to_uint8(out)


def defocus_blur(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    radius, alias = PARAMS["defocus_blur"][severity - 1]
    kernel = _disk_kernel(radius, alias)
    # cv2.filter2D's default border (reflect 101) is scipy's 'mirror'
    out = ndimage.correlate(x.astype(np.float32) / 255, kernel[None, :, :, None], mode="mirror")
    return _to_uint8(out)


def glass_blur(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    sigma, delta, iterations = PARAMS["glass_blur"][severity - 1]
    n, h, w = x.shape[:3]
    out = (_gaussian_hw(x / 255.0, sigma, "nearest", 4.0) * 255).astype(np.uint8)
    rows, cols = range(h - delta, delta, -1), range(w - delta, delta, -1)
    # per image, per (iteration, h, w) in the reference's loop order: (dx, dy) in [-delta, delta)
    offsets = _per_image(rngs, lambda r: r.integers(-delta, delta, size=(iterations, len(rows), len(cols), 2)))
    images = np.arange(n)
    for it in range(iterations):
        for a, row in enumerate(rows):
            for b, col in enumerate(cols):
                dx, dy = offsets[:, it, a, b, 0], offsets[:, it, a, b, 1]
                out[images, row, col] = out[images, row + dy, col + dx]  # a copy, see module docstring
    return _to_uint8(_gaussian_hw(out / 255.0, sigma, "nearest", 4.0))


def motion_blur(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    radius, sigma = PARAMS["motion_blur"][severity - 1]
    angles = _per_image(rngs, lambda r: r.uniform(-45, 45))
    out = _line_blur(x.astype(np.float32), radius, sigma, angles)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


@functools.cache
def _zoom_blur_operator(h: int, w: int, severity: int) -> np.ndarray:
    factors = PARAMS["zoom_blur"][severity - 1]
    total = np.eye(h * w, dtype=np.float64)
    for factor in factors:
        total += _clipped_zoom_operator(h, w, float(factor))
    return (total / (len(factors) + 1)).astype(np.float32)


def zoom_blur(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    op = _zoom_blur_operator(x.shape[1], x.shape[2], severity)
    return _to_uint8(_apply_hw_operator(op, x.astype(np.float32) / 255))


def snow(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    loc, scale, zoom, threshold, radius, sigma, keep = PARAMS["snow"][severity - 1]
    n, h, w = x.shape[:3]
    layers, angles = [], []
    for rng in rngs:
        layers.append(rng.normal(size=(h, w), loc=loc, scale=scale))
        angles.append(rng.uniform(-135, -45))
    layer = np.stack(layers).astype(np.float32)
    if zoom != 1:
        layer = _apply_hw_operator(_clipped_zoom_operator(h, w, float(zoom)), layer)
    layer[layer < threshold] = 0
    layer = _to_uint8(layer).astype(np.float32)  # the reference round-trips the layer through a PNG
    layer = np.clip(np.rint(_line_blur(layer, radius, sigma, np.asarray(angles))), 0, 255) / 255.0
    layer = layer[..., None].astype(np.float32)
    x01 = x.astype(np.float32) / 255
    gray = (x01 @ np.array([0.299, 0.587, 0.114], dtype=np.float32))[..., None]  # cv2 RGB2GRAY
    x01 = keep * x01 + (1 - keep) * np.maximum(x01, gray * 1.5 + 0.5)
    return _to_uint8(x01 + layer + np.rot90(layer, k=2, axes=(1, 2)))


def frost(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    image_weight, frost_weight = PARAMS["frost"][severity - 1]
    h, w = x.shape[1:3]
    pictures = _frost_pictures()
    crops = []
    for rng in rngs:
        picture = pictures[rng.integers(_FROST_CHOICES)]
        top = rng.integers(0, picture.shape[0] - h)
        left = rng.integers(0, picture.shape[1] - w)
        crops.append(picture[top : top + h, left : left + w])
    out = image_weight * x.astype(np.float32) + frost_weight * np.stack(crops).astype(np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def fog(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    strength, decay = PARAMS["fog"][severity - 1]
    h, w = x.shape[1:3]
    mapsize = max(_PLASMA_SIZE, 1 << (max(h, w) - 1).bit_length())
    uniforms = _per_image(rngs, lambda r: r.uniform(-1, 1, _plasma_draws(mapsize)))
    plasma = _plasma(uniforms, mapsize, decay)[:, :h, :w, None]
    x01 = x / 255.0
    max_val = x01.max(axis=(1, 2, 3), keepdims=True)
    return _to_uint8((x01 + strength * plasma) * max_val / (max_val + strength))


def brightness(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    shift = PARAMS["brightness"][severity - 1]
    # +shift on HSV's V = max(R, G, B) scales every channel by V'/V (black pixels become grey V')
    x01 = x / 255.0
    value = x01.max(axis=-1, keepdims=True)
    new_value = np.minimum(value + shift, 1.0)
    scaled = x01 * new_value / np.where(value > 0, value, 1.0)
    return _to_uint8(np.where(value > 0, scaled, new_value))


def contrast(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    factor = PARAMS["contrast"][severity - 1]
    x01 = x / 255.0
    means = x01.mean(axis=(1, 2), keepdims=True)
    return _to_uint8((x01 - means) * factor + means)


def elastic_transform(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    alpha, sigma, jitter = PARAMS["elastic_transform"][severity - 1]
    n, h, w, c = x.shape
    centre = np.float32([h, w]) // 2
    side = min(h, w) // 3
    src = np.float32([centre + side, [centre[0] + side, centre[1] - side], centre - side])
    jitters, fields = [], []
    for rng in rngs:
        jitters.append(rng.uniform(-jitter, jitter, size=src.shape))
        fields.append(rng.uniform(-1, 1, size=(2, h, w)))
    fields = np.stack(fields)  # (N, 2, H, W): dx, dy before smoothing
    smooth = ndimage.gaussian_filter(fields, sigma=(0, 0, sigma, sigma), mode="reflect", truncate=3)
    dx, dy = (smooth[:, 0] * alpha).astype(np.float32), (smooth[:, 1] * alpha).astype(np.float32)
    yy, xx, cc = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    x01 = x.astype(np.float32) / 255
    out = np.empty_like(x01)
    for i in range(n):
        matrix = cv2.getAffineTransform(src, src + jitters[i].astype(np.float32))
        warped = cv2.warpAffine(x01[i], matrix, (w, h), borderMode=cv2.BORDER_REFLECT_101)
        coords = (yy + dy[i][..., None], xx + dx[i][..., None], cc)
        out[i] = ndimage.map_coordinates(warped, coords, order=1, mode="reflect")
    return _to_uint8(out)


def pixelate(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    factor = PARAMS["pixelate"][severity - 1]
    h, w = x.shape[1:3]
    small = (int(w * factor), int(h * factor))
    return np.stack(
        [np.asarray(Image.fromarray(img).resize(small, Image.BOX).resize((w, h), Image.BOX)) for img in x]
    )


def jpeg_compression(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    quality = PARAMS["jpeg_compression"][severity - 1]
    out = np.empty_like(x)
    for i, img in enumerate(x):
        buffer = io.BytesIO()
        Image.fromarray(img).save(buffer, "JPEG", quality=quality)
        out[i] = np.asarray(Image.open(buffer).convert("RGB"))
    return out


CORRUPTION_FUNCTIONS: dict[str, Callable[[np.ndarray, int, Rngs], np.ndarray]] = {
    **{name: globals()[name] for name in CORRUPTIONS},
    **HELD_OUT_FUNCTIONS,
}


def corrupt(
    images: np.ndarray,
    corruption: str,
    severity: int,
    seed: int = 0,
    image_ids: np.ndarray | None = None,
) -> np.ndarray:
    """Apply ``corruption`` (one of ``ALL_CORRUPTIONS``: the 15 and the 4 held-out) at ``severity`` (1-5,
    CIFAR-10-C strengths) to a batch.

    images: uint8 (N, H, W, 3). image_ids: one id per image (default 0..N-1); each image's random
    numbers come from ``default_rng((seed, corruption id, severity, image id))``, so the output for
    an image does not depend on the rest of the batch. Returns uint8 (N, H, W, 3).
    """
    if corruption not in CORRUPTION_FUNCTIONS:
        raise ValueError(f"corruption={corruption!r}: expected one of {', '.join(ALL_CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity={severity!r}: expected an integer in 1..5")
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images: expected a uint8 array (N, H, W, 3), got {images.dtype} {images.shape}")
    if image_ids is None:
        image_ids = np.arange(len(images))
    image_ids = np.asarray(image_ids, dtype=np.int64)
    if image_ids.shape != (len(images),):
        raise ValueError(f"image_ids: expected shape ({len(images)},), got {image_ids.shape}")
    cid = ALL_CORRUPTIONS.index(corruption)  # the 15 keep their ids (and pixels); the held-out ones follow
    rngs = [np.random.default_rng((seed, cid, severity, int(i))) for i in image_ids]
    out = CORRUPTION_FUNCTIONS[corruption](images, severity, rngs)
    assert out.shape == images.shape and out.dtype == np.uint8, (corruption, out.shape, out.dtype)
    return out
