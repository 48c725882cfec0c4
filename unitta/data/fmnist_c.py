"""Fashion-MNIST-C, the embedded default: prepared once from Fashion-MNIST, cached like CIFAR-10-C.

Fashion-MNIST's 10,000 test images (exactly 1,000 per class) are zero-padded 28 -> 32 and repeated
over 3 channels, then corrupted with the 15 corruptions at CIFAR-10-C's strengths
(``unitta.data.corruptions``; docs/models.md). The cache folder
``<cache>/FashionMNIST-C/`` has CIFAR-10-C's layout: ``<corruption>.npy`` uint8 (rows, 32, 32, 3)
with severities stacked in ascending order, N rows each, ``labels.npy`` (N labels), and
``meta.json`` saying which severities each file holds. With all 5 severities a file is exactly
CIFAR-10-C's 50,000 rows. A class-balanced subset (``n_per_domain``) gets its own folder
``FashionMNIST-C-n<n>/`` holding only those images, so tests never prepare the full set.

Every file is written to a temporary name and renamed (an interrupted preparation leaves the
previous, complete files), with the umask's mode like any file the user writes, and a file lock
serialises concurrent preparations (e.g. several Ray workers on a fresh machine). ``meta.json``
records each file's sha256 when it is written; loading checks it once per process and file, so a
damaged or modified file is an error instead of silently different numbers. A complete cache on a
read-only volume (a shared cluster volume) is read without writing anything, not even the lock.
Corruption randomness is per image, so results do not depend on the
chunking and a subset has the same pixels as the same images of the full set.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from unitta.data.arrays import ArrayDataset, balanced_subset
from unitta.data.cifar_c import read_npy_domains
from unitta.data.download import file_digest
from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.data.records import CORRUPTIONS
from unitta.durations import duration_text

FOLDER = "FashionMNIST-C"
NUM_CLASSES = 10
CACHE_FORMAT = 2  # bump when the corruption code changes the pixels: old caches are then rebuilt
CORRUPTION_SEED = 0
CORRUPT_CHUNK = 1000  # images per corrupt() call (progress granularity; results do not depend on it)


class CacheError(ValueError):
    """The cache cannot be used as it is: damaged, or incomplete on a read-only volume."""


# Errors that mean "this location is not writable" (permissions, read-only volume).
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def default_cache_root() -> Path:
    """``$UNITTA_DATA``, else ``~/.cache/unitta`` (the same root as the other datasets)."""
    return Path(os.environ.get("UNITTA_DATA") or Path.home() / ".cache" / "unitta")


def cache_folder(root: Path, n_per_domain: int | None) -> Path:
    return Path(root) / (FOLDER if n_per_domain is None else f"{FOLDER}-n{n_per_domain}")


def padded_test_set() -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's test set as uint8 (10000, 32, 32, 3) (zero-padded, grey in 3 channels), labels."""
    images, labels = read_fashion_mnist("test")
    out = np.zeros((len(images), 32, 32, 3), dtype=np.uint8)
    out[:, 2:30, 2:30, :] = images[:, :, :, None]
    return out, labels


@contextlib.contextmanager
def _locked(folder: Path, exclusive: bool) -> Iterator[None]:
    """flock on ``folder/.lock``; a shared lock on a read-only cache opens the lock read-only, or skips it.

    flock needs no write access, so an existing lock file still serialises readers against writers;
    where it cannot be created the folder is read-only for everyone we could race with too.
    """
    if exclusive:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(folder / ".lock", "a+")
        except OSError as err:
            if err.errno not in _NOT_WRITABLE:
                raise
            raise CacheError(
                f"cannot write the Fashion-MNIST-C cache {folder} ({err.strerror}); for a read-only cache, build "
                "it where writable with `python -m unitta.data prepare fmnist-c --severity all --data-dir DIR` "
                "(plus --n-per-domain N for a subset) and copy it there, or point --data-dir / UNITTA_DATA elsewhere"
            ) from err
    else:
        try:
            handle = open(folder / ".lock")
        except FileNotFoundError:
            handle = None
    if handle is None:
        try:  # first reader of a writable cache: create the lock file
            handle = open(folder / ".lock", "a+")
        except OSError as err:
            if err.errno not in _NOT_WRITABLE and not isinstance(err, FileNotFoundError):
                raise
            yield  # read-only or absent folder: nothing to lock
            return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _atomic_save(path: Path, write) -> str:
    """Write via a temporary file and rename; returns the file's sha256.

    Plain ``open`` gives the file the umask's mode (0644 under the usual umask 022), so other users of a
    shared cache can read it (unlike ``tempfile.mkstemp``'s 0600).
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        digest = file_digest(tmp, "sha256")  # just written: read back from the page cache
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return digest


# (path, size, mtime_ns, inode, expected sha256) of files verified by this process: each file is hashed once.
_VERIFIED: set[tuple[str, int, int, int, str]] = set()


def _prepare_command(folder: Path) -> str:
    """The command that rebuilds the cache ``folder`` (the full set or a subset)."""
    subset = folder.name.removeprefix(f"{FOLDER}-n") if folder.name.startswith(f"{FOLDER}-n") else ""
    return (f"python -m unitta.data prepare fmnist-c --data-dir {folder.parent}"
            + (f" --n-per-domain {subset}" if subset else ""))


def verify_files(folder: Path, meta: dict, names: Sequence[str]) -> list[str]:
    """Check ``names`` in ``folder`` against the sha256 sums in ``meta``; returns the names with no recorded sum.

    A mismatch is a CacheError naming the file and how to rebuild it.
    """
    recorded = meta.get("sha256", {})
    unrecorded = []
    for name in names:
        path = folder / name
        expected = recorded.get(name)
        if expected is None:
            unrecorded.append(name)
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # the reader reports missing files with the layout they should have
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, expected)
        if key in _VERIFIED:
            continue
        if file_digest(path, "sha256") != expected:
            raise CacheError(
                f"{path}: contents differ from the sha256 recorded when the cache was built (damaged or modified). "
                f"The Fashion-MNIST-C cache {folder} looks damaged: delete it and it is rebuilt on next use "
                f"(`{_prepare_command(folder)}` does it ahead)"
            )
        _VERIFIED.add(key)
    return unrecorded


def _record_missing_sums(folder: Path, n: int, names: Sequence[str]) -> None:
    """Record sha256 sums for files of a cache built before sums were kept (trust on first use)."""
    try:
        with _locked(folder, exclusive=True):
            meta = _read_meta(folder, n)
            sums = meta.setdefault("sha256", {})
            for name in names:
                if name not in sums and (folder / name).is_file():
                    sums[name] = file_digest(folder / name, "sha256")
            _atomic_save(folder / "meta.json", lambda f: f.write(json.dumps(meta, indent=1).encode()))
    except CacheError:
        print(
            f"unitta: {folder} has no checksums for {', '.join(names)} (built by an older unitta) and is read-only, "
            "so they are not verified; rebuild the cache with `python -m unitta.data prepare fmnist-c` to add them",
            file=sys.stderr,
        )


def _read_meta(folder: Path, n: int) -> dict:
    """The cache's meta.json, or an empty one when absent or from another format / size / seed."""
    fresh = {
        "format": CACHE_FORMAT, "seed": CORRUPTION_SEED, "n": n, "parameters": "CIFAR-10-C (make_cifar_c.py)",
        "severities": {},
    }
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return fresh
    if any(meta.get(k) != fresh[k] for k in ("format", "seed", "n")):
        return fresh
    # A deleted file is rebuilt on next use (the fix the damaged-cache errors suggest).
    meta["severities"] = {c: s for c, s in meta["severities"].items() if (folder / f"{c}.npy").is_file()}
    return meta


def _missing(meta: dict, corruptions: Sequence[str], severities: Sequence[int]) -> dict[str, list[int]]:
    have = meta["severities"]
    out = {c: [s for s in severities if s not in have.get(c, [])] for c in corruptions}
    return {c: s for c, s in out.items() if s}


def prepare_fmnist_c(
    data_dir: str | Path | None = None,
    severities: Sequence[int] = (5,),
    corruptions: Sequence[str] | None = None,
    n_per_domain: int | None = None,
    progress: bool = True,
) -> Path:
    """Make sure the cache holds ``corruptions`` x ``severities``; corrupt what is missing. Returns the folder.

    data_dir: the cache root (default ``$UNITTA_DATA`` or ``~/.cache/unitta``).
    n_per_domain: prepare only the class-balanced subset (first n/10 images of each class).
    """
    from unitta.data.corruptions import corrupt  # OpenCV / scipy: only when preparing

    corruptions = list(CORRUPTIONS if corruptions is None else corruptions)
    folder = cache_folder(default_cache_root() if data_dir is None else Path(data_dir), n_per_domain)
    images, labels = padded_test_set()
    ids = np.arange(len(images)) if n_per_domain is None else balanced_subset(labels, n_per_domain, NUM_CLASSES)
    images, labels = images[ids], labels[ids]
    with _locked(folder, exclusive=True):
        meta = _read_meta(folder, len(ids))
        meta.setdefault("sha256", {})
        todo = _missing(meta, corruptions, severities)
        if not todo and (folder / "labels.npy").is_file():
            return folder
        bar = None
        if progress:
            from tqdm.auto import tqdm

            total = len(ids) * sum(len(s) for s in todo.values())
            bar = tqdm(total=total, desc="Fashion-MNIST-C", unit="img", file=sys.stderr)
        sums = meta["sha256"]
        sums["labels.npy"] = _atomic_save(folder / "labels.npy", lambda f: np.save(f, labels.astype(np.uint8)))
        for corruption, new_severities in todo.items():
            have = meta["severities"].get(corruption, [])
            old = np.load(folder / f"{corruption}.npy") if have else None
            recorded = sums.get(f"{corruption}.npy")
            path = folder / f"{corruption}.npy"
            if old is not None and recorded is not None and file_digest(path, "sha256") != recorded:
                have, old = [], None  # modified since written: rebuild it
            if old is not None and (old.shape[1:] != images.shape[1:] or len(old) != len(have) * len(ids)):
                have, old = [], None  # damaged file: rebuild it
            blocks = {s: old[k * len(ids) : (k + 1) * len(ids)] for k, s in enumerate(have)}
            for severity in new_severities:
                if bar is not None:
                    bar.set_postfix_str(f"{corruption} {severity}")
                block = np.empty_like(images)
                for start in range(0, len(ids), CORRUPT_CHUNK):
                    stop = min(start + CORRUPT_CHUNK, len(ids))
                    block[start:stop] = corrupt(
                        images[start:stop], corruption, severity, CORRUPTION_SEED, ids[start:stop]
                    )
                    if bar is not None:
                        bar.update(stop - start)
                blocks[severity] = block
            order = sorted(blocks)
            stacked = np.concatenate([blocks[s] for s in order])
            sums[f"{corruption}.npy"] = _atomic_save(
                folder / f"{corruption}.npy", lambda f, arr=stacked: np.save(f, arr)
            )
            meta["severities"][corruption] = order
            _atomic_save(folder / "meta.json", lambda f: f.write(json.dumps(meta, indent=1).encode()))
        if bar is not None:
            bar.close()
    return folder


def load_fmnist_c(
    data_dir: str | Path | None,
    severities: Sequence[int],
    corruptions: Sequence[str],
    n_per_domain: int | None,
) -> ArrayDataset:
    """Fashion-MNIST-C from the cache, preparing what is missing first (with a message on stderr)."""
    root = default_cache_root() if data_dir is None else Path(data_dir)
    if n_per_domain is not None:
        balanced_subset(np.repeat(np.arange(NUM_CLASSES), 1000), n_per_domain, NUM_CLASSES)  # validate early
    folder = cache_folder(root, n_per_domain)
    n = 10_000 if n_per_domain is None else n_per_domain
    with _locked(folder, exclusive=False):
        todo = _missing(_read_meta(folder, n), corruptions, severities)
    if todo or not (folder / "labels.npy").is_file():
        count = sum(len(s) for s in todo.values())
        print(
            f"unitta: preparing Fashion-MNIST-C in {folder}: {count} (corruption, severity) domains of "
            f"{n} images, once (about {duration_text(count * n * 0.35e-3)}; "
            f"`python -m unitta.data prepare fmnist-c` does it ahead)",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        prepare_fmnist_c(root, severities, corruptions, n_per_domain, progress=sys.stderr.isatty())
        print(f"unitta: Fashion-MNIST-C ready in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    names = ["labels.npy"] + [f"{c}.npy" for c in corruptions]
    with _locked(folder, exclusive=False):
        meta = _read_meta(folder, n)
        unrecorded = verify_files(folder, meta, names)
        hint = f"The Fashion-MNIST-C cache {folder} looks damaged: delete it and it is rebuilt on next use."
        dataset = read_npy_domains(
            folder,
            "fmnist-c",
            corruptions,
            severities,
            n,
            lambda c, s: meta["severities"][c].index(s),
            NUM_CLASSES,
            None,
            hint,
        )
    if unrecorded:
        _record_missing_sums(folder, n, unrecorded)
    dataset.meta["n_per_domain"] = n_per_domain
    return dataset
