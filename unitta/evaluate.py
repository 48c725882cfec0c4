"""One benchmark cell: stream x model x method -> one result row (the paper's metric, spec 5.1).

A cell is one (dataset, model, method, setting, factors, sampler, seed, batch size) tuple.
``evaluate(cell)`` builds the stream, feeds it to the method in stream order in batches (the last,
partial batch too, even of size 1: unlike the reference, nothing is skipped) and scores every
prediction. The row's columns are documented in ``docs/results.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["Cell", "evaluate", "DEFAULT_MODELS"]

# The paper's model per dataset (spec 4.4) and the embedded default.
DEFAULT_MODELS = {
    "fmnist-c": "resnet20",
    "cifar10-c": "Standard",
    "cifar100-c": "Hendrycks2020AugMix_ResNeXt",
    "imagenet-c": "Standard_R50",
}

# Fields that say where things are or how fast they run, not what is computed: excluded from the hash.
_PLACEMENT_FIELDS = ("data_dir", "checkpoint_dir", "device", "num_threads")


@dataclass(frozen=True)
class Cell:
    """Everything that determines one result row.

    factors: overrides of the setting's default factors, keys among
        domain_alpha, domain_beta, class_alpha, class_beta (spec 1.1).
    S: the official sampler's per-state cap (None: the dataset's default, spec 1.1; with
        n_per_domain set, at most the subset's pool size per (domain, class)).
    length: the exact sampler's stream length N (None: the dataset's size).
    method_kwargs: hyper-parameter overrides passed to ``get_method``.
    n_per_domain: use a class-balanced subset of this many images per domain (small tests/debugging).
    """

    dataset: str = "fmnist-c"
    method: str = "test"
    setting: str = "i111"
    model: str | None = None
    method_kwargs: dict[str, Any] = field(default_factory=dict)
    sampler: str = "official"
    factors: dict[str, float] = field(default_factory=dict)
    S: int | None = None
    length: int | None = None
    seed: int = 425
    batch_size: int = 64
    severity: int = 5
    n_per_domain: int | None = None
    data_dir: str | None = None
    checkpoint_dir: str | None = None
    device: str = "auto"
    num_threads: int | None = None

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODELS.get(self.dataset, "")

    def identity(self) -> dict[str, Any]:
        """The fields that determine the result (placement fields excluded), JSON-ready."""
        data = dataclasses.asdict(self)
        for key in _PLACEMENT_FIELDS:
            data.pop(key)
        data["model"] = self.model_name
        return data

    def config_hash(self) -> str:
        """A stable 16-hex-digit hash of ``identity()``: equal cells give equal hashes."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def cell_id(self) -> str:
        """A readable, file-name-safe id: dataset__method__setting__hash."""
        return f"{self.dataset}__{self.method}__{self.setting}__{self.config_hash()}"


def _pick_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _peak_memory_mb(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is in KiB on Linux: the whole process's peak resident size
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _breakdown(keys: np.ndarray, correct: np.ndarray, names: list[str] | None) -> list[dict[str, Any]]:
    """Error (%) per value of ``keys`` (domain or class), as a list of {key, name, n, error}."""
    out = []
    for key in np.unique(keys):
        mask = keys == key
        n = int(mask.sum())
        out.append(
            {
                "key": int(key),
                "name": names[key] if names is not None else str(int(key)),
                "n": n,
                "error": float(100.0 * (1.0 - correct[mask].mean())),
            }
        )
    return out


def evaluate(
    cell: Cell,
    dataset=None,
    model_and_info=None,
    progress: bool | Callable[[int, int], None] = False,
) -> dict[str, Any]:
    """Run ``cell`` and return its result row (a flat dict, see docs/results.md).

    dataset / model_and_info: already-loaded objects to reuse (the sweep passes the dataset it put
    in Ray's object store); loaded from the cell when None.
    progress: True for a tqdm bar, or a callback(done_images, total_images).
    """
    import torch

    from unitta import __version__
    from unitta.data import load_dataset
    from unitta.methods import get_method
    from unitta.models import load_model
    from unitta.streams import make_stream
    from unitta.streams.settings import default_state_cap

    wall_start = time.perf_counter()
    if cell.num_threads:
        torch.set_num_threads(cell.num_threads)
    device = _pick_device(cell.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    if dataset is None:
        dataset = load_dataset(
            cell.dataset, data_dir=cell.data_dir, severity=cell.severity, n_per_domain=cell.n_per_domain
        )
    if model_and_info is None:
        model_and_info = load_model(cell.dataset, cell.model, checkpoint_dir=cell.checkpoint_dir)
    model, info = model_and_info
    model = model.to(device).eval()

    overrides: dict[str, Any] = dict(cell.factors)
    if cell.S is not None:
        overrides["S"] = cell.S
    elif cell.n_per_domain is not None and cell.sampler == "official":
        # A subset shrinks every (domain, class) pool; cap S at the pool size so that the stream
        # shrinks with it instead of cycling a few images up to the full dataset's S.
        pool = max(1, cell.n_per_domain // dataset.num_classes)
        overrides["S"] = min(default_state_cap(cell.setting, cell.dataset), pool)
    if cell.length is not None:
        overrides["length"] = cell.length
    stream = make_stream(
        dataset.labels,
        dataset.domains,
        cell.setting,
        dataset=cell.dataset,
        sampler=cell.sampler,
        seed=cell.seed,
        **overrides,
    )

    method = get_method(cell.method, model, info, dataset=cell.dataset, seed=cell.seed, **cell.method_kwargs)

    n = len(stream.indices)
    predictions = np.empty(n, dtype=np.int64)
    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=f"{cell.method} {cell.setting}", unit="img", leave=False)
    data_seconds = 0.0
    with torch.inference_mode(False):
        for start in range(0, n, cell.batch_size):
            batch_indices = stream.indices[start : start + cell.batch_size]
            t0 = time.perf_counter()
            x = dataset.get_batch(batch_indices).to(device, non_blocking=True)
            data_seconds += time.perf_counter() - t0
            scores = method(x)
            if not torch.isfinite(scores).all():
                raise FloatingPointError(
                    f"{cell.method} produced non-finite outputs at stream position {start} (batch of {len(x)})"
                )
            predictions[start : start + len(x)] = scores.argmax(dim=1).cpu().numpy()
            if bar is not None:
                bar.update(len(x))
            elif callable(progress):
                progress(start + len(x), n)
    if bar is not None:
        bar.close()

    labels = dataset.labels[stream.indices]
    correct = predictions == labels
    domain_names = list(dataset.domain_names)
    cost = method.cost
    row: dict[str, Any] = {
        "cell_id": cell.cell_id(),
        "config_hash": cell.config_hash(),
        "dataset": cell.dataset,
        "model": cell.model_name,
        "method": cell.method,
        "method_kwargs": json.dumps(cell.method_kwargs, sort_keys=True),
        "setting": stream.setting.code,
        "class_setting": stream.setting.class_notation,
        "domain_setting": stream.setting.domain_notation,
        "sampler": cell.sampler,
        "seed": cell.seed,
        "batch_size": cell.batch_size,
        "severity": cell.severity,
        "n_per_domain": cell.n_per_domain,
        "S": stream.S,
        "domain_alpha": float(stream.factors["domain_alpha"]),
        "domain_beta": float(stream.factors["domain_beta"]),
        "class_alpha": float(stream.factors["class_alpha"]),
        "class_beta": float(stream.factors["class_beta"]),
        "error": float(100.0 * (1.0 - correct.mean())),  # the paper's "Total Avg" micro error (spec 5.1)
        "n_samples": int(n),
        "n_correct": int(correct.sum()),
        "images_reused": int(stream.n_reused),
        "domains_discovered": method.num_domains(),
        "per_domain": _breakdown(stream.domains, correct, domain_names),
        "per_class": _breakdown(stream.classes, correct, None),
        "wall_time_s": time.perf_counter() - wall_start,
        "adapt_time_s": cost.seconds,
        "data_time_s": data_seconds,
        "images_per_s": n / cost.seconds if cost.seconds > 0 else float("nan"),
        "forwards_per_batch": cost.forwards / max(cost.batches, 1),
        "backwards_per_batch": cost.backwards / max(cost.batches, 1),
        "peak_memory_mb": _peak_memory_mb(device),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "num_threads": torch.get_num_threads(),
        "unitta_version": __version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "method_extra": json.dumps(method.extra_metrics(), sort_keys=True, default=str),
    }
    return row
