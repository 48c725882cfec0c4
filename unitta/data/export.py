"""``unitta data export-folder``: write Fashion-MNIST-C images as an image folder (docs/own_data.md's worked example).

The result is ``OUT/<corruption>/<k>_<class name>/<index>.png``, the layout of ``dataset: folder``: the class
folders sort in label order, so the folder's class ids are Fashion-MNIST's and the embedded ResNet-20 reads it.
The images are those of ``load_dataset('fmnist-c', n_per_domain=...)`` (the first n/10 test images of each
class, the same in every domain), written losslessly (PNG), so a model's error on the folder equals its error
on those arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["FASHION_CLASSES", "export_fmnist_c"]

# Fashion-MNIST's label names (Xiao et al. 2017, zalandoresearch/fashion-mnist README), file-name safe
FASHION_CLASSES = ("tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle_boot")


def class_folder(k: int) -> str:
    return f"{k}_{FASHION_CLASSES[k]}"


def export_fmnist_c(
    out: str | Path,
    corruptions: Sequence[str],
    n_per_domain: int,
    severity: int = 5,
    data_dir: str | Path | None = None,
) -> tuple[Path, int]:
    """Write ``n_per_domain`` images (a multiple of 10) of each corruption; returns (folder, images written)."""
    from PIL import Image

    from unitta.data import load_dataset

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: exists and is not empty; choose a new folder (nothing is overwritten)")
    dataset = load_dataset("fmnist-c", data_dir=data_dir, severity=severity, corruptions=list(corruptions),
                           n_per_domain=n_per_domain)
    written = 0
    for d, name in enumerate(dataset.domain_names):
        items = np.flatnonzero(dataset.domains == d)
        images = dataset.get_batch_uint8(items)
        for j, (item, image) in enumerate(zip(items, images)):
            folder = out / name.rsplit("_", 1)[0] / class_folder(int(dataset.labels[item]))
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{j:05d}.png")
            written += 1
    return out, written
