"""ImageNet-C, lazily: ``<data_dir>/ImageNet-C/<corruption>/<severity>/<wnid>/*.JPEG``.

750,000 files cannot live in memory, so the dataset holds file names only and ``get_batch``
decodes the requested JPEGs on demand with a thread pool (Pillow's decoder releases the GIL).

Preprocessing follows the reference implementation's ImageNet config (224 x 224 inputs,
Resize + ToTensor, no normalisation in the loader): the shorter side is resized to 224
(bilinear, like torchvision's ``Resize(224)`` on PIL images), then the centre 224x224 is kept. The
released ImageNet-C files are already 224x224, so both steps are no-ops for them; the crop only
guarantees that a batch of odd-sized files still stacks. Normalisation happens inside the model.

Classes are the sorted wnid folder names; files are sorted by name within a class.

When ``python -m unitta.data prepare imagenet-c`` has decoded the requested domains into
``<data_dir>/ImageNet-C-prepared`` (``unitta.data.prepared``), ``load_imagenet_c`` reads them from there
instead: the same images, the same order, without decoding.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from unitta.data.arrays import balanced_subset
from unitta.data.base import CorruptedDataset
from unitta.data.imagenet_files import IMAGE_SIZE, SOURCE, decode_image, list_domain


@dataclass
class JpegDataset(CorruptedDataset):
    """Domains of image files under ``root``; item i is ``root/domain_dirs[d]/files[d][j]``.

    Items are domain-major: domain d holds items ``offsets[d] : offsets[d + 1]``. Domains that list
    the same files share one list object, so the index stays small (about 50,000 names for ImageNet-C).
    """

    root: str = field(kw_only=True)
    domain_dirs: list[str] = field(kw_only=True)
    files: list[list[str]] = field(kw_only=True, repr=False)
    image_size: int = field(kw_only=True, default=IMAGE_SIZE)
    num_workers: int = field(kw_only=True, default=min(8, os.cpu_count() or 1))

    def __post_init__(self) -> None:
        self.offsets = np.concatenate([[0], np.cumsum([len(f) for f in self.files])]).astype(np.int64)
        if self.offsets[-1] != len(self.labels):
            raise ValueError(f"files: {self.offsets[-1]} entries for {len(self.labels)} labels")
        self._pool: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pool"] = None  # threads do not pickle (Ray object store); recreated on first use
        return state

    def path(self, index: int) -> str:
        d = int(self.domains[index])
        return os.path.join(self.root, self.domain_dirs[d], self.files[d][int(index - self.offsets[d])])

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        """Decode the images at ``indices`` (thread pool) -> float32 (B, 3, S, S) in [0, 1]."""
        paths = [self.path(int(i)) for i in np.asarray(indices, dtype=np.int64)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix="unitta-jpeg")
        batch = np.stack(list(self._pool.map(lambda p: decode_image(p, self.image_size), paths)))
        return torch.from_numpy(batch).permute(0, 3, 1, 2).contiguous().float().div_(255.0)


def load_imagenet_c(
    data_dir: Path,
    severities: Sequence[int],
    corruptions: Sequence[str],
    n_per_domain: int | None,
    image_size: int = IMAGE_SIZE,
    prepared: bool | None = None,
    verify: bool = False,
) -> CorruptedDataset:
    """ImageNet-C domains (corruption-major, then severity) from ``<data_dir>/ImageNet-C``.

    prepared: None reads the decoded cache when every requested domain has one (else the JPEGs,
        with a warning if only some have one); True requires the cache; False always decodes JPEGs.
    verify: re-hash the whole cache before using it (otherwise only its size and manifest are checked).
    """
    domain_keys = [(c, s) for c in corruptions for s in severities]
    if prepared is not False and image_size == IMAGE_SIZE:
        from unitta.data.prepared import PREPARED_DIR, load_prepared, read_manifest

        manifests = [read_manifest(data_dir, c, s) for c, s in domain_keys]
        missing = [f"{c}_{s}" for (c, s), m in zip(domain_keys, manifests) if m is None]
        if not missing:
            keeps = [
                balanced_subset(m.labels, n_per_domain, len(m.classes)) if n_per_domain else None for m in manifests
            ]
            return load_prepared(data_dir, manifests, keeps, verify=verify)
        message = (
            f"no decoded cache in {Path(data_dir) / PREPARED_DIR} for {', '.join(missing)}; "
            f"run `python -m unitta.data prepare imagenet-c --dir {data_dir}`"
        )
        if prepared:
            raise FileNotFoundError(message)
        if len(missing) < len(manifests):
            warnings.warn(message + ": decoding the JPEGs of every domain instead (slow)", stacklevel=3)
    root = Path(data_dir) / "ImageNet-C"
    hint = (
        f"imagenet-c needs {root}/<corruption>/<severity>/<wnid>/*.JPEG (224 x 224 images). "
        f"Get {SOURCE} and extract them into {root} (unitta never downloads data)."
    )
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found. {hint}")
    classes: list[str] | None = None
    listings: dict[tuple[str, ...], list[str]] = {}  # identical listings share one list
    files, labels = [], []
    for corruption, severity in domain_keys:
        wnids, names = list_domain(root / corruption / str(severity), hint)
        if classes is None:
            classes = wnids
        elif wnids != classes:
            raise ValueError(
                f"{root / corruption / str(severity)}: {len(wnids)} class folders differ from the "
                f"{len(classes)} of {root / domain_keys[0][0] / str(domain_keys[0][1])}"
            )
        class_of = {w: k for k, w in enumerate(classes)}
        domain_labels = np.array([class_of[name.split("/", 1)[0]] for name in names], dtype=np.int64)
        if n_per_domain is not None:
            keep = balanced_subset(domain_labels, n_per_domain, len(classes))
            names, domain_labels = [names[i] for i in keep], domain_labels[keep]
        names = listings.setdefault(tuple(names), names)
        files.append(names)
        labels.append(domain_labels)
    assert classes is not None
    return JpegDataset(
        name="imagenet-c",
        labels=np.concatenate(labels),
        domains=np.repeat(np.arange(len(domain_keys), dtype=np.int64), [len(f) for f in files]),
        domain_names=[f"{c}_{s}" for c, s in domain_keys],
        num_classes=len(classes),
        meta={"root": str(root), "classes": classes},
        root=str(root),
        domain_dirs=[f"{c}/{s}" for c, s in domain_keys],
        files=files,
        image_size=image_size,
    )
