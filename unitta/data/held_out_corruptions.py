"""The four held-out corruptions at CIFAR-10-C's strengths: speckle_noise, gaussian_blur, spatter, saturate.

Hendrycks & Dietterich (ICLR'19, sec. 3) set these four aside from the 15 as validation corruptions: a method's
hyper-parameters may be chosen on them without touching the test corruptions (``unitta select``'s ``holdout``
protocol). CIFAR-10-C, CIFAR-100-C and ImageNet-C ship them beside the 15 (``speckle_noise.npy`` ...; ImageNet-C's
``extra.tar``); for the embedded Fashion-MNIST-C they are generated here, like the 15 of
``unitta.data.corruptions``: the severity tables of hendrycks/robustness ``ImageNet-C/create_c/make_cifar_c.py``
(the script that produced CIFAR-10-C), re-implemented on numpy / scipy / OpenCV / scikit-image over a batch
``(N, H, W, 3) uint8``, each image drawing its random numbers from its own generator (docs/models.md).

Faithfulness notes:
- spatter (severities 1-3, water): the reference's ``(layer * 255).astype(np.uint8)`` wraps values above 1
  around; kept (integer part modulo 256), since that is what produced CIFAR-10-C.
- saturate on grey images: a grey pixel has saturation 0 and hue 0 (red) in scikit-image's HSV, so the
  severities that add an offset to the saturation (4 and 5) tint grey Fashion-MNIST images red, while 1-3
  (pure scaling) leave them unchanged. Kept: the same code on colour images is CIFAR-10-C's saturate; on
  Fashion-MNIST-C it is the weakest of the four (docs/models.md reports each one's source error).
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

from unitta.data.image_ops import Rngs, _gaussian_hw, _per_image, _to_uint8

__all__ = ["HELD_OUT_PARAMS", "HELD_OUT_FUNCTIONS"]

# Severity tables, index = severity - 1. Source: hendrycks/robustness make_cifar_c.py (CIFAR-10-C).
HELD_OUT_PARAMS: dict[str, tuple] = {
    "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),  # sigma of the multiplicative noise x + x * N(0, sigma)
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # sigma (skimage.filters.gaussian: nearest edges, truncate 4)
    "spatter": (
        (0.62, 0.1, 0.7, 0.7, 0.5, 0),
        (0.65, 0.1, 0.8, 0.7, 0.5, 0),
        (0.65, 0.3, 1, 0.69, 0.5, 0),
        (0.65, 0.1, 0.7, 0.69, 0.6, 1),
        (0.65, 0.1, 0.5, 0.68, 0.6, 1),
    ),  # liquid loc, scale, blur sigma, threshold, strength (water) / mask blur sigma (mud), 0 water / 1 mud
    "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),  # HSV saturation * a + b
}
_WATER = np.array([175, 238, 238], dtype=np.float32) / 255  # pale turquoise (the reference's constant)
_MUD = np.array([63, 42, 20], dtype=np.float32) / 255  # mud brown
_EMBOSS = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)  # the reference's relief kernel


def speckle_noise(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    sigma = HELD_OUT_PARAMS["speckle_noise"][severity - 1]
    x01 = x / 255.0
    noise = _per_image(rngs, lambda r: r.normal(size=x.shape[1:], scale=sigma))
    return _to_uint8(x01 + x01 * noise)


def gaussian_blur(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    sigma = HELD_OUT_PARAMS["gaussian_blur"][severity - 1]
    return _to_uint8(_gaussian_hw(x / 255.0, sigma, "nearest", 4.0))


def _water_mask(layer: np.ndarray) -> np.ndarray:
    """Spatter's water drops of one (H, W) liquid layer in [0, 1]: edges embossed, scaled to a maximum of 1."""
    layer8 = (np.trunc(layer * 255).astype(np.int64) % 256).astype(np.uint8)  # astype(uint8) wraps, see docstring
    dist = cv2.distanceTransform(255 - cv2.Canny(layer8, 50, 150), cv2.DIST_L2, 5)
    _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
    dist = cv2.equalizeHist(cv2.blur(dist, (3, 3)).astype(np.uint8))
    dist = cv2.blur(cv2.filter2D(dist, cv2.CV_8U, _EMBOSS), (3, 3)).astype(np.float32)
    mask = layer8.astype(np.float32) * dist
    peak = mask.max()
    return mask / peak if peak > 0 else mask


def spatter(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    loc, scale, sigma, threshold, strength, mud = HELD_OUT_PARAMS["spatter"][severity - 1]
    h, w = x.shape[1:3]
    layers = _per_image(rngs, lambda r: r.normal(size=(h, w), loc=loc, scale=scale))
    layers = _gaussian_hw(layers, sigma, "nearest", 4.0)
    layers[layers < threshold] = 0
    x01 = x.astype(np.float32) / 255
    if not mud:
        masks = np.stack([_water_mask(layer) for layer in layers])[..., None] * strength
        return _to_uint8(x01 + masks * _WATER)
    masks = _gaussian_hw((layers > threshold).astype(np.float32), strength, "nearest", 4.0)
    masks[masks < 0.8] = 0
    masks = masks[..., None]
    return _to_uint8(x01 * (1 - masks) + _MUD * masks)


def saturate(x: np.ndarray, severity: int, rngs: Rngs) -> np.ndarray:
    from skimage.color import hsv2rgb, rgb2hsv  # scikit-image: only when preparing

    scale, offset = HELD_OUT_PARAMS["saturate"][severity - 1]
    hsv = rgb2hsv(x / 255.0, channel_axis=-1)
    hsv[..., 1] = np.clip(hsv[..., 1] * scale + offset, 0, 1)
    return _to_uint8(hsv2rgb(hsv, channel_axis=-1))


HELD_OUT_FUNCTIONS: dict[str, Callable[[np.ndarray, int, Rngs], np.ndarray]] = {
    "speckle_noise": speckle_noise,
    "gaussian_blur": gaussian_blur,
    "spatter": spatter,
    "saturate": saturate,
}
