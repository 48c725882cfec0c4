"""The ccc sampler's calibration and stream: the severity of each corruption at which the source model's error
is the target (CCC, Press et al. NeurIPS'23, calibrates its walks on the source model's accuracy the same way;
docs/long_horizon.md).

Calibration sample: the first ``SAMPLE_PER_CLASS`` clean test images of every class (fixed). Severities live on
CCC's grid, 0 to 5 in steps of 0.25 (``corruptions.parameter`` interpolates the CIFAR-10-C tables). Per
corruption the source model's error is measured at severity 5 first; a corruption whose error there stays
below the target is left out of the walk (CCC leaves out brightness for the same reason); for the others the
first grid level whose error reaches the target is found by bisection (errors grow with severity) and the
severity is interpolated linearly between that level and the one below. Every measured (corruption, level)
error is cached in ``<cache root>/ccc/<dataset>-<model>-<sha256 of the weights>.json``, so a target needs at
most a few new levels and a second cell none.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from unitta.cell import Cell
from unitta.files import write_atomically

__all__ = ["SAMPLE_PER_CLASS", "LEVELS", "calibrated_severities", "ccc_stream"]

SAMPLE_PER_CLASS = 50  # 500 images: the error at a level has a standard error of at most 2.2 points
LEVELS = 20  # CCC's severity grid: level k is severity k / 4 (oripress/CCC generate.py, 0.25 steps)
_SEED = 0
_FORMAT = 1


def _sample(labels: np.ndarray) -> np.ndarray:
    return np.concatenate([np.flatnonzero(labels == k)[:SAMPLE_PER_CLASS] for k in range(int(labels.max()) + 1)])


class _Errors:
    """The source model's error (%) per (corruption, level) on the calibration sample, measured on demand."""

    def __init__(self, model, device, images: np.ndarray, labels: np.ndarray, path: Path):
        self.model, self.device, self.images, self.labels, self.path = model, device, images, labels, path
        self.table: dict[str, float] = {}
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("format") == _FORMAT and data.get("n") == len(labels):
                self.table = data["errors"]

    def __call__(self, corruption: str, level: int) -> float:
        key = f"{corruption}@{level}"
        if key not in self.table:
            self.table[key] = self._measure(corruption, level)
            payload = json.dumps({"format": _FORMAT, "n": len(self.labels), "errors": self.table}, sort_keys=True)
            write_atomically(self.path, lambda handle: handle.write(payload.encode()))
        return self.table[key]

    def _measure(self, corruption: str, level: int) -> float:
        import torch

        from unitta.data.corruptions import corrupt_at
        from unitta.data.records import CORRUPTIONS

        cid = CORRUPTIONS.index(corruption)
        rngs = [np.random.default_rng((_SEED, cid, level, i)) for i in range(len(self.images))]
        x = corrupt_at(self.images, corruption, level / 4, rngs)
        wrong = 0
        with torch.no_grad():
            for start in range(0, len(x), 250):
                batch = torch.from_numpy(x[start : start + 250]).permute(0, 3, 1, 2).float().div_(255.0)
                predicted = self.model(batch.to(self.device)).argmax(dim=1).cpu().numpy()
                wrong += int((predicted != self.labels[start : start + 250]).sum())
        return 100.0 * wrong / len(x)


def calibrated_severities(errors, target: float, corruptions) -> dict[str, float]:
    """corruption -> the severity (0-5) at which ``errors(corruption, level)`` reaches ``target``; corruptions
    that stay below it at severity 5 are left out."""
    out = {}
    for name in corruptions:
        if errors(name, LEVELS) < target:
            continue
        lo, hi = 0, LEVELS  # errors(lo) < target <= errors(hi) (level 0: the clean images)
        if errors(name, 0) >= target:
            out[name] = 0.0
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if errors(name, mid) >= target:
                hi = mid
            else:
                lo = mid
        e_lo, e_hi = errors(name, lo), errors(name, hi)
        frac = (target - e_lo) / (e_hi - e_lo) if e_hi > e_lo else 1.0
        out[name] = (lo + frac) / 4
    return out


def ccc_stream(cell: Cell, model, device):
    """(stream, image source) of a ccc ``cell``: the calibrated walk over the clean Fashion-MNIST test images."""
    from unitta.data.ccc import ccc_images
    from unitta.data.corruptions import CONTINUOUS
    from unitta.data.fmnist_c import default_cache_root, padded_test_set
    from unitta.data.records import CORRUPTIONS, dataset_record
    from unitta.streams import make_ccc_stream

    if dataset_record(cell.dataset).loader != "fmnist":
        raise ValueError(f"sampler=ccc: runs on the embedded fmnist-c only (the clean test images and the "
                         f"corruption operators of {cell.dataset} are not here)")
    images, labels = padded_test_set()
    sample = _sample(labels)
    digest = (cell.weights or "unknown")[:16]
    path = default_cache_root() / "ccc" / f"{cell.dataset}-{cell.model_name}-{digest}.json"
    errors = _Errors(model.eval(), device, images[sample], labels[sample], path)
    ccc = cell.ccc
    assert ccc is not None, "a ccc cell has its ccc settings (Cell fills in the defaults)"
    target = ccc["target_error"]
    severities = calibrated_severities(errors, target, CONTINUOUS)
    if len(severities) < 2:
        raise ValueError(f"ccc.target_error={target:g}: the source model reaches it on {len(severities)} "
                         "corruption(s) only (a walk needs two); lower the target")
    eligible = np.array(sorted(CORRUPTIONS.index(name) for name in severities))
    length = len(labels) * len(CORRUPTIONS) if cell.length is None else cell.length
    stream = make_ccc_stream(
        labels, cell.setting, eligible=eligible, num_domains=len(CORRUPTIONS), length=length,
        transition=min(ccc["transition"], length), seed=cell.seed, dataset=cell.dataset,
        class_alpha=cell.factors.get("class_alpha"), class_beta=cell.factors.get("class_beta"),
    )
    stream.meta["severities"] = {name: round(value, 4) for name, value in severities.items()}
    by_id = {CORRUPTIONS.index(name): value for name, value in severities.items()}
    return stream, ccc_images(stream, images, by_id, cell.dataset)
