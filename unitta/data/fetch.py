"""``python -m unitta.data fetch cifar10-c|cifar100-c --dir DIR``: download the CIFAR-C archives robustbench uses.

The source of truth is robustbench (``robustbench.data.ZENODO_CORRUPTIONS_LINKS``: Zenodo record and
archive name per dataset; ``robustbench.zenodo_download.RECORDS_ENTRY_POINT``: the Zenodo API). As in
robustbench's ``zenodo_download``, the record's API entry gives each archive's URL, size and md5.
robustbench's own transfer has no timeout and cannot resume, so the bytes move through
``unitta.data.download`` (timeouts, Range resume on ``<archive>.part``, md5 check). The archive is then
extracted into a temporary folder next to the target, its files' md5 sums are written to ``MD5SUMS``
(for ``python -m unitta.data check --md5`` and ``md5sum -c``), and only then is the folder renamed
to ``DIR/CIFAR-10-C`` (the layout ``unitta.data.cifar_c`` reads). An interrupted run leaves no
``CIFAR-10-C`` folder, only a ``.part`` (resumed next time) or a verified ``.tar`` (extracted next time).

``UNITTA_ZENODO_API`` overrides the API entry point (a mirror with Zenodo's record format; the tests
serve one on 127.0.0.1). ImageNet-C is too large and too slow on Zenodo to fetch blindly: ``fetch
imagenet-c`` prints the steps instead (``imagenet_c_steps``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
from pathlib import Path

from unitta.data.cifar_c import SOURCES
from unitta.data.download import Digest, DownloadError, download, fetch_json, file_digest
from unitta.data.robustbench_compat import import_robustbench

FETCHABLE = ("cifar10-c", "cifar100-c")
_RB_DATASET = {"cifar10-c": "cifar10", "cifar100-c": "cifar100"}  # robustbench's BenchmarkDataset values
MANIFEST = "MD5SUMS"


def _robustbench_source(dataset: str) -> tuple[str, str, str, str]:
    """(API entry point, record id, archive name, extracted folder name) from robustbench."""
    import_robustbench()
    from robustbench.data import CORRUPTIONS_DIR_NAMES, ZENODO_CORRUPTIONS_LINKS
    from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel
    from robustbench.zenodo_download import RECORDS_ENTRY_POINT

    key = BenchmarkDataset(_RB_DATASET[dataset])
    record, names = ZENODO_CORRUPTIONS_LINKS[key]
    api = os.environ.get("UNITTA_ZENODO_API") or RECORDS_ENTRY_POINT
    return api, record, next(iter(names)), CORRUPTIONS_DIR_NAMES[key][ThreatModel.corruptions]


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".unitta-write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise DownloadError(
            f"cannot write to {directory} ({err.strerror}): pick a writable --dir, or fetch elsewhere and copy "
            "the folder there"
        ) from err


def _manual(dataset: str, record: str, archive: str, directory: Path) -> str:
    return (
        f"by hand: download https://zenodo.org/records/{record}/files/{archive} on a machine with internet, "
        f"extract it into {directory}, then run `python -m unitta.data check {dataset} --dir {directory}`"
    )


def write_md5sums(folder: Path) -> Path:
    """``MD5SUMS`` in ``md5sum`` format for every ``.npy`` in ``folder``."""
    lines = [f"{file_digest(p, 'md5')}  {p.name}\n" for p in sorted(folder.glob("*.npy"))]
    path = folder / MANIFEST
    path.write_text("".join(lines))
    return path


def _extract(archive: Path, directory: Path, folder_name: str) -> Path:
    """Extract into a temporary folder, write MD5SUMS, then rename into place.

    The archive's md5 already vouches for its content; ``python -m unitta.data check`` checks the layout.
    """
    staging = directory / f".{folder_name}.extracting-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")  # 'data': no absolute paths, links out or device files
        inner = staging / folder_name
        if not inner.is_dir():
            raise DownloadError(f"{archive}: has no top-level {folder_name}/ folder; delete it and rerun")
        write_md5sums(inner)
        os.replace(inner, directory / folder_name)
    except (OSError, tarfile.TarError) as err:
        raise DownloadError(f"cannot extract {archive} into {directory}: {err}") from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory / folder_name


def fetch_cifar_c(dataset: str, directory: str | Path, progress: bool = True, keep_archive: bool = False) -> Path:
    """Download and install ``CIFAR-10-C`` / ``CIFAR-100-C`` into ``directory``; returns the dataset folder.

    Nothing happens when the folder exists (``python -m unitta.data check`` says whether it is sound).
    """
    if dataset not in FETCHABLE:
        raise ValueError(f"dataset={dataset!r}: fetchable are {', '.join(FETCHABLE)}")
    directory = Path(directory)
    target = directory / SOURCES[dataset][0]
    if target.is_dir():
        return target
    _check_writable(directory)  # before robustbench's slow import: fail fast
    api, record, archive_name, folder_name = _robustbench_source(dataset)
    if folder_name != target.name:
        raise DownloadError(f"robustbench now extracts {dataset} into {folder_name}/, unitta reads {target.name}/")
    archive = directory / archive_name
    if not archive.is_file():
        url = f"{api.rstrip('/')}/{record}"
        try:
            entry = next(f for f in fetch_json(url)["files"] if f["key"] == archive_name)
            file_url, size = entry["links"]["self"], int(entry["size"])
            algorithm, _, checksum = entry["checksum"].rpartition(":")
        except DownloadError as err:
            raise DownloadError(f"{err}; {_manual(dataset, record, archive_name, directory)}") from err
        except (KeyError, TypeError, ValueError, StopIteration) as err:
            raise DownloadError(
                f"{url}: no usable entry for {archive_name} (the API format changed?); "
                + _manual(dataset, record, archive_name, directory)
            ) from err
        try:
            part = download(
                file_url, archive.with_name(archive.name + ".part"), size, Digest(algorithm or "md5", checksum),
                progress=progress,
            )
        except DownloadError as err:
            raise DownloadError(f"{err} ({_manual(dataset, record, archive_name, directory)})") from err
        os.replace(part, archive)  # the archive's name now means "complete and verified"
    if progress:
        print(f"extracting {archive} ...", file=sys.stderr, flush=True)
    folder = _extract(archive, directory, folder_name)
    if not keep_archive:
        archive.unlink()
    return folder


def imagenet_c_steps(directory: str | Path) -> str:
    """How to obtain ImageNet-C and the layout ``unitta.data.imagenet_c`` reads."""
    directory = Path(directory)
    return f"""ImageNet-C is not fetched automatically (about 66 GB from Zenodo, hours of transfer). To install it:
  1. Download blur.tar, digital.tar, noise.tar and weather.tar from https://zenodo.org/records/2235448
     (Hendrycks & Dietterich, ICLR 2019). extra.tar holds the 4 held-out corruptions (speckle_noise,
     gaussian_blur, spatter, saturate): needed only for hyper-parameter selection on held-out data (holdout).
     Resumable: `wget -c https://zenodo.org/records/2235448/files/noise.tar` (likewise for the others).
  2. mkdir -p {directory / 'ImageNet-C'} && for t in blur digital noise weather; do
       tar -xf $t.tar -C {directory / 'ImageNet-C'}; done   (add extra to the list for the held-out 4)
  3. The layout is then {directory / 'ImageNet-C'}/<corruption>/<severity 1-5>/<wnid>/*.JPEG:
     15 corruptions x 5 severities, 1,000 wnid folders of 50 images each (50,000 per severity).
  4. Check it: python -m unitta.data check imagenet-c --dir {directory}"""
