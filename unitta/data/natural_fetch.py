"""``unitta data fetch`` for the natural-shift sets: CIFAR-10.1 is downloaded (its two ``.npy`` files from the
authors' GitHub repository, modestyachts/CIFAR-10.1, through ``unitta.data.download``: timeouts, resume), checked
(dtype, shape, labels) and given an ``MD5SUMS`` manifest as CIFAR-10-C's folder is; the ImageNet variants and
DomainNet are archives of gigabytes behind licences or several hosts, so their steps are printed instead.
``UNITTA_CIFAR101_URL`` replaces the base URL (a mirror holding the two files)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from unitta.data.download import DownloadError, download
from unitta.data.fetch import write_md5sums
from unitta.data.natural import CIFAR101_FILES, data_root, fetch_steps
from unitta.data.records import RECORDS

__all__ = ["fetch_natural"]


def _check_cifar101(folder: Path) -> None:
    images = np.load(folder / CIFAR101_FILES[0], mmap_mode="r")
    labels = np.load(folder / CIFAR101_FILES[1])
    counts = np.bincount(labels.astype(np.int64), minlength=10) if labels.dtype.kind in "iu" else None
    if images.dtype != np.uint8 or images.shape != (2000, 32, 32, 3) or counts is None or len(counts) != 10:
        raise DownloadError(f"{folder}: the downloaded files are not CIFAR-10.1 v6 (uint8 (2000, 32, 32, 3) and 2,000 "
                            f"labels in 0..9); got {images.dtype} {images.shape}: delete them and fetch again")


def fetch_natural(name: str, data_dir: str | Path, progress: bool = True) -> str:
    """Fetch ``name`` into ``data_dir`` where unitta can, else the steps; returns the line to print."""
    record = RECORDS[name]
    if record.loader != "cifar101":
        steps = fetch_steps(record, data_dir, Path(data_dir))
        return f"{name}: {steps}; then `unitta data check {name} --dir {data_dir}`"
    folder = data_root(record, data_dir, Path(data_dir))
    folder.mkdir(parents=True, exist_ok=True)
    base = os.environ.get("UNITTA_CIFAR101_URL") or record.fetch  # a mirror (the tests serve one on 127.0.0.1)
    for file in CIFAR101_FILES:
        target = folder / file
        if not target.is_file():
            part = download(f"{base}{file}", folder / f"{file}.part", progress=progress)
            part.rename(target)
    _check_cifar101(folder)
    write_md5sums(folder)
    return f"{name} in {folder}; check it with `unitta data check {name} --dir {data_dir}`"
