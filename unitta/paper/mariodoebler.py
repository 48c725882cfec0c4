"""A second anchor: the errors published by the other TTA benchmark (Döbler et al.'s test-time-adaptation
repository, ``classification/benchmark.md``), as package data.

``mariodoebler_benchmark.csv`` holds its 338 figures, one row per (protocol, dataset, architecture, method):
online TTA at severity 5, batch 200 (CIFAR-10/100-C) or 64 (ImageNet variants), the mean over seeds 1-5.
``load_mariodoebler_table()`` returns them with the names this project uses beside the printed ones: the
registry method, the dataset, the model, and the stream (sampler, setting, delta) of each protocol
(docs/streams.md, "The other benchmark's protocols"; docs/analysis.md, "Comparing with the other benchmark").
"""

from __future__ import annotations

import re
from importlib import resources

import polars as pl

from unitta.streams.protocols import PROTOCOL_SETTINGS

__all__ = [
    "MARIODOEBLER_METHODS",
    "MARIODOEBLER_DATASETS",
    "MARIODOEBLER_ARCHITECTURES",
    "MARIODOEBLER_PROTOCOLS",
    "load_mariodoebler_table",
    "protocol_of",
]

#: The printed method names -> the project's registry names.
MARIODOEBLER_METHODS: dict[str, str] = {
    "Source": "test",
    "BN-1": "bn",
    "TENT": "tent",
    "EATA": "eata",
    "SAR": "sar",
    "CoTTA": "cotta",
    "RoTTA": "rotta",
    "AdaCont.": "adacontrast",
    "RMT": "rmt",
    "LAME": "lame",
    "ROID": "roid",
}

#: The printed dataset names -> the project's datasets (ImageNet-R / -Sketch / -D109 have no counterpart here).
MARIODOEBLER_DATASETS: dict[str, str] = {
    "CIFAR10-C": "cifar10-c", "CIFAR100-C": "cifar100-c", "ImageNet-C": "imagenet-c"
}

#: The printed architectures -> the model names of this project's zoo that are the same network and weights
#: (robustbench's Standard WRN-28-10, Hendrycks2020AugMix_ResNeXt, Standard_R50); the others have none here.
MARIODOEBLER_ARCHITECTURES: dict[str, str] = {
    "WRN-28": "Standard",
    "ResNext-29": "Hendrycks2020AugMix_ResNeXt",
    "ResNet-50": "Standard_R50",
}

#: The printed protocols -> the stream that reproduces them here: (sampler kind, setting code).
#: 'ulmm' = the official or exact sampler; continual and mixed domains are the ULMM settings i111 / i1i1.
MARIODOEBLER_PROTOCOLS: dict[str, tuple[str, str]] = {
    "Continual": ("ulmm", "i111"),
    "Mixed domains": ("ulmm", "i1i1"),
    "Correlated": ("sorted", PROTOCOL_SETTINGS["sorted"]),
    "Mixed domains, correlated": ("dirichlet", PROTOCOL_SETTINGS["dirichlet"]),
}

_DELTA_NOTE = re.compile(r"Dirichlet value set to ([0-9.eE+-]+)")
_SCHEMA = {
    "protocol": pl.String,
    "dataset": pl.String,
    "note": pl.String,
    "architecture": pl.String,
    "method": pl.String,
    "error": pl.Float64,
    "plusminus": pl.Float64,
}


def load_mariodoebler_table() -> pl.DataFrame:
    """The other benchmark's errors (%): the CSV's columns (protocol, dataset, note, architecture, method, error,
    plusminus) plus ``method_name``, ``dataset_name``, ``model_name`` (null where this project has no
    counterpart), ``sampler`` ('ulmm' | 'sorted' | 'dirichlet'), ``setting`` and ``delta`` (dirichlet only)."""
    with resources.files(__package__).joinpath("mariodoebler_benchmark.csv").open("rb") as fh:
        df = pl.read_csv(fh, schema=_SCHEMA)
    unknown = sorted(set(df["protocol"].to_list()) - set(MARIODOEBLER_PROTOCOLS))
    if unknown:  # a corrupted or edited package file: say so instead of mismatching silently
        raise ValueError(f"mariodoebler_benchmark.csv: unknown protocol(s) {unknown}")
    deltas = [_delta(note) for note in df["note"].to_list()]
    return df.with_columns(
        pl.col("method").replace_strict(MARIODOEBLER_METHODS, default=None).alias("method_name"),
        pl.col("dataset").replace_strict(MARIODOEBLER_DATASETS, default=None).alias("dataset_name"),
        pl.col("architecture").replace_strict(MARIODOEBLER_ARCHITECTURES, default=None).alias("model_name"),
        pl.col("protocol").replace_strict({p: s for p, (s, _) in MARIODOEBLER_PROTOCOLS.items()}).alias("sampler"),
        pl.col("protocol").replace_strict({p: c for p, (_, c) in MARIODOEBLER_PROTOCOLS.items()}).alias("setting"),
        pl.Series("delta", deltas, dtype=pl.Float64),
    )


def _delta(note: str | None) -> float | None:
    match = _DELTA_NOTE.search(note or "")
    return float(match.group(1)) if match else None


def protocol_of(sampler: str, setting: str, delta: float | None = None) -> str | None:
    """The other benchmark's protocol that a stream of ours reproduces, or None (most ULMM settings)."""
    for protocol, (kind, code) in MARIODOEBLER_PROTOCOLS.items():
        same_kind = kind == sampler or (kind == "ulmm" and sampler in ("official", "exact"))
        if same_kind and code == setting:
            return protocol
    return None
