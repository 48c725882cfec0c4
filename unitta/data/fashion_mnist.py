"""Read Fashion-MNIST's IDX files (Debian package ``dataset-fashion-mnist`` or torchvision's download)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _candidate_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("FASHION_MNIST_DIR"):
        dirs.append(Path(os.environ["FASHION_MNIST_DIR"]))
    dirs.append(DEBIAN_DIR)
    cache = Path(os.environ.get("UNITTA_DATA", Path.home() / ".cache" / "unitta"))
    dirs.append(cache / "FashionMNIST" / "raw")  # torchvision.datasets.FashionMNIST(root=cache, download=True)
    return dirs


def _open(path_without_gz: Path):
    for path, opener in ((path_without_gz.with_name(path_without_gz.name + ".gz"), gzip.open), (path_without_gz, open)):
        if path.exists():
            return opener(path, "rb")
    return None


def find_split(split: str = "test") -> Path | None:
    """The first folder that holds both IDX files of ``split`` (plain or .gz), or None; opens nothing."""
    if split not in _FILES:
        raise ValueError(f"split={split!r}: expected 'train' or 'test'")
    for directory in _candidate_dirs():
        names = [directory / name for name in _FILES[split]]
        if all(p.exists() or p.with_name(p.name + ".gz").exists() for p in names):
            return directory
    return None


def not_found_message() -> str:
    """Where Fashion-MNIST was looked for and how to install it (one line)."""
    return (
        "Fashion-MNIST not found. Install it offline with `apt-get install dataset-fashion-mnist` "
        f"(files under {DEBIAN_DIR}), or set FASHION_MNIST_DIR to a folder with the IDX files "
        "(e.g. from torchvision.datasets.FashionMNIST(root, download=True) on a machine with internet). "
        f"Looked in: {', '.join(str(d) for d in _candidate_dirs())}"
    )


def read_fashion_mnist(split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``split`` ('train' | 'test') as (images uint8 (N, 28, 28), labels int64 (N,))."""
    directory = find_split(split)
    if directory is not None:
        image_name, label_name = _FILES[split]
        images_f, labels_f = _open(directory / image_name), _open(directory / label_name)
        with images_f, labels_f:
            raw_images, raw_labels = images_f.read(), labels_f.read()
        magic, n, rows, cols = np.frombuffer(raw_images[:16], dtype=">u4")
        if magic != 2051:
            raise ValueError(f"{directory / image_name}: not an IDX image file (magic {magic})")
        images = np.frombuffer(raw_images[16:], dtype=np.uint8).reshape(n, rows, cols)
        labels = np.frombuffer(raw_labels[8:], dtype=np.uint8).astype(np.int64)
        if len(labels) != n:
            raise ValueError(f"{directory}: {n} images but {len(labels)} labels")
        return images, labels
    raise FileNotFoundError(not_found_message())
