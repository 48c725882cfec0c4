"""The one table of a cell's fields: what ``Cell``, the configs' cell keys, the result columns are made from.

Each ``CellField`` says its name, type, default, the check of one value, whether it enters the cell's
identity (a placement field says where things are or how fast they run, not what is computed: data and
checkpoint paths, device, threads), whether it was added after result folders existed (``later``: left out of
the identity while at its default, so that every cell computed before it existed keeps its id; docs/results.md,
"Resume"), its result column (Parquet type, or None when ``coordinates`` writes none) and its place in a
config (``shared`` by every cell of a sweep, set per ``cell`` in a tune/select config, or ``None``).

From it are made: ``unitta.cell.Cell`` (its dataclass fields and their checks), ``unitta.cell.spec``'s
``CellFields`` / ``CellSpec`` (the config keys), ``Cell.coordinates`` and the cell columns of
``unitta.results.SCHEMA``. Adding a field is one row here (a new field is ``later=True``: old ids stay).

A check takes one value and returns it (normalised: a list of names becomes a tuple) or raises a ValueError
whose one-line message does not repeat the key: ``Cell`` and the config errors put ``<key>: `` before it.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from unitta.cell.horizon import RESETS
from unitta.cell.realtime import COST_MODELS, PROTOCOLS
from unitta.data import HELD_OUT_CORRUPTIONS
from unitta.data.records import CORRUPTIONS, DATASETS, RECORDS
from unitta.profile_names import PROFILES
from unitta.schema import hint
from unitta.streams import SAMPLERS
from unitta.streams.protocols import check_delta
from unitta.streams.settings import FACTOR_KEYS, SETTING_CODES_36, is_setting_code

__all__ = [
    "FIELDS", "MAX_SEED", "PRECISIONS", "RESOLVED_COLUMNS", "CellField", "cell_columns", "check_dataset_name",
    "check_device", "check_seed", "check_setting", "column_value", "field_named", "one_of", "whole_at_least",
]

# fp32: full precision (the default; results identical to the reference code paths). tf32: TF32
# matmuls/convolutions on Ampere+ GPUs. bf16: autocast to bfloat16 + channels_last (docs/benchmarks.md).
PRECISIONS = ("fp32", "tf32", "bf16")

# The largest seed: numpy's RandomState (the official sampler's, like the reference's) takes 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1

# Devices a cell runs on: auto (a CUDA GPU if any, else the CPU), cpu, cuda, cuda:N, mps (Apple GPUs).
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")


# ---------------------------------------------------------------------- the checks of one value
def one_of(choices: Iterable[str], noun: str) -> Callable[[Any], Any]:
    """A check that the value is one of ``choices`` (read when called: plugins may add choices)."""

    def check(value: Any) -> Any:
        known = tuple(choices)
        if value not in known:
            raise ValueError(f"unknown {noun} {value!r}{hint(value, known)}; known: {', '.join(known)}")
        return value

    return check


def whole_at_least(low: int, high: int | None = None) -> Callable[[Any], Any]:
    """A check that the value is a whole number >= ``low`` (and <= ``high``)."""
    bounds = f">= {low}" if high is None else f"in {low} .. {high}"

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low \
                or (high is not None and value > high):
            raise ValueError(f"expected a whole number {bounds}, got {value!r}")
        return value

    return check


def check_seed(seed: Any) -> int:
    """``seed`` if the samplers and the result files take it (numpy's seed range), else a one-line ValueError."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"expected a whole number in 0 .. {MAX_SEED} (numpy's seed range), got {seed!r}")
    return seed


def check_device(device: Any) -> str:
    """``device`` if a cell can run on it, else a one-line ValueError naming the choices."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"expected 'auto', 'cpu', 'cuda', 'cuda:N' (N: a GPU index) or 'mps', got {device!r}")
    return device


def check_dataset_name(name: Any) -> str:
    """``name`` if it is a known dataset, else a ValueError with a 'did you mean' hint."""
    if name not in DATASETS:
        alias = next((r.name for r in RECORDS.values() if name in r.aliases), None)  # a clean set's name
        near = f" (did you mean {alias!r}?)" if alias else hint(name, DATASETS)
        raise ValueError(f"unknown dataset {name!r}{near}; known: {', '.join(DATASETS)}")
    return name


def check_setting(code: Any) -> str:
    """``code`` if it is one of the 36 setting codes (docs/streams.md), else a ValueError naming the format."""
    if not isinstance(code, str) or not is_setting_code(code):
        raise ValueError(f"invalid setting {code!r}{hint(code, SETTING_CODES_36)}: a code is <class corr><class imb>"
                         "<domain corr><domain imb> with corr in i,n,1 and imb in 1,u (e.g. 'nui1')")
    return code


def _factors(value: Any) -> Any:
    unknown = [key for key in value if key not in FACTOR_KEYS]
    if unknown:
        raise ValueError(f"unknown factor {unknown[0]!r}{hint(unknown[0], FACTOR_KEYS)}; "
                         f"allowed: {', '.join(FACTOR_KEYS)}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    """A non-empty tuple of distinct names (one name alone is read as a list of one)."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or len(set(names)) < len(names):
        raise ValueError(f"expected a non-empty list of distinct names, got {list(names)}")
    return names


def _corruptions(value: Any) -> tuple[str, ...]:
    names, known = _names(value), (*CORRUPTIONS, *HELD_OUT_CORRUPTIONS)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown corruption {name!r}{hint(name, known)}; known: {', '.join(known)}")
    return names


def _criteria(value: Any) -> tuple[str, ...]:
    from unitta.cell.criteria import CRITERIA

    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        one_of(CRITERIA, "criterion")(name)
    if len(set(names)) < len(names):
        raise ValueError(f"expected each criterion once, got {list(names)}")
    return names


def _members(value: Any) -> tuple[str, ...]:
    from unitta.data.mixture import check_members

    return tuple(check_members(_names(value)))


# ---------------------------------------------------------------------- the table
@dataclass(frozen=True)
class CellField:
    """One field of a cell (see the module docstring).

    type: the annotation of ``Cell`` and of the config key. default / factory: the default value (a factory for
    a mapping). check: the check of one non-None value. identity: enters ``Cell.identity`` (False: placement).
    later: added after result folders existed (left out of the identity at its default). column: the Parquet
    type ('string', 'int64', 'float64', 'bool') of the result column ``coordinates`` writes, None for none;
    column_name: that column's name when it is not the field's. config: 'shared' (a key every cell of a config
    shares: ``CellFields``), 'cell' (a key of one cell: ``CellSpec``) or None (set otherwise). grid: the key of a
    sweep that lists this field's values (``datasets``, ``seeds``, ...): each value goes through the check.
    """

    name: str
    type: Any
    default: Any = None
    factory: Callable[[], Any] | None = None
    check: Callable[[Any], Any] | None = None
    identity: bool = True
    later: bool = False
    column: str | None = None
    column_name: str | None = None
    config: str | None = "shared"
    grid: str | None = None

    @property
    def column_key(self) -> str:
        return self.column_name or self.name

    def default_value(self) -> Any:
        return self.factory() if self.factory is not None else self.default

    def checked(self, value: Any) -> Any:
        """``value`` through the check (None passes: it means 'not set'); errors start with the field's name."""
        if value is None or self.check is None:
            return value
        try:
            return self.check(value)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None


_LIST = tuple[str, ...] | None
F = CellField
# In Cell's order (a new field goes at the end, ``later=True``).
FIELDS: tuple[CellField, ...] = (
    F("dataset", str, "fmnist-c", check=check_dataset_name, column="string", config="cell", grid="datasets"),
    F("method", str, "test", column="string", config=None),  # a config's methods (checked against the registry)
    F("setting", str, "i111", check=check_setting, column="string", config="cell"),
    F("model", str | None, column="string", config="cell"),  # the column: the resolved name (Cell.model_label)
    F("method_kwargs", dict[str, Any], factory=dict, column="string", config="cell"),
    F("sampler", str, "official", check=one_of(SAMPLERS, "sampler"), column="string", grid="sampler"),
    F("factors", dict[str, float], factory=dict, check=_factors, column="string", column_name="factor_overrides"),
    F("S", int | None, check=whole_at_least(1), column="int64"),
    F("length", int | None, check=whole_at_least(1), column="int64"),
    F("seed", int, 425, check=check_seed, column="int64", config="cell", grid="seeds"),
    F("batch_size", int, 64, check=whole_at_least(1), column="int64", config="cell", grid="batch_size"),
    F("severity", int, 5, check=whole_at_least(1, 5), column="int64"),  # CIFAR-10-C's severities
    F("n_per_domain", int | None, check=whole_at_least(1), column="int64"),
    F("precision", str, "fp32", check=one_of(PRECISIONS, "precision"), column="string"),
    F("profile", str, "default", check=one_of(PROFILES, "profile"), column="string"),
    F("compile", bool, False, identity=False),
    F("data_dir", str | None, identity=False),
    F("checkpoint_dir", str | None, identity=False),
    F("device", str, "auto", check=check_device, identity=False),
    F("num_threads", int | None, check=whole_at_least(1), identity=False, config="cell"),
    F("trust_checkpoints", bool, False, identity=False),
    F("protocol", str, "online", check=one_of(PROTOCOLS, "protocol"), later=True, column="string", grid="protocol"),
    F("cost", str, "passes", check=one_of(COST_MODELS, "cost model"), later=True),  # column: realtime_cost (evaluate)
    F("forgetting", bool, False, later=True, column="bool"),
    F("delta", float | None, check=check_delta, later=True, column="float64", config="cell", grid="delta"),
    F("rounds", int, 1, check=whole_at_least(1), later=True, column="int64"),
    F("reset", str, "none", check=one_of(RESETS, "reset"), later=True, column="string"),
    F("ccc", dict[str, Any] | None, later=True, column="string"),  # checked with the sampler (horizon.check_ccc)
    F("curve_points", int, 10, check=whole_at_least(1), later=True, column="int64"),
    F("domains", _LIST, check=_names, later=True, column="string"),
    F("classes", _LIST, check=_names, later=True, column="string"),
    F("checkpoint", str | None, identity=False),
    F("source_dir", str | None, identity=False),
    F("datasets_as_domains", _LIST, check=_members, later=True, column="string"),
    F("cache_images", bool, False, identity=False),
    F("corruptions", _LIST, check=_corruptions, later=True, column="string"),
    F("criteria", tuple[str, ...], (), check=_criteria, later=True, column="string", config=None),
    # a torchvision:/timm:/builder model's input side (None: its own); an image folder is decoded at it. At most
    # 4096: one 64-image batch of 4096-pixel images is 12 GB of float32 already (a larger side is a typo)
    F("input_size", int | None, check=whole_at_least(8, 4096), later=True, column="int64"),
)
del F

_BY_NAME = {f.name: f for f in FIELDS}


def field_named(name: str) -> CellField:
    return _BY_NAME[name]


# The columns ``coordinates`` writes that are no field: the id, the hash and the identity's resolved entries.
RESOLVED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("cell_id", "string"), ("config_hash", "string"), ("model_weights", "string"), ("data_digest", "string"),
    ("model_code", "string"), ("method_config", "string"), ("method_version", "int64"),
)


def cell_columns() -> tuple[tuple[str, str], ...]:
    """(name, Parquet type) of every column ``Cell.coordinates`` writes, in the order of the result files."""
    fields = tuple((f.column_key, f.column) for f in FIELDS if f.column is not None)
    return RESOLVED_COLUMNS + fields + tuple((key, "float64") for key in FACTOR_KEYS)


def column_value(value: Any) -> Any:
    """A field's value as its result column holds it: mappings as JSON, lists of names as JSON lists (None when
    empty or not set), the rest as is."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, tuple):
        return json.dumps(list(value)) if value else None
    return value
