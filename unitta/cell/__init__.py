"""``Cell``: the coordinates of one benchmark result, their identity and their rules.

The cell package: ``Cell`` (this module: a frozen dataclass, one line per field, ``seed: int = cell_field(425,
check=check_seed, ...)``; ``FIELDS`` reads the facts of its fields back), how a field is declared and the checks
of one value (``fields``), a config's cell keys (``spec``, made from ``FIELDS``), which samplers take which keys
(``sampler_keys``) and the allowed protocols, resets and criteria (``choices``). ``unitta.evaluate`` runs a cell
(the adaptation loop, its inputs, its metrics, the real-time schedule, rounds and resets, the criteria).

Adding a field is one line in ``Cell``, at the end, ``later=True`` (old ids stay): ``name: type =
cell_field(default, check=..., later=True, column=...)``; ``FIELDS``, the config keys, the result column and the
identity follow from it (a check that reads several fields goes in ``__post_init__``, named in the field's comment).

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
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from unitta.cell.choices import COST_MODELS, PROTOCOLS, RESETS
from unitta.cell.fields import (
    PRECISIONS,
    RESOLVED_COLUMNS,
    CellField,
    cell_field,
    check_corruptions,
    check_criteria,
    check_dataset_name,
    check_device,
    check_factor_keys,
    check_mixture_members,
    check_names,
    check_seed,
    check_setting,
    column_value,
    fields_of,
    one_of,
    whole_at_least,
)
from unitta.cell.sampler_keys import check_sampler_keys
from unitta.cell.stream_size import check_played_size, check_stream_size
from unitta.data.records import FOLDER_LOADERS, RECORDS
from unitta.profile_names import PROFILES
from unitta.streams import CCC_SAMPLER, SAMPLERS
from unitta.streams.ccc import check_ccc, check_ccc_setting
from unitta.streams.protocols import DEFAULT_DELTA, GRADUAL_SAMPLERS, GRADUAL_STEPS, PROTOCOL_SETTINGS, check_delta
from unitta.streams.settings import FACTOR_KEYS

__all__ = ["FIELDS", "Cell", "DEFAULT_MODELS", "LATER_FIELDS", "PLACEMENT_FIELDS", "cell_columns", "field_named"]

# The paper's model per dataset (UniTTA paper, section 5.1: RobustBench's WRN-28-10, ResNeXt-29 and
# ResNet-50) and the embedded default.
DEFAULT_MODELS = {name: record.default_model for name, record in RECORDS.items()}


@dataclass(frozen=True)
class Cell:
    """Everything that determines one result row: one line per field, its type, default and facts (``cell_field``:
    the check of one value, identity, later, result column, config key, grid key; ``unitta.cell.fields``). The
    checks of several fields together are ``__post_init__``'s, named in the comment of the fields they read.

    Adding a field is one line here, at the end (``later=True``, so that the ids of every earlier cell stay):
    ``FIELDS``, the config keys (``unitta.cell.spec``), the result column and ``Cell.coordinates`` follow from it.
    """

    # --- the stream: dataset, setting, sampler (docs/streams.md)
    dataset: str = cell_field("fmnist-c", check=check_dataset_name, column="string", config="cell", grid="datasets")
    # a config's ``methods`` set it (checked against the method registry there)
    method: str = cell_field("test", column="string", config=None)
    setting: str = cell_field("i111", check=check_setting, column="string", config="cell")
    # None: the dataset's default model (DEFAULT_MODELS); the column holds the resolved name (``model_label``)
    model: str | None = cell_field(None, column="string", config="cell")
    # hyper-parameter overrides passed to ``get_method``
    method_kwargs: dict[str, Any] = cell_field(factory=dict, column="string", config="cell")
    # 'official' | 'exact' (ULMM streams) | 'sorted' | 'dirichlet' | 'gradual' | 'gradual_correlated' (the other
    # benchmark's orders, each with its own setting code: '1111' / 'n1i1' / 'i111' / '1111'; the gradual ones play
    # every corruption at severities 1..5..1: a dataset with severities, ``_check_gradual``) | 'ccc'; which samplers
    # take S, length, delta, ccc: ``_check_sampler``
    sampler: str = cell_field("official", check=one_of(SAMPLERS, "sampler"), column="string", grid="sampler")
    # overrides of the setting's default factors, keys among FACTOR_KEYS (UniTTA paper, section 3.2)
    factors: dict[str, float] = cell_field(factory=dict, check=check_factor_keys, column="string",
                                           column_name="factor_overrides")
    # the official sampler's per-state cap (None: the dataset's default; with n_per_domain set, at most the subset's
    # pool size per (domain, class)); rules: official only, ``check_stream_size``
    S: int | None = cell_field(None, check=whole_at_least(1), column="int64")
    # the exact (and ccc) sampler's stream length N (None: the dataset's size); rules as S's
    length: int | None = cell_field(None, check=whole_at_least(1), column="int64")
    seed: int = cell_field(425, check=check_seed, column="int64", config="cell", grid="seeds")
    batch_size: int = cell_field(64, check=whole_at_least(1), column="int64", config="cell", grid="batch_size")
    severity: int = cell_field(5, check=whole_at_least(1, 5), column="int64")  # CIFAR-10-C's severities
    # a class-balanced subset of this many images per domain (small tests, debugging)
    n_per_domain: int | None = cell_field(None, check=whole_at_least(1), column="int64")
    # --- how it is computed
    precision: str = cell_field("fp32", check=one_of(PRECISIONS, "precision"), column="string")
    # which variant of each method runs (PROFILES)
    profile: str = cell_field("default", check=one_of(PROFILES, "profile"), column="string")
    compile: bool = cell_field(False, identity=False)  # torch.compile the adapted model
    # --- placement: where things are, how fast they run (not in the identity)
    data_dir: str | None = cell_field(None, identity=False)
    checkpoint_dir: str | None = cell_field(None, identity=False)
    device: str = cell_field("auto", check=check_device, identity=False)
    num_threads: int | None = cell_field(None, check=whole_at_least(1), identity=False, config="cell")
    # allow unpickling checkpoints that the safe loader refuses (opt-in)
    trust_checkpoints: bool = cell_field(False, identity=False)
    # --- added after result folders existed (``later``: left out of the identity at their default)
    # 'online' (every batch adapts) | 'realtime' (Alfarra et al. ICML'24; ``unitta.evaluate.realtime``)
    protocol: str = cell_field("online", check=one_of(PROTOCOLS, "protocol"), later=True, column="string",
                               grid="protocol")
    # the real-time cost model, 'passes' | 'measured' (column: evaluate's realtime_cost; an online cell ignores it)
    cost: str = cell_field("passes", check=one_of(COST_MODELS, "cost model"), later=True)
    # score the adapted model on held-out clean source images after the stream (docs/results.md, "Forgetting")
    forgetting: bool = cell_field(False, later=True, column="bool")
    # the dirichlet sampler's concentration (None there: DEFAULT_DELTA); rule: dirichlet only (``_check_sampler``)
    delta: float | None = cell_field(None, check=check_delta, later=True, column="float64", config="cell",
                                     grid="delta")
    # how often the stream is played in the same order (docs/long_horizon.md); rule: ``check_played_size``
    rounds: int = cell_field(1, check=whole_at_least(1), later=True, column="int64")
    # 'none' | 'each_shift' | 'each_batch': when the method goes back to its initial state; rule: no each_shift on ccc
    reset: str = cell_field("none", check=one_of(RESETS, "reset"), later=True, column="string")
    # the ccc sampler's {target_error, transition}, defaults filled in (``unitta.streams.ccc.check_ccc``)
    ccc: dict[str, Any] | None = cell_field(None, later=True, column="string")
    # the parts of ``error_curve`` (``unitta.evaluate.horizon``)
    curve_points: int = cell_field(10, check=whole_at_least(1), later=True, column="int64")
    # the domain / class folders of an image folder (``dataset: folder``, ``data_dir`` its root) or of a
    # natural-shift set, in this order (None: all, sorted by name; docs/own_data.md)
    domains: tuple[str, ...] | None = cell_field(None, check=check_names, later=True, column="string")
    classes: tuple[str, ...] | None = cell_field(None, check=check_names, later=True, column="string")
    # the weights file of a ``torchvision:NAME`` / ``timm:NAME`` / ``file.py:function`` model (its digest: ``weights``)
    checkpoint: str | None = cell_field(None, identity=False)
    # the labelled source images of an image folder (``ROOT/<class>/<image>`` or ``ROOT/<domain>/<class>/<image>``),
    # for the methods that need source data
    source_dir: str | None = cell_field(None, identity=False)
    # with dataset 'mixture' (and only then), the natural-shift sets whose domains form the pool
    datasets_as_domains: tuple[str, ...] | None = cell_field(None, check=check_mixture_members, later=True,
                                                             column="string")
    # decode an image folder once into memory instead of per batch (same images, same results)
    cache_images: bool = cell_field(False, identity=False)
    # the dataset's domains (None: its test corruptions; ``unitta select`` runs validation streams on held-out ones,
    # docs/selection.md); rule: only for a dataset whose domains are corruptions
    corruptions: tuple[str, ...] | None = cell_field(None, check=check_corruptions, later=True, column="string")
    # label-free selection criteria recorded as ``criterion_<name>`` columns (``unitta.evaluate.criteria``)
    criteria: tuple[str, ...] = cell_field((), check=check_criteria, later=True, column="string", config=None)
    # the input side of a ``torchvision:`` / ``timm:`` / builder model (None: the model's own, 224 for most); an
    # image folder is decoded at it, a model that fixes its side (a ViT) is built for it; rule: such models only
    # at most 4096: one 64-image batch of 4096-pixel images is 12 GB of float32 already (a larger side is a typo)
    input_size: int | None = cell_field(None, check=whole_at_least(8, 4096), later=True, column="int64")
    # (a new field goes above this line: ``name: type = cell_field(default, ..., later=True)``)

    def __post_init__(self) -> None:
        for f in FIELDS:  # each value's own check (its cell_field's), then the checks that need several
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
        object.__setattr__(self, "ccc", check_ccc(self.ccc, self.length) if self.sampler == CCC_SAMPLER else None)
        if self.sampler == "ccc" and self.reset == "each_shift":
            raise ValueError("reset=each_shift: a ccc stream changes continuously and has no domain shifts; "
                             "use reset: none or each_batch")

    def _check_sampler(self) -> None:
        """The keys the cell's sampler takes (``unitta.cell.sampler_keys``), its setting, the dirichlet's delta."""
        given = {"factors": bool(self.factors), "S": self.S is not None, "length": self.length is not None,
                 "delta": self.delta is not None, "ccc": bool(self.ccc)}
        check_sampler_keys([self.sampler], [key for key, present in given.items() if present])
        if self.sampler == "dirichlet":
            object.__setattr__(self, "delta", DEFAULT_DELTA if self.delta is None else self.delta)
        if self.sampler == CCC_SAMPLER:
            check_ccc_setting(self.setting)
            if self.dataset in RECORDS and RECORDS[self.dataset].loader != "fmnist":  # as ccc_calibration says
                raise ValueError(f"sampler=ccc: runs on the embedded fmnist-c only (the clean test images and the "
                                 f"corruption operators of {self.dataset} are not here)")
            domain = sorted(k for k in self.factors if k.startswith("domain"))
            extra = (["n_per_domain"] if self.n_per_domain else []) + domain
            if extra:
                raise ValueError(f"{', '.join(extra)}: the ccc sampler walks its own corruptions over the clean test "
                                 "set; it takes a length and class factors only")
        if self.sampler in GRADUAL_SAMPLERS:
            self._check_gradual()
        fixed = PROTOCOL_SETTINGS.get(self.sampler)
        if fixed is not None and self.setting != fixed:
            raise ValueError(f"setting={self.setting!r}: the {self.sampler} sampler's setting is {fixed!r}")

    def _check_gradual(self) -> None:
        """The gradual orders play every severity of every corruption (docs/streams.md): a dataset with severities,
        and no severity of the cell's own."""
        record = RECORDS.get(self.dataset)
        if record is not None and not record.has_corruptions:
            with_severities = ", ".join(name for name, r in RECORDS.items() if r.has_corruptions)
            kind = {"folder": "an image folder", "mixture": "a mixture of natural-shift sets"}.get(
                record.loader, "a natural-shift set")
            raise ValueError(f"sampler={self.sampler}: {self.dataset} is {kind}, without corruption severities; the "
                             f"gradual orders need a corrupted dataset with severities 1-5 ({with_severities}); for "
                             "a continual stream over its domains use sampler: sorted")
        if self.severity != 5:
            raise ValueError(f"severity={self.severity}: the {self.sampler} sampler plays every severity "
                             f"({', '.join(map(str, GRADUAL_STEPS))} per corruption); drop severity")

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
        if RECORDS[self.dataset].loader not in FOLDER_LOADERS:
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
        if RECORDS[self.dataset].loader in FOLDER_LOADERS:
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

        Their names and types are ``cell_columns()``. Factor columns hold the overrides
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


# ---------------------------------------------------------------------- the fields' facts, read from Cell
FIELDS: tuple[CellField, ...] = fields_of(Cell)
_BY_NAME = {f.name: f for f in FIELDS}

# Fields that say where things are or how fast they run, not what is computed: excluded from the hash.
# ``checkpoint`` and ``source_dir`` are paths: what they hold enters the identity as digests (``weights``, ``data``).
PLACEMENT_FIELDS = tuple(f.name for f in FIELDS if not f.identity)

# Fields added after result folders existed: left out of the identity while at their default value, so that
# every cell computed before a field existed keeps its id and a resumed sweep recomputes nothing it need not
# (docs/results.md, "Resume"); ``cell_field(..., later=True)`` marks them.
LATER_FIELDS = tuple(f.name for f in FIELDS if f.later and f.identity)

_DEFAULTS = {f.name: f.default_value() for f in FIELDS}
_IDENTITY_FIELDS = tuple(f.name for f in FIELDS if f.identity)


def field_named(name: str) -> CellField:
    """The facts of the field ``name`` of ``Cell``."""
    return _BY_NAME[name]


def cell_columns() -> tuple[tuple[str, str], ...]:
    """(name, Parquet type) of every column ``Cell.coordinates`` writes, in the order of the result files."""
    fields = tuple((f.column_key, f.column) for f in FIELDS if f.column is not None)
    return RESOLVED_COLUMNS + fields + tuple((key, "float64") for key in FACTOR_KEYS)


def _hash(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
