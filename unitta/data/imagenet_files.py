"""The files of ImageNet-C: one domain folder's listing (``<corruption>/<severity>/<wnid>/*.JPEG``) and the
decoding of one image, shared by the lazy loader (``unitta.data.imagenet_c``) and the decoded cache
(``unitta.data.prepared``). Preprocessing follows the reference implementation's ImageNet config (224 x 224
inputs, Resize + centre crop, no normalisation in the loader).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["IMAGE_SIZE", "SOURCE", "decode_image", "list_domain", "open_rgb"]

IMAGE_SIZE = 224  # the reference's ImageNet config: INPUT.SIZE 224
SOURCE = (
    "https://zenodo.org/record/2235448 (the ImageNet-C tar files: blur.tar, digital.tar, noise.tar, weather.tar; "
    "extra.tar for the held-out corruptions speckle_noise, gaussian_blur, spatter, saturate)"
)
_EXTENSIONS = {".jpeg", ".jpg", ".png"}


# Pillow modes of more than 8 bits per pixel -> the value of full intensity. Pillow reads a 16-bit grey PNG as
# 'I;16' (older versions 'I'), whose convert('RGB') clips every value above 255, so the image came out white; it
# reduces 16-bit colour PNGs to 8 bits itself. 'F' (floating point) images are taken as [0, 1].
_FULL_SCALE = {"I;16": 65535, "I;16B": 65535, "I;16L": 65535, "I;16N": 65535, "I": 65535, "F": 1.0}


def open_rgb(path: str) -> tuple[str, Image.Image]:
    """(the file's Pillow mode, the image as 8-bit RGB): a high bit depth scaled to 0..255, not clipped."""
    with Image.open(path) as img:
        mode = img.mode
        full = _FULL_SCALE.get(mode)
        if full is None:
            return mode, img.convert("RGB")
        values = np.asarray(img, dtype=np.float64) * (255.0 / full)
        return mode, Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L").convert("RGB")


def decode_image(path: str, size: int = IMAGE_SIZE) -> np.ndarray:
    """One image file -> uint8 (size, size, 3): shorter side resized to ``size``, centre crop."""
    _, img = open_rgb(path)
    w, h = img.size
    if min(w, h) != size:  # torchvision Resize(size): shorter side -> size, aspect kept
        new = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
        img = img.resize(new, Image.BILINEAR)
    w, h = img.size
    if (w, h) != (size, size):
        left, top = int(round((w - size) / 2)), int(round((h - size) / 2))
        img = img.crop((left, top, left + size, top + size))
    return np.asarray(img)


def list_domain(folder: Path, hint: str) -> tuple[list[str], list[str]]:
    """Sorted wnids and, per file, ``wnid/name`` (sorted by wnid, then name) of one domain folder."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found (expected one folder per wnid holding *.JPEG files). {hint}")
    wnids = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    if not wnids:
        raise FileNotFoundError(f"{folder} holds no class (wnid) folders. {hint}")
    files = []
    for wnid in wnids:
        entries = os.scandir(folder / wnid)
        names = sorted(e.name for e in entries if e.is_file() and os.path.splitext(e.name)[1].lower() in _EXTENSIONS)
        if not names:
            raise FileNotFoundError(f"{folder / wnid} holds no .JPEG files. {hint}")
        files.extend(f"{wnid}/{name}" for name in names)
    return wnids, files
