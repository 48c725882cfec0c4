"""Any image folder as a UniTTA dataset: ``ROOT/<domain>/<class>/<image>`` (docs/own_data.md).

Every domain folder is a domain, every class folder a class (sorted names unless ``domains`` / ``classes``
lists are given), so every setting, sampler, protocol and metric works on it. A single-domain layout
``ROOT/<class>/<image>`` (a ``source_dir``, ImageNet-R and the other natural-shift sets) is one domain.

Planning never decodes: ``index_folder`` lists names and sizes only (``os.scandir``: about 100,000 files a
second), and the dataset is ImageNet-C's lazy ``JpegDataset`` (``unitta.data.imagenet_c``): the images of a
batch are decoded on demand by a thread pool, resized (shorter side) and centre-cropped to the model's input
side. ``digest`` (SHA-256 of every file's relative name and size) is what a cell's identity holds for a folder:
it changes when a file is added, removed, renamed or rewritten with another size, and stays the same when the
folder is copied to another node (modification times need not survive a copy).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["IMAGE_EXTENSIONS", "FolderIndex", "FolderProblem", "FolderSource", "decode_all", "decoded_range",
           "is_class_layout", "index_folder", "load_folder", "verify_images"]

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp"})
_FIX = "fix the folder or list the domains/classes to use (docs/own_data.md)"


class FolderProblem(ValueError):
    """An image folder that cannot be used as given: one line naming the path (``problems`` holds them all)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        more = f" (and {len(self.problems) - 1} more: `unitta data check folder --dir ROOT` lists them)"
        super().__init__(self.problems[0] + (more if len(self.problems) > 1 else ""))


@dataclass
class FolderIndex:
    """Names, labels and domains of an image folder, no pixels.

    domain_dirs[d]: the folder of domain d under ``root`` ('' for a single-domain layout); files[d]: its
    images as ``<class>/<name>``, sorted by class then name; labels: int64 class ids, domain-major.
    """

    root: str
    domain_names: list[str]
    domain_dirs: list[str]
    classes: list[str]
    files: list[list[str]] = field(repr=False)
    labels: np.ndarray = field(repr=False)
    digest: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def counts(self) -> np.ndarray:
        """Images per (domain, class): int64 (D, K)."""
        out = np.zeros((len(self.domain_names), len(self.classes)), dtype=np.int64)
        start = 0
        for d, names in enumerate(self.files):
            out[d] = np.bincount(self.labels[start : start + len(names)], minlength=len(self.classes))
            start += len(names)
        return out


def _subdirs(folder: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))


def _images(folder: Path) -> list[tuple[str, int]]:
    """(name, size) of the image files directly in ``folder``, sorted by name (one ``stat`` per image: the size)."""
    with os.scandir(folder) as entries:
        found = [(e.name, e.stat().st_size) for e in entries
                 if "." + e.name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS and e.name[0] != "." and e.is_file()]
    found.sort()
    return found


def is_class_layout(root: str | Path) -> bool:
    """Whether ``root`` is ``ROOT/<class>/<image>`` (its sub-folders hold images) rather than domains of classes."""
    for name in _subdirs(Path(root)):
        if _images(Path(root) / name):
            return True
    return False


def _chosen(kind: str, given: Sequence[str] | None, found: list[str], root: Path, problems: list[str]) -> list[str]:
    if given is None:
        return found
    if len(set(given)) != len(given):
        raise FolderProblem([f"{kind}: {list(given)} lists a name twice"])
    singular = {"classes": "class", "domains": "domain"}.get(kind, kind)
    for name in given:
        if name not in found:
            problems.append(f"{root / name if kind == 'domains' else name}: no such {singular} folder in {root}; "
                            f"found: {', '.join(found[:10])}{' ...' if len(found) > 10 else ''}")
    return list(given)


def index_folder(
    root: str | Path,
    domains: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
    single_domain: str | None = None,
) -> FolderIndex:
    """The ``FolderIndex`` of ``root``; problems (a class folder missing from a domain, an empty class, a listed
    name that is not there) are collected in ``.problems``, one line each naming the path. A missing ``root`` is
    a FileNotFoundError. single_domain: read ``root`` as ``ROOT/<class>/<image>``, one domain of that name."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder (expected ROOT/<domain>/<class>/<image>; docs/own_data.md)")
    problems: list[str] = []
    if single_domain is not None:
        domain_dirs, domain_names = [""], [single_domain]
    else:
        domain_dirs = _chosen("domains", domains, _subdirs(root), root, problems)
        domain_dirs = [d for d in domain_dirs if (root / d).is_dir()]
        domain_names = list(domain_dirs)
        if not domain_dirs:
            raise FolderProblem(problems or [f"{root}: holds no domain folders (ROOT/<domain>/<class>/<image>)"])
    per_domain = {d: set(_subdirs(root / d)) for d in domain_dirs}
    every = sorted(set().union(*per_domain.values()))
    chosen = _chosen("classes", classes, every, root, problems)
    if not chosen:
        raise FolderProblem([f"{root / domain_dirs[0]}: holds no class folders"])
    sha = hashlib.sha256()
    files, labels = [], []
    for d in domain_dirs:
        names, domain_labels = [], []
        for k, cls in enumerate(chosen):
            folder = root / d / cls
            if cls not in per_domain[d]:
                if cls in every:
                    problems.append(f"{folder}: missing (class {cls!r} has a folder in another domain); {_FIX}")
                continue
            images = _images(folder)
            if not images:
                problems.append(f"{folder}: no .png/.jpg/.jpeg/.webp images; {_FIX}")
            names.extend(f"{cls}/{name}" for name, _ in images)
            sha.update("".join(f"{d}/{cls}/{name}\0{size}\n" for name, size in images).encode())
            domain_labels.append(np.full(len(images), k, dtype=np.int64))
        files.append(names)
        labels.append(np.concatenate(domain_labels) if domain_labels else np.zeros(0, dtype=np.int64))
    return FolderIndex(str(root), domain_names, domain_dirs, chosen, files, np.concatenate(labels),
                       sha.hexdigest(), problems)


def verify_images(index: FolderIndex) -> list[str]:
    """One line per image file that Pillow cannot read (``data check``: decodes nothing, ``Image.verify``)."""
    from PIL import Image

    problems = []
    for d, names in zip(index.domain_dirs, index.files):
        for name in names:
            path = os.path.join(index.root, d, name)
            try:
                with Image.open(path) as img:
                    img.verify()
            except Exception as err:  # noqa: BLE001 - any failure to read is the problem reported
                problems.append(f"{path}: unreadable image ({type(err).__name__}: {err}); replace or delete it")
    return problems


def decoded_range(index: FolderIndex) -> tuple[int, int, int, list[str]]:
    """(images sampled, lowest and highest pixel value, Pillow modes found) of the first image of every (domain,
    class) folder, decoded as a cell decodes it (``imagenet_files.open_rgb``: 16-bit images scaled to 0..255)."""
    from unitta.data.imagenet_files import open_rgb

    lo, hi, modes, n = 255, 0, set(), 0
    for d, names in zip(index.domain_dirs, index.files):
        seen: set[str] = set()
        for name in names:
            cls = name.split("/", 1)[0]
            if cls in seen:
                continue
            seen.add(cls)
            mode, img = open_rgb(os.path.join(index.root, d, name))
            pixels = np.asarray(img)
            lo, hi, n = min(lo, int(pixels.min())), max(hi, int(pixels.max())), n + 1
            modes.add(mode)
    return n, lo, hi, sorted(modes)


def load_folder(
    index: FolderIndex,
    name: str = "folder",
    n_per_domain: int | None = None,
    image_size: int = 224,
    num_workers: int | None = None,
):
    """The lazy dataset of ``index`` (``JpegDataset``); its problems are a ``FolderProblem`` (first one named).

    n_per_domain: the first n/K images of each class in every domain (like ``load_dataset``'s).
    """
    from unitta.data.arrays import balanced_subset
    from unitta.data.imagenet_c import JpegDataset

    if index.problems:
        raise FolderProblem(index.problems)
    files, labels, start = [], [], 0
    for d, names in enumerate(index.files):
        domain_labels = index.labels[start : start + len(names)]
        start += len(names)
        if n_per_domain is not None:
            try:
                keep = balanced_subset(domain_labels, n_per_domain, len(index.classes))
            except ValueError as err:
                raise FolderProblem([f"{Path(index.root) / index.domain_dirs[d]}: {err}"]) from None
            names, domain_labels = [names[i] for i in keep], domain_labels[keep]
        files.append(names)
        labels.append(domain_labels)
    extra = {} if num_workers is None else {"num_workers": max(1, int(num_workers))}
    return JpegDataset(
        name=name,
        labels=np.concatenate(labels),
        domains=np.repeat(np.arange(len(files), dtype=np.int64), [len(f) for f in files]),
        domain_names=list(index.domain_names),
        num_classes=len(index.classes),
        meta={"root": index.root, "classes": list(index.classes), "digest": index.digest},
        root=index.root,
        domain_dirs=list(index.domain_dirs),
        files=files,
        image_size=image_size,
        **extra,
    )


def decode_all(dataset, batch: int = 256):
    """A lazy folder dataset decoded once into memory (``ArrayDataset``: uint8, one copy, Ray's object store holds it
    zero-copy): for small images whose decoding cannot keep up with a GPU (``cache_images: true``)."""
    from unitta.data.arrays import ArrayDataset

    chunks = [dataset.get_batch(np.arange(s, min(s + batch, len(dataset)))) for s in range(0, len(dataset), batch)]
    images = np.concatenate([(c.permute(0, 2, 3, 1) * 255).round().byte().numpy() for c in chunks])
    return ArrayDataset(name=dataset.name, labels=dataset.labels, domains=dataset.domains,
                        domain_names=dataset.domain_names, num_classes=dataset.num_classes, meta=dataset.meta,
                        images=images)


class FolderSource:
    """Labelled source images from a folder (a ``source_dir``): a torch-style Dataset of (image, label) with a
    batched ``get_batch`` (``unitta.data.source.take_batch``); class ids follow the test folder's class names."""

    def __init__(self, root: str | Path, classes: Sequence[str], image_size: int, num_workers: int | None = None):
        layout = {"single_domain": "source"} if is_class_layout(root) else {}
        index = index_folder(root, classes=classes, **layout)
        self.dataset = load_folder(index, "source", image_size=image_size, num_workers=num_workers)

    def __len__(self) -> int:
        return len(self.dataset)

    def get_batch(self, indices: np.ndarray):
        import torch

        indices = np.asarray(indices, dtype=np.int64)
        return self.dataset.get_batch(indices), torch.from_numpy(self.dataset.labels[indices])

    def __getitem__(self, index: int):
        images, labels = self.get_batch(np.array([index]))
        return images[0], int(labels[0])
