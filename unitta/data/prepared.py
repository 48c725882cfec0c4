"""A decoded ImageNet-C cache: one memory-mapped uint8 array per (corruption, severity).

Lazy JPEG decoding manages a few hundred images per second per CPU thread (docs/benchmarks.md),
far below what one GPU consumes on ResNet-50. ``python -m unitta.data prepare imagenet-c`` decodes
every image once, exactly as the lazy path does (``decode_image``: shorter side resized to 224,
centre crop), into ``<data_dir>/ImageNet-C-prepared/<corruption>/<severity>.npy`` (uint8
(N, 224, 224, 3), files in the lazy path's order: sorted wnids, then sorted names) beside a JSON
manifest ``<severity>.json`` (class wnids, file names, size, a sha256 per chunk of rows, and a hash
of the manifest itself). The array is written to a temporary name and renamed, and the manifest is
written (atomically) only after it: a partial cache never looks complete.

Loading checks the manifest's own hash and the array's file size (cheap); ``verify=True`` re-hashes
every chunk. Arrays are opened with ``np.load(mmap_mode='r')``, so every cell on a node shares the
operating system's page cache instead of holding its own copy. At 150,528 bytes per image the cache
takes 7.5 GB per corruption and severity (113 GB for the paper's 15 corruptions at severity 5).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from unitta.data.base import CorruptedDataset
from unitta.data.imagenet_files import IMAGE_SIZE, SOURCE, decode_image, list_domain
from unitta.files import write_atomically

PREPARED_DIR = "ImageNet-C-prepared"
PREPARED_FORMAT = 1  # bump when the layout or the decoding changes: older caches are then refused
CHUNK_ROWS = 256  # rows per worker task and per checksum (about 38 MB of pixels)
_TO_UNIT = np.arange(256, dtype=np.float32) / np.float32(255.0)  # uint8 value -> float32 in [0, 1]
_PREPARE_HINT = "rebuild it with `python -m unitta.data prepare imagenet-c --dir DATA_DIR --force`"


def cache_paths(data_dir: str | Path, corruption: str, severity: int) -> tuple[Path, Path]:
    """(array, manifest) paths of one domain's cache."""
    folder = Path(data_dir) / PREPARED_DIR / corruption
    return folder / f"{severity}.npy", folder / f"{severity}.json"


def _manifest_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Manifest:
    """What one cache file holds: its classes, files (``wnid/name``) and chunk checksums."""

    corruption: str
    severity: int
    image_size: int
    classes: list[str]
    files: list[str]
    npy_bytes: int
    chunk_rows: int
    chunk_sha256: list[str]
    format: int = PREPARED_FORMAT

    @property
    def labels(self) -> np.ndarray:
        class_of = {w: k for k, w in enumerate(self.classes)}
        return np.array([class_of[name.split("/", 1)[0]] for name in self.files], dtype=np.int64)

    def to_json(self) -> str:
        body = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return json.dumps({**body, "manifest_sha256": _manifest_hash(body)})


def read_manifest(data_dir: str | Path, corruption: str, severity: int) -> Manifest | None:
    """The domain's manifest after the cheap checks, or None when the domain was never prepared.

    Raises ValueError for a cache that exists but is damaged or stale (edited manifest, array of
    the wrong size, older format): using it would be wrong and ignoring it silently would hide that.
    """
    npy, manifest_path = cache_paths(data_dir, corruption, severity)
    if not manifest_path.is_file():
        return None
    try:
        body = json.loads(manifest_path.read_text())
        stated = body.pop("manifest_sha256")
        manifest = Manifest(**body)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{manifest_path}: unreadable cache manifest ({err}); {_PREPARE_HINT}") from None
    if stated != _manifest_hash(body):
        raise ValueError(f"{manifest_path}: the manifest's hash does not match its content; {_PREPARE_HINT}")
    if manifest.format != PREPARED_FORMAT:
        raise ValueError(
            f"{manifest_path}: cache format {manifest.format}, this unitta reads {PREPARED_FORMAT}; {_PREPARE_HINT}"
        )
    size = npy.stat().st_size if npy.is_file() else None
    if size != manifest.npy_bytes:
        raise ValueError(f"{npy}: {size} bytes, its manifest says {manifest.npy_bytes}; {_PREPARE_HINT}")
    return manifest


def verify_domain(data_dir: str | Path, corruption: str, severity: int) -> None:
    """Re-hash every chunk of one domain's cache; ValueError naming the first bad chunk."""
    manifest = read_manifest(data_dir, corruption, severity)
    if manifest is None:
        raise FileNotFoundError(f"{cache_paths(data_dir, corruption, severity)[1]} not found: not prepared")
    array = np.load(cache_paths(data_dir, corruption, severity)[0], mmap_mode="r")
    for k, expected in enumerate(manifest.chunk_sha256):
        rows = array[k * manifest.chunk_rows : (k + 1) * manifest.chunk_rows]
        if hashlib.sha256(np.ascontiguousarray(rows).data).hexdigest() != expected:
            start = k * manifest.chunk_rows
            raise ValueError(
                f"{cache_paths(data_dir, corruption, severity)[0]}: rows {start}..{start + len(rows) - 1} "
                f"differ from their checksum; {_PREPARE_HINT}"
            )


# ---------------------------------------------------------------------------- preparing


def _decode_chunk(task: tuple[str, str, list[str], int, int]) -> tuple[int, int, str]:
    """Worker: decode ``names`` into rows ``start:`` of the temporary array; (start, count, sha256)."""
    array_path, folder, names, start, size = task
    images = []
    for name in names:
        try:
            images.append(decode_image(os.path.join(folder, name), size))
        except Exception as err:  # Pillow raises OSError subclasses; report the file, not a traceback
            raise ValueError(f"{os.path.join(folder, name)}: cannot decode ({type(err).__name__}: {err})") from None
    block = np.stack(images)
    array = np.load(array_path, mmap_mode="r+")
    array[start : start + len(names)] = block
    array.flush()
    del array
    return start, len(names), hashlib.sha256(block.data).hexdigest()


def prepare_domain(
    data_dir: str | Path,
    corruption: str,
    severity: int,
    workers: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
    progress: bool = False,
) -> Manifest:
    """Decode one ``ImageNet-C/<corruption>/<severity>`` folder into its cache (``workers`` processes).

    progress: a tqdm bar over the images, advanced as chunks finish.
    """
    from tqdm.auto import tqdm

    root = Path(data_dir) / "ImageNet-C"
    folder = root / corruption / str(severity)
    hint = f"prepare needs the extracted ImageNet-C tree ({SOURCE}) under {root}"
    classes, files = list_domain(folder, hint)
    npy, manifest_path = cache_paths(data_dir, corruption, severity)
    npy.parent.mkdir(parents=True, exist_ok=True)
    tmp = npy.with_name(f".{npy.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    shape = (len(files), IMAGE_SIZE, IMAGE_SIZE, 3)
    np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=shape).flush()
    tasks = [
        (str(tmp), str(folder), files[start : start + chunk_rows], start, IMAGE_SIZE)
        for start in range(0, len(files), chunk_rows)
    ]
    hashes: list[str] = [""] * len(tasks)
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    bar = tqdm(total=len(files), desc=f"{corruption}_{severity}", unit="img", disable=not progress)
    try:
        if workers == 1:
            results = map(_decode_chunk, tasks)
            for start, count, digest in results:
                hashes[start // chunk_rows] = digest
                bar.update(count)
        else:
            # fork: the workers only run Pillow and numpy, and need none of the parent's imports again
            context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
            with context.Pool(workers) as pool:
                for start, count, digest in pool.imap_unordered(_decode_chunk, tasks):
                    hashes[start // chunk_rows] = digest
                    bar.update(count)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, npy)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    manifest = Manifest(
        corruption=corruption,
        severity=int(severity),
        image_size=IMAGE_SIZE,
        classes=classes,
        files=files,
        npy_bytes=npy.stat().st_size,
        chunk_rows=chunk_rows,
        chunk_sha256=hashes,
    )
    write_atomically(manifest_path, lambda handle: handle.write(manifest.to_json().encode()))
    return manifest


def prepare_imagenet_c(
    data_dir: str | Path,
    severities: Sequence[int],
    corruptions: Sequence[str],
    workers: int | None = None,
    force: bool = False,
    verify: bool = False,
    progress: bool = True,
) -> list[str]:
    """Prepare every (corruption, severity) domain not already cached; returns what it did per domain.

    An existing, intact cache is kept (``force`` rebuilds it); ``verify`` re-hashes kept caches.
    """
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise ValueError(f"workers={workers!r}: expected a positive integer")
    done = []
    for corruption in corruptions:
        for severity in severities:
            name = f"{corruption}_{severity}"
            try:
                existing = None if force else read_manifest(data_dir, corruption, severity)
            except ValueError:
                existing = None  # damaged or stale: rebuilt below
            if existing is not None:
                if verify:
                    verify_domain(data_dir, corruption, severity)
                done.append(f"{name}: kept ({len(existing.files)} images{', verified' if verify else ''})")
                continue
            started = time.perf_counter()
            manifest = prepare_domain(data_dir, corruption, severity, workers=workers, progress=progress)
            rate = len(manifest.files) / (time.perf_counter() - started)
            done.append(f"{name}: prepared ({len(manifest.files)} images, {rate:,.0f} images/s)")
    return done


# ---------------------------------------------------------------------------- loading


@dataclass
class PreparedDataset(CorruptedDataset):
    """ImageNet-C domains read from the decoded cache; item i of domain d is row ``rows[d][j]``.

    ``rows[d]`` is None when domain d uses every row of its array in order (no ``n_per_domain``).
    The memory maps are opened on first use in each process and dropped when pickled (Ray).
    """

    arrays: list[str] = field(kw_only=True)
    rows: list[np.ndarray | None] = field(kw_only=True, repr=False)

    def __post_init__(self) -> None:
        sizes = [len(r) if r is not None else int(np.sum(self.domains == d)) for d, r in enumerate(self.rows)]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if self.offsets[-1] != len(self.labels):
            raise ValueError(f"rows: {self.offsets[-1]} entries for {len(self.labels)} labels")
        self._maps: list[np.ndarray | None] = [None] * len(self.arrays)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_maps"] = [None] * len(self.arrays)  # memory maps are reopened, not pickled
        return state

    def _array(self, domain: int) -> np.ndarray:
        if self._maps[domain] is None:
            self._maps[domain] = np.load(self.arrays[domain], mmap_mode="r")
        return self._maps[domain]

    def get_batch_uint8(self, indices: np.ndarray) -> np.ndarray:
        """The images at ``indices`` as uint8 (B, S, S, 3), copied out of the memory maps."""
        indices = np.asarray(indices, dtype=np.int64)
        domains = self.domains[indices]
        local = indices - self.offsets[domains]
        first = self._array(int(domains[0])) if len(indices) else np.empty((0, 1, 1, 3), np.uint8)
        out = np.empty((len(indices),) + first.shape[1:], dtype=np.uint8)
        for d in np.unique(domains):
            mask = domains == d
            rows = local[mask] if self.rows[d] is None else self.rows[d][local[mask]]
            out[mask] = self._array(int(d))[rows]
        return out

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        """Images at ``indices`` as float32 (B, 3, S, S) in [0, 1] (contiguous NCHW), equal to the lazy path's.

        One table lookup through the transposed view converts and reorders in a single pass (about twice
        as fast as a permuted copy followed by a division); ``v / 255`` in float32 is the same number either way.
        """
        return torch.from_numpy(_TO_UNIT[self.get_batch_uint8(indices).transpose(0, 3, 1, 2)])


def load_prepared(
    data_dir: str | Path,
    manifests: list[Manifest],
    keeps: list[np.ndarray | None],
    verify: bool = False,
) -> PreparedDataset:
    """A PreparedDataset over the given domains' caches; ``keeps[d]``: the rows of a subset, or None."""
    classes = manifests[0].classes
    for m in manifests[1:]:
        if m.classes != classes:
            raise ValueError(
                f"{cache_paths(data_dir, m.corruption, m.severity)[1]}: {len(m.classes)} classes differ from "
                f"the {len(classes)} of {manifests[0].corruption}_{manifests[0].severity}"
            )
    if verify:
        for m in manifests:
            verify_domain(data_dir, m.corruption, m.severity)
    labels = [m.labels if keep is None else m.labels[keep] for m, keep in zip(manifests, keeps)]
    return PreparedDataset(
        name="imagenet-c",
        labels=np.concatenate(labels),
        domains=np.repeat(np.arange(len(manifests), dtype=np.int64), [len(x) for x in labels]),
        domain_names=[f"{m.corruption}_{m.severity}" for m in manifests],
        num_classes=len(classes),
        meta={"root": str(Path(data_dir) / PREPARED_DIR), "classes": classes, "prepared": True},
        arrays=[str(cache_paths(data_dir, m.corruption, m.severity)[0]) for m in manifests],
        rows=[None if keep is None else np.asarray(keep, dtype=np.int64) for keep in keeps],
    )
