"""``python -m unitta.data check DATASET --dir DIR [--md5]``: is a data directory complete and sound?

Checks the layouts the loaders read (docs: ``unitta.data.cifar_c``, ``unitta.data.imagenet_c``,
``unitta.data.fmnist_c``) without loading the images: folder and files present, ``.npy`` headers
(dtype, shape) and file sizes (a truncated copy is caught), labels per class in every severity block,
the checksums stored with the data (the sha256 sums Fashion-MNIST-C's ``meta.json`` records when the cache
is built, which its loader checks too), and for ImageNet-C the wnid folders and image counts of every
(corruption, severity). ``--md5`` also hashes every downloaded file against the manifest written when it
was fetched (``MD5SUMS`` from ``python -m unitta.data fetch``) and requires every Fashion-MNIST-C file to
have a recorded sum. The result is
a list of problems, one line each naming the file and the fix; empty means ready (e.g. for a RayJob
to check before its sweep starts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unitta.data.cifar_c import IMAGE_SHAPE, ROWS_PER_SEVERITY, SOURCES
from unitta.data.download import file_digest
from unitta.data.records import ALL_CORRUPTIONS, CORRUPTIONS, HELD_OUT_CORRUPTIONS, NUM_SEVERITIES

IMAGENET_CLASSES = 1000
IMAGENET_PER_CLASS = 50  # ImageNet's validation set: 50 images per class (50,000 per severity)


def _npy_header(path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) from a .npy header, reading only the header."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(handle)
        return dtype, shape, handle.tell()


def _check_npy(path: Path, dtype: np.dtype, shape: tuple[int, ...], fix: str) -> str | None:
    """One problem line for a .npy file that is missing, unreadable, of another shape or truncated."""
    if not path.is_file():
        return f"{path}: missing; {fix}"
    try:
        actual_dtype, actual_shape, offset = _npy_header(path)
    except (ValueError, OSError, EOFError) as err:
        return f"{path}: not a readable .npy file ({err}); {fix}"
    if actual_dtype != dtype or tuple(actual_shape) != shape:
        return f"{path}: {actual_dtype} {tuple(actual_shape)}, expected {np.dtype(dtype)} {shape}; {fix}"
    expected_size = offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size != expected_size:
        return f"{path}: {size:,} bytes, expected {expected_size:,} (truncated or padded copy); {fix}"
    return None


def _check_labels(path: Path, rows: int, num_classes: int, blocks: int, fix: str) -> list[str]:
    """labels.npy: integer labels in 0..K-1, every block of ``rows`` holding each class rows/K times."""
    if not path.is_file():
        return [f"{path}: missing; {fix}"]
    try:
        labels = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as err:
        return [f"{path}: not a readable .npy file ({err}); {fix}"]
    if labels.dtype.kind not in "iu" or labels.shape != (rows * blocks,):
        return [f"{path}: {labels.dtype} {labels.shape}, expected integer labels ({rows * blocks},); {fix}"]
    problems = []
    per_class = rows // num_classes
    for block in range(blocks):
        block_labels = np.asarray(labels[block * rows : (block + 1) * rows], dtype=np.int64)
        counts = np.bincount(block_labels, minlength=num_classes)
        if len(counts) > num_classes or (counts != per_class).any():
            wrong = np.flatnonzero(counts[:num_classes] != per_class)
            bad = int(wrong[0]) if len(wrong) else len(counts) - 1  # else: a label >= num_classes
            problems.append(
                f"{path}: rows {block * rows}:{(block + 1) * rows} (severity {block + 1}) hold {counts[bad]} images of "
                f"class {bad}, expected {per_class} of each of {num_classes} classes; {fix}"
            )
    return problems


def _check_manifest_md5(folder: Path, names: Sequence[str], fix: str) -> list[str]:
    manifest = folder / "MD5SUMS"
    if not manifest.is_file():
        return [
            f"{manifest}: missing, so checksums cannot be checked (the folder was not made by `python -m unitta.data "
            "fetch`); refetch it, or check without --md5"
        ]
    expected = {}
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        expected[name.strip()] = digest.strip()
    problems = []
    for name in names:
        path = folder / name
        if name not in expected:
            problems.append(f"{path}: not listed in {manifest}; {fix}")
        elif path.is_file() and file_digest(path, "md5") != expected[name]:
            problems.append(f"{path}: md5 differs from {manifest} (damaged or modified); {fix}")
    return problems


def check_cifar_c(
    dataset: str, data_dir: Path, md5: bool = False, corruptions: Sequence[str] = CORRUPTIONS
) -> list[str]:
    """CIFAR-10-C / CIFAR-100-C: ``<dir>/CIFAR-10-C/<corruption>.npy`` uint8 (50000, 32, 32, 3) and labels.npy."""
    folder_name, num_classes, _ = SOURCES[dataset]
    folder = data_dir / folder_name
    fix = f"run `python -m unitta.data fetch {dataset} --dir {data_dir}` (after deleting {folder})"
    if set(corruptions) & set(HELD_OUT_CORRUPTIONS):
        fix += "; the archive holds the held-out corruptions too"
    if not folder.is_dir():
        return [f"{folder}: missing; run `python -m unitta.data fetch {dataset} --dir {data_dir}`"]
    rows = ROWS_PER_SEVERITY * NUM_SEVERITIES
    problems = _check_labels(folder / "labels.npy", ROWS_PER_SEVERITY, num_classes, NUM_SEVERITIES, fix)
    for corruption in corruptions:
        problem = _check_npy(folder / f"{corruption}.npy", np.dtype(np.uint8), (rows, *IMAGE_SHAPE), fix)
        if problem:
            problems.append(problem)
    if md5:
        problems += _check_manifest_md5(folder, ["labels.npy"] + [f"{c}.npy" for c in corruptions], fix)
    return problems


def check_fmnist_c(
    data_dir: Path, md5: bool = False, n_per_domain: int | None = None, corruptions: Sequence[str] = CORRUPTIONS
) -> list[str]:
    """The Fashion-MNIST-C cache: meta.json, labels, every file it lists and its recorded sha256; ``corruptions``
    not prepared yet are reported (they are built on first use)."""
    from unitta.data.fmnist_c import CACHE_FORMAT, cache_folder

    folder = cache_folder(data_dir, n_per_domain)
    subset = f" --n-per-domain {n_per_domain}" if n_per_domain else ""
    prepare = f"`python -m unitta.data prepare fmnist-c --severity all{subset} --data-dir {data_dir}`"
    fix = f"delete {folder} and run {prepare}"
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return [f"{meta_path}: missing (no cache here); run {prepare}"]
    except (OSError, json.JSONDecodeError) as err:
        return [f"{meta_path}: unreadable ({err}); {fix}"]
    if meta.get("format") != CACHE_FORMAT:
        return [f"{meta_path}: cache format {meta.get('format')}, this unitta writes {CACHE_FORMAT}; {fix}"]
    n = int(meta["n"])
    problems = _check_labels(folder / "labels.npy", n, 10, 1, fix)
    missing = [c for c in corruptions if c not in meta["severities"]]
    if missing:
        problems.append(f"{folder}: no {', '.join(missing)} yet (prepared on first use, or now: {prepare})")
    for corruption, severities in meta["severities"].items():
        problem = _check_npy(folder / f"{corruption}.npy", np.dtype(np.uint8), (n * len(severities), *IMAGE_SHAPE), fix)
        if problem:
            problems.append(problem)
    return problems + _check_fmnist_sums(folder, meta, ["labels.npy"] + [f"{c}.npy" for c in meta["severities"]],
                                         fix, strict=md5)


def _check_fmnist_sums(folder: Path, meta: dict, names: Sequence[str], fix: str, strict: bool) -> list[str]:
    """The sha256 sums meta.json stored when the cache was built, checked always (the loader refuses a file
    that differs, so ``check`` must not call it ok); files without a sum (an older unitta's cache, which the
    loader sums on first use) are a problem only when ``strict`` (--md5)."""
    sums, meta_path = meta.get("sha256", {}), folder / "meta.json"
    problems = []
    for name in names:
        path = folder / name
        if name not in sums:
            if strict:
                problems.append(f"{path}: no sha256 recorded in {meta_path} (built by an older unitta); {fix}")
        elif path.is_file() and file_digest(path, "sha256") != sums[name]:
            problems.append(f"{path}: sha256 differs from {meta_path} (damaged or modified); {fix}")
    return problems


def check_imagenet_c(
    data_dir: Path, corruptions: Sequence[str] = CORRUPTIONS, severities: Sequence[int] = (5,)
) -> list[str]:
    """``<dir>/ImageNet-C/<corruption>/<severity>/<wnid>/*.JPEG``: 1,000 wnid folders of 50 images per domain.

    Only ``severities`` are checked (default 5, the paper's: a cluster often stages only that one).
    """
    root = data_dir / "ImageNet-C"
    fix = f"see `python -m unitta.data fetch imagenet-c --dir {data_dir}` for how to install it"
    extra = f"extract ImageNet-C's extra.tar (the held-out corruptions) into {root}; {fix}"
    if not root.is_dir():
        return [f"{root}: missing; {fix}"]
    problems = []
    reference: list[str] | None = None
    for corruption in corruptions:
        for severity in severities:
            folder = root / corruption / str(severity)
            if not folder.is_dir():
                problems.append(f"{folder}: missing; {extra if corruption in HELD_OUT_CORRUPTIONS else fix}")
                continue
            wnids = sorted(e.name for e in os.scandir(folder) if e.is_dir())
            if len(wnids) != IMAGENET_CLASSES or (reference is not None and wnids != reference):
                problems.append(f"{folder}: {len(wnids)} class folders, expected the same {IMAGENET_CLASSES} wnids "
                                f"in every domain; {fix}")
                continue
            reference = reference or wnids
            short = [w for w in wnids if sum(1 for _ in os.scandir(folder / w)) != IMAGENET_PER_CLASS]
            if short:
                problems.append(f"{folder / short[0]}: not {IMAGENET_PER_CLASS} images ({len(short)} class folders of "
                                f"this domain differ); {fix}")
    return problems


def check_dataset(
    dataset: str,
    data_dir: str | Path,
    md5: bool = False,
    corruptions: Sequence[str] | None = None,
    n_per_domain: int | None = None,
    severities: Sequence[int] = (5,),
) -> list[str]:
    """Problems with ``dataset`` under ``data_dir``, one line each naming the file and the fix; [] when ready.

    corruptions: check only these (default all 15; ``HELD_OUT_CORRUPTIONS`` the four held-out ones).
    n_per_domain: the Fashion-MNIST-C subset cache to check.
    severities: ImageNet-C's severity folders to check (CIFAR-C files always hold all 5).
    """
    data_dir = Path(data_dir)
    corruptions = list(CORRUPTIONS if corruptions is None else corruptions)
    unknown = [c for c in corruptions if c not in ALL_CORRUPTIONS]
    if unknown:
        raise ValueError(f"corruptions: unknown {', '.join(unknown)}; expected names among {', '.join(ALL_CORRUPTIONS)}"
                         " ('held_out' on the command line: the four held-out ones)")
    if dataset in SOURCES:
        return check_cifar_c(dataset, data_dir, md5, corruptions)
    if dataset == "fmnist-c":
        return check_fmnist_c(data_dir, md5, n_per_domain, corruptions)
    if dataset == "imagenet-c":
        if md5:
            raise ValueError("--md5: ImageNet-C has no checksum manifest (it is installed by hand); check without it")
        return check_imagenet_c(data_dir, corruptions, severities)
    raise ValueError(f"dataset={dataset!r}: expected one of cifar10-c, cifar100-c, imagenet-c, fmnist-c")
