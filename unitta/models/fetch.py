"""``python -m unitta.models fetch DATASET [--name NAME] --dir DIR``: download the paper's checkpoints.

Sources are robustbench's (the UniTTA paper's models come from its "corruptions" zoo): the Google
Drive id in ``robustbench.model_zoo.model_dicts`` for ``Standard`` (CIFAR-10) and
``Hendrycks2020AugMix_ResNeXt`` (CIFAR-100), and for ImageNet's ``Standard_R50``, ``vit_b_16`` and ``swin_b``
torchvision's ``IMAGENET1K_V1`` files (``ResNet50_Weights``, ``ViT_B_16_Weights``, ``Swin_B_Weights``), each
checked against the sha256 prefix in its name. Files land where ``unitta.models.load_model`` reads them:
robustbench's ``<dir>/<dataset>/corruptions/<name>.pt`` and ``<dir>/<torchvision file name>``. The GroupNorm
ResNet-26 (``resnet26_gn``) has no public download this command knows of: it says where to put the file.

robustbench's ``load_model`` downloads through gdown, which has no timeout and no checksum, so the
bytes move through ``unitta.data.download`` (timeouts, Range resume on ``<name>.pt.part``); gdown is
used only to read Google Drive's confirmation page when Drive serves one. The zoo publishes no
checksums, so a downloaded checkpoint is verified by loading it (``torch.load(weights_only=True)``) into
its architecture before it gets its final name. ``UNITTA_CHECKPOINT_MIRROR`` (a URL serving the same
layout as ``--dir``, e.g. ``python -m http.server`` in a checkpoint folder) replaces both sources, for
clusters without internet and for the tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from unitta.data.download import TIMEOUT_S, Digest, DownloadError, download
from unitta.data.robustbench_compat import import_robustbench
from unitta.models import zoo

GDRIVE_URL = "https://drive.usercontent.google.com/download?id={id}&export=download&confirm=t"


def _gdrive_url(file_id: str, timeout: float) -> str:
    """The direct download URL of a public Drive file, through Drive's confirmation page when it serves one."""
    import urllib.request

    url = GDRIVE_URL.format(id=file_id)
    request = urllib.request.Request(url, headers={"Range": "bytes=0-0", "User-Agent": "unitta-fetch"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if not response.headers.get("Content-Type", "").startswith("text/html"):
                return url
            page = response.read().decode("utf-8", "replace")
    except OSError as err:
        raise DownloadError(f"cannot reach Google Drive ({url}): {getattr(err, 'reason', err)}") from err
    from gdown.download import get_url_from_gdrive_confirmation
    from gdown.exceptions import FileURLRetrievalError

    try:
        return get_url_from_gdrive_confirmation(page)
    except FileURLRetrievalError as err:
        reason = " ".join(str(err).split())[:200]
        raise DownloadError(f"Google Drive refuses {url} ({reason})") from err


def _source(dataset: str, name: str, directory: Path) -> tuple[str | None, Path, Digest | None]:
    """(URL or None for a Drive id still to resolve, target path, expected digest) for one checkpoint."""
    mirror = os.environ.get("UNITTA_CHECKPOINT_MIRROR", "").rstrip("/")
    _, entry = zoo.model_entry(dataset, name)
    if entry.source == "torchvision":
        import torch.hub
        import torchvision

        url = torchvision.models.get_weight(entry.torchvision_weights).url
        filename = url.rsplit("/", 1)[-1]
        if filename != entry.weights_file:  # the name load_model looks for
            raise DownloadError(f"torchvision now serves {filename}, not {entry.weights_file}; update unitta")
        prefix = re.search(torch.hub.HASH_REGEX, filename).group(1)
        return (f"{mirror}/{filename}" if mirror else url), directory / filename, Digest("sha256", prefix)
    if entry.weights_file is not None:  # a file of its own with no known public source
        if not mirror:
            raise DownloadError(
                f"{name}: no public download is known for {entry.weights_file}; copy the checkpoint to "
                f"{directory / entry.weights_file} (or serve it with UNITTA_CHECKPOINT_MIRROR)"
            )
        return f"{mirror}/{entry.weights_file}", directory / entry.weights_file, None
    relative = f"{entry.rb_dataset}/corruptions/{name}.pt"
    return (f"{mirror}/{relative}" if mirror else None), directory / relative, None


def _gdrive_id(dataset: str, name: str) -> str:
    try:
        import_robustbench()
        from robustbench.model_zoo import model_dicts
        from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel
    except ImportError as err:
        raise DownloadError(f"robustbench, which holds the Drive id of {name}, cannot be imported: {err}") from err

    _, entry = zoo.model_entry(dataset, name)
    return model_dicts[BenchmarkDataset(entry.rb_dataset)][ThreatModel.corruptions][name]["gdrive_id"]


def _verify(dataset: str, name: str, path: Path, trust_checkpoints: bool) -> None:
    """Load ``path`` into the model's architecture (the zoo has no checksums); raises CheckpointError."""
    model, _ = zoo.build_model(dataset, name)
    _, entry = zoo.model_entry(dataset, name)
    try:
        zoo.load_weights(model, zoo.read_state_dict(path, trust_checkpoints), entry, path)
    except zoo.CheckpointError:
        raise
    except ValueError as err:
        raise zoo.CheckpointError(str(err)) from err


def fetch_checkpoint(
    dataset: str,
    name: str | None = None,
    directory: str | Path = zoo.DEFAULT_CHECKPOINT_DIR,
    progress: bool = True,
    trust_checkpoints: bool = False,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Download one model's checkpoint into ``directory`` (robustbench's layout); returns its path.

    Nothing is downloaded when the file exists or for the embedded 'fmnist-c' model. Errors: DownloadError
    (network, checksum; one line with the manual alternative) and CheckpointError (the file does not load).
    """
    name, entry = zoo.model_entry(dataset, name)
    if entry.source == "embedded":
        return zoo.checkpoint_path(dataset, name)
    directory = Path(directory)
    try:
        url, target, digest = _source(dataset, name, directory)
    except DownloadError:
        if zoo.checkpoint_path(dataset, name, directory).is_file():
            return zoo.checkpoint_path(dataset, name, directory)
        raise
    if target.is_file():
        return target
    manual = (
        f"offline: run `python -m unitta.models fetch {dataset} --name {name} --dir DIR` on a machine with internet "
        f"and copy DIR/{target.relative_to(directory)} to {target}"
    )
    part = target.with_name(target.name + ".part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(part, "ab"):
            pass
    except OSError as err:
        raise DownloadError(f"cannot write {part} ({err.strerror}): pick a writable --dir ({manual})") from err
    try:
        url = url or _gdrive_url(_gdrive_id(dataset, name), timeout)
        download(url, part, digest=digest, progress=progress, timeout=timeout)
    except BaseException as err:
        if part.is_file() and not part.stat().st_size:
            part.unlink()  # the writability probe's empty file, whatever stopped the download
        if isinstance(err, DownloadError):
            raise DownloadError(f"{err} ({manual})") from err
        raise
    try:
        _verify(dataset, name, part, trust_checkpoints)
    except zoo.CheckpointError:
        part.unlink()  # complete but unusable: nothing to resume
        raise
    os.replace(part, target)
    return target
