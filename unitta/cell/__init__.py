"""``Cell``: the coordinates of one benchmark result and their identity.

The cell package: ``Cell`` (this module), the table of its fields (``fields``: type, default, check,
identity, result column; ``Cell`` is made from it), a config's cell keys (``spec``), the rules of the real-time
protocol (``realtime``), rounds and resets (``horizon``) and the label-free criteria's names (``criteria``).
``unitta.evaluate`` runs a cell (the adaptation loop, its inputs, its metrics).


A cell is one (dataset, model, method, setting, factors, sampler (delta), seed, batch size) tuple plus how it
is computed (precision, compilation, profile). Its identity (``identity()``, ``config_hash()``,
``cell_id()``) covers everything that determines the result: the cell's fields without the placement
ones (where data lives, which device, how many threads), the method's *resolved* hyper-parameters
(defaults + dataset preset + profile + overrides), the method's version and the SHA-256 of the model's
checkpoint file (left out for the file every earlier row was computed with, ``zoo.REFERENCE_WEIGHTS``, so
those rows keep their ids) and the SHA-256 of a builder model's file (its code, not its path), so that a resumed
sweep never reuses a row computed with other hyper-parameters, an older method, other code or other weights
(docs/results.md, Resume).

Importing this module does not import torch. Resolving the method config and the checkpoint imports the
method registry / model zoo (and torch) on first use. Both are cached on the cell and travel with it
(pickled) to the process that runs it, so a worker runs the cell the driver planned; ``evaluate`` checks
that the weights it loads are those.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from unitta.cell.fields import FIELDS, column_value
from unitta.cell.horizon import check_ccc
from unitta.data.records import RECORDS
from unitta.streams import CCC_SAMPLER
from unitta.streams.ccc import check_ccc_setting
from unitta.streams.protocols import DEFAULT_DELTA, PROTOCOL_SETTINGS
from unitta.streams.settings import FACTOR_KEYS, MAX_STREAM_LENGTH

__all__ = ["Cell", "DEFAULT_MODELS", "LATER_FIELDS", "PLACEMENT_FIELDS", "check_played_size", "check_stream_size",
           "round_positions"]

# The paper's model per dataset (UniTTA paper, section 5.1: RobustBench's WRN-28-10, ResNeXt-29 and
# ResNet-50) and the embedded default.
DEFAULT_MODELS = {name: record.default_model for name, record in RECORDS.items()}


def check_stream_size(dataset: str, S: int | None, length: int | None) -> None:
    """One-line ValueError when the stream asked for is longer than ``MAX_STREAM_LENGTH`` positions."""
    record = RECORDS.get(dataset)
    states = record.num_domains * record.num_classes if record else 1
    if S is not None and S * states > MAX_STREAM_LENGTH:
        raise ValueError(f"S={S}: {dataset}'s {states} (domain, class) states make a stream of up to {S * states:,} "
                         f"images, more than {MAX_STREAM_LENGTH:,}; use S <= {MAX_STREAM_LENGTH // states}")
    if length is not None and length > MAX_STREAM_LENGTH:
        raise ValueError(f"length={length}: more than {MAX_STREAM_LENGTH:,} stream positions; use a shorter stream")


def round_positions(dataset: str, sampler: str, setting: str, S: int | None, length: int | None,
                    n_per_domain: int | None, shape: tuple[int, int, int] | None = None) -> int | None:
    """The most positions one round of the cell's stream can have (None: not known before the data is read).

    shape: (domains, classes, images of the smallest domain) read from disk (an image folder; the preflight), which
    makes the count a lower bound of the largest round there."""
    from unitta.streams.settings import default_state_cap

    record = RECORDS.get(dataset)
    if length is not None:
        return length
    if record is None:
        return None
    domains, classes, images = shape or (record.num_domains, record.num_classes, record.images_per_domain)
    if not classes or not images:
        return None  # an image folder: its counts are on disk (the preflight reads them)
    per_domain = n_per_domain or images
    if sampler == "official":
        family = dataset if shape is None else record.preset_family
        cap = S if S is not None else min(default_state_cap(setting, family), max(1, per_domain // classes))
        return cap * domains * classes
    return None if sampler == CCC_SAMPLER else per_domain * domains


def check_played_size(dataset: str, sampler: str, setting: str, S: int | None, length: int | None,
                      n_per_domain: int | None, rounds: int, shape: tuple[int, int, int] | None = None) -> None:
    """One-line ValueError when ``rounds`` rounds of the stream exceed ``MAX_STREAM_LENGTH`` positions."""
    if rounds == 1:
        return
    n = round_positions(dataset, sampler, setting, S, length, n_per_domain, shape)
    if n and rounds * n > MAX_STREAM_LENGTH:
        raise ValueError(f"rounds={rounds} x {n:,} positions a round (at most) = {rounds * n:,}, more than "
                         f"{MAX_STREAM_LENGTH:,} stream positions; use rounds <= {max(1, MAX_STREAM_LENGTH // n)}")


# Fields that say where things are or how fast they run, not what is computed: excluded from the hash.
# ``checkpoint`` and ``source_dir`` are paths: what they hold enters the identity as digests (``weights``, ``data``).
PLACEMENT_FIELDS = tuple(f.name for f in FIELDS if not f.identity)

# Fields added after result folders existed: left out of the identity while at their default value, so that
# every cell computed before a field existed keeps its id and a resumed sweep recomputes nothing it need not
# (docs/results.md, "Resume"). ``unitta.cell.fields`` marks them (``later``).
LATER_FIELDS = tuple(f.name for f in FIELDS if f.later and f.identity)
# Datasets read from image folders: their identity holds the digest of the folder's index (``data``).
_FOLDER_LOADERS = ("folder", "natural", "mixture")


def _table_fields(cls: type) -> type:
    """``cls`` as a frozen dataclass with the fields of ``unitta.cell.fields.FIELDS``, in the table's order."""
    cls.__annotations__ = {f.name: f.type for f in FIELDS}
    for f in FIELDS:
        setattr(cls, f.name, field(default_factory=f.factory) if f.factory is not None else f.default)
    return dataclass(frozen=True)(cls)


@_table_fields
class Cell:
    """Everything that determines one result row; its fields are ``unitta.cell.fields.FIELDS``.

    factors: overrides of the setting's default factors, keys among FACTOR_KEYS
        (domain_alpha, domain_beta, class_alpha, class_beta; UniTTA paper, section 3.2).
    S: the official sampler's per-state cap (None: the dataset's default; with n_per_domain set, at
        most the subset's pool size per (domain, class)).
    length: the exact sampler's stream length N (None: the dataset's size).
    sampler: 'official' | 'exact' (ULMM streams) | 'sorted' | 'dirichlet' (the other benchmark's correlated
        orders, each with its own setting code: '1111' / 'n1i1'; docs/streams.md).
    delta: the dirichlet sampler's concentration (None there: DEFAULT_DELTA; must be None for the others).
    method_kwargs: hyper-parameter overrides passed to ``get_method``.
    n_per_domain: use a class-balanced subset of this many images per domain (small tests/debugging).
    precision: 'fp32' | 'tf32' | 'bf16' (PRECISIONS). compile: torch.compile the adapted model.
    profile: 'default' | 'reference' (PROFILES): which variant of each method runs.
    trust_checkpoints: allow unpickling checkpoints that the safe loader refuses (opt-in).
    protocol: 'online' (every batch adapts) | 'realtime' (Alfarra et al. ICML'24; ``unitta.cell.realtime``);
    cost: the real-time cost model, 'passes' | 'measured'. forgetting: score the adapted model on held-out
    clean source images after the stream (docs/results.md, "Forgetting").
    rounds: how often the stream is played in the same order; reset: 'none' | 'each_shift' | 'each_batch', when the
    method goes back to its initial state; ccc: the ccc sampler's {target_error, transition} (defaults filled in);
    curve_points: the parts of ``error_curve`` (``unitta.cell.horizon``, docs/long_horizon.md).
    domains, classes: the domain / class folders of an image folder (``dataset: folder``, ``data_dir`` its root)
    or a natural-shift set to use, in this order (None: all, sorted by name; docs/own_data.md).
    checkpoint: the weights file of a ``torchvision:NAME`` / ``timm:NAME`` / ``file.py:function`` model.
    source_dir: the labelled source images (``ROOT/<class>/<image>`` or ``ROOT/<domain>/<class>/<image>``) of an
    image folder, for the methods that need source data.
    datasets_as_domains: with ``dataset='mixture'``, the natural-shift sets whose domains form the pool.
    cache_images: decode an image folder once into memory instead of per batch (same images, same results).
    input_size: the input side of a ``torchvision:`` / ``timm:`` / builder model (None: the model's own, 224 for
    most); an image folder is decoded at it, and a model that fixes its side (a ViT) is built for it.
    corruptions: the dataset's domains (None: its test corruptions; ``unitta select`` runs validation streams
    on held-out ones, docs/selection.md). criteria: label-free selection criteria the cell records as
    ``criterion_<name>`` columns (``unitta.cell.criteria``; docs/selection.md).
    """

    def __post_init__(self) -> None:
        for f in FIELDS:  # each value's own check (unitta.cell.fields), then the checks that need several
            object.__setattr__(self, f.name, f.checked(getattr(self, f.name)))
        if self.dataset in RECORDS and (RECORDS[self.dataset].loader == "mixture") != bool(self.datasets_as_domains):
            raise ValueError("datasets_as_domains: give it with dataset 'mixture', and only then (docs/own_data.md)")
        if self.corruptions is not None and self.dataset in RECORDS and not RECORDS[self.dataset].has_corruptions:
            raise ValueError(f"corruptions={list(self.corruptions)}: {self.dataset}'s domains are its folders, not "
                             f"corruptions; pick them with domains: [{', '.join(self.corruptions)}] (docs/own_data.md)")
        if self.input_size is not None and not (isinstance(self.model, str) and ":" in self.model):
            raise ValueError(f"input_size={self.input_size}: for a torchvision:NAME, timm:NAME or builder model; "
                             f"the zoo's {self.model or 'default'} model has its own input side (docs/own_data.md)")
        self._check_sampler()
        check_stream_size(self.dataset, self.S, self.length)
        check_played_size(self.dataset, self.sampler, self.setting, self.S, self.length, self.n_per_domain,
                          self.rounds)
        object.__setattr__(self, "ccc", check_ccc(self.ccc, self.sampler, self.length))
        if self.sampler == "ccc" and self.reset == "each_shift":
            raise ValueError("reset=each_shift: a ccc stream changes continuously and has no domain shifts; "
                             "use reset: none or each_batch")

    def _check_sampler(self) -> None:
        if self.sampler == "dirichlet":
            object.__setattr__(self, "delta", DEFAULT_DELTA if self.delta is None else self.delta)
        elif self.delta is not None:
            raise ValueError(f"delta={self.delta!r}: only the dirichlet sampler takes a delta")
        if self.sampler == CCC_SAMPLER:
            check_ccc_setting(self.setting)
            if self.dataset in RECORDS and RECORDS[self.dataset].loader != "fmnist":  # as ccc_calibration says
                raise ValueError(f"sampler=ccc: runs on the embedded fmnist-c only (the clean test images and the "
                                 f"corruption operators of {self.dataset} are not here)")
            domain = sorted(k for k in self.factors if k.startswith("domain"))
            extra = (["S"] if self.S is not None else []) + (["n_per_domain"] if self.n_per_domain else []) + domain
            if extra:
                raise ValueError(f"{', '.join(extra)}: the ccc sampler walks its own corruptions over the clean test "
                                 "set; it takes a length and class factors only")
        fixed = PROTOCOL_SETTINGS.get(self.sampler)
        if fixed is not None:
            if self.setting != fixed:
                raise ValueError(f"setting={self.setting!r}: the {self.sampler} sampler's setting is {fixed!r}")
            extra = [k for k, v in (("factors", self.factors), ("S", self.S), ("length", self.length)) if v]
            if extra:
                raise ValueError(f"{', '.join(extra)}: the {self.sampler} sampler takes none (each image once)")

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODELS.get(self.dataset, "")

    # ------------------------------------------------------------------ the method as it will run
    @cached_property
    def method_config(self) -> dict[str, Any]:
        """The method's resolved hyper-parameters (defaults, dataset preset, profile, overrides), JSON-ready."""
        from unitta.methods import resolved_config

        return resolved_config(self.method, self.dataset, profile=self.profile, **self.method_kwargs)

    @cached_property
    def method_version(self) -> int:
        """The method's behaviour version (``TTAMethod.version``): bumped when its results change."""
        from unitta.methods import method_class

        return int(method_class(self.method).version)

    @cached_property
    def weights(self) -> str | None:
        """SHA-256 of the checkpoint file the cell's model loads (None: no such file yet; the cell then fails).

        Computed once per file and cached by its path, size and modification time (``unitta.models.digest``).
        """
        from unitta.models.any_model import any_weights_digest

        return any_weights_digest(self.dataset, self.model, self.checkpoint, self.checkpoint_dir)

    @cached_property
    def _builder(self) -> tuple[str, str | None] | None:
        """A builder model's (portable name, SHA-256 of its file) (``unitta.models.builders``), else None."""
        from unitta.models.builders import builder_identity, is_builder

        return builder_identity(self.model) if is_builder(self.model) else None

    @property
    def model_code(self) -> str | None:
        """The SHA-256 of a builder model's file (its code is part of the identity, its path is not), else None."""
        return self._builder[1] if self._builder else None

    @property
    def model_label(self) -> str:
        """The model as the identity and the result row name it: a builder by its file name, not its path."""
        return self._builder[0] if self._builder else self.model_name

    @cached_property
    def data_digest(self) -> str | None:
        """For a dataset read from an image folder: the SHA-256 of its index (every file's name and size,
        ``unitta.data.folder``), None when the folder cannot be read (the cell then fails) or for other datasets."""
        if RECORDS[self.dataset].loader not in _FOLDER_LOADERS:
            return None
        from unitta.data import default_data_dir
        from unitta.data.mixture import index_any

        try:
            return index_any(self.dataset, self.data_dir, default_data_dir(), self.domains, self.classes,
                             self.datasets_as_domains).digest
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ identity
    @cached_property
    def _identity(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in _IDENTITY_FIELDS}
        for key in LATER_FIELDS:
            if data[key] == _DEFAULTS[key]:
                data.pop(key)
        if self.protocol == "online":  # the cost model prices real-time adaptation only: an online cell ignores it
            data.pop("cost", None)
        data["model"] = self.model_label
        if self._builder:
            data["model_code"] = self.model_code
        data["method_config"] = self.method_config
        data["method_version"] = self.method_version
        if not self._reference_weights:
            data["weights"] = self.weights
        if RECORDS[self.dataset].loader in _FOLDER_LOADERS:
            data["data"] = self.data_digest
        return data

    def identity(self) -> dict[str, Any]:
        """The fields that determine the result (placement fields excluded), JSON-ready.

        Computed once per cell (a cell is frozen): planning a 50,000-cell grid asks each id several times.
        """
        return dict(self._identity)

    @cached_property
    def _reference_weights(self) -> bool:
        """The weights all rows had before the digest joined the identity (``zoo.REFERENCE_WEIGHTS``): their
        cells keep their ids, like a field of LATER_FIELDS at its default."""
        from unitta.models.zoo import is_reference_weights

        if self.checkpoint or ":" in self.model_name:
            return False
        return self.dataset in DEFAULT_MODELS and is_reference_weights(self.dataset, self.model_name, self.weights)

    @cached_property
    def _config_hash(self) -> str:
        return _hash(self._identity)

    def config_hash(self) -> str:
        """A stable 16-hex-digit hash of ``identity()``: equal cells give equal hashes."""
        return self._config_hash

    def cell_id(self) -> str:
        """A readable, file-name-safe id: dataset__method__setting__hash."""
        return f"{self.dataset}__{self.method}__{self.setting}__{self._config_hash}"

    def cell_id_before_weights(self) -> str:
        """The id this cell had when the weights were not yet part of its identity (docs/results.md, Resume):
        lets a resumed sweep say that such older rows are not reused, instead of recomputing them silently."""
        data = self.identity()
        data.pop("weights", None)
        return f"{self.dataset}__{self.method}__{self.setting}__{_hash(data)}"

    def coordinates(self) -> dict[str, Any]:
        """The identity columns of this cell's result row (docs/results.md); metrics are added by ``evaluate``.

        Their names and types are ``unitta.cell.fields.cell_columns()``. Factor columns hold the overrides
        here; ``evaluate`` replaces them with the values the stream used.
        """
        return {
            "cell_id": self.cell_id(),
            "config_hash": self.config_hash(),
            "model_weights": self.weights,
            "data_digest": self.data_digest,
            "model_code": self.model_code,
            "method_config": json.dumps(self.method_config, sort_keys=True),
            "method_version": self.method_version,
            **{f.column_key: column_value(getattr(self, f.name)) for f in FIELDS if f.column is not None},
            "model": self.model_label,
            **{key: self.factors.get(key) for key in FACTOR_KEYS},
        }


_DEFAULTS = {f.name: f.default_value() for f in FIELDS}
_IDENTITY_FIELDS = tuple(f.name for f in FIELDS if f.identity)


def _hash(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
