"""How a field of ``Cell`` is declared (``cell_field``: its facts in the dataclass field's metadata) and the
checks of one value that the declarations name.

Each field of ``unitta.cell.Cell`` is one line there: its name, type and default, and in ``cell_field(...)`` the
check of one value, whether it enters the cell's identity (``identity=False``: a placement field, which says where
things are or how fast they run, not what is computed: data and checkpoint paths, device, threads), whether it was
added after result folders existed (``later``: left out of the identity while at its default, so that every cell
computed before it existed keeps its id; docs/results.md, "Resume"), its result column (Parquet type, or None when
``coordinates`` writes none), its place in a config (``shared`` by every cell of a sweep, set per ``cell`` in a
tune/select config, or ``None``) and the key of a sweep that grids it (``grid``).

``unitta.cell.FIELDS`` reads these facts back (``fields_of(Cell)``, one ``CellField`` per field, in order); from it
are made ``unitta.cell.spec``'s ``CellFields`` / ``CellSpec`` (the config keys), ``Cell.coordinates`` and the cell
columns of ``unitta.results.SCHEMA``.

A check takes one value and returns it (normalised: a list of names becomes a tuple) or raises a ValueError
whose one-line message does not repeat the key: ``Cell`` and the config errors put ``<key>: `` before it.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, get_type_hints

from unitta.cell.choices import CRITERIA
from unitta.data import HELD_OUT_CORRUPTIONS
from unitta.data.records import CORRUPTIONS, DATASETS, RECORDS
from unitta.schema import hint
from unitta.streams.settings import FACTOR_KEYS, SETTING_CODES_36, is_setting_code

__all__ = [
    "MAX_SEED", "PRECISIONS", "RESOLVED_COLUMNS", "CellField", "cell_field", "check_corruptions", "check_criteria",
    "check_dataset_name", "check_device", "check_factor_keys", "check_mixture_members", "check_names", "check_seed",
    "check_setting", "column_value", "fields_of", "one_of", "whole_at_least",
]

# fp32: full precision (the default; results identical to the reference code paths). tf32: TF32
# matmuls/convolutions on Ampere+ GPUs. bf16: autocast to bfloat16 + channels_last (docs/benchmarks.md).
PRECISIONS = ("fp32", "tf32", "bf16")

# The largest seed: numpy's RandomState (the official sampler's, like the reference's) takes 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1

# Devices a cell runs on: auto (a CUDA GPU if any, else the CPU), cpu, cuda, cuda:N, mps (Apple GPUs).
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")


# ---------------------------------------------------------------------- the checks of one value
def _whole(value: Any) -> bool:
    """A whole number (a Python or numpy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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
        if not _whole(value) or value < low or (high is not None and value > high):
            raise ValueError(f"expected a whole number {bounds}, got {value!r}")
        return value

    return check


def check_seed(seed: Any) -> int:
    """``seed`` if the samplers and the result files take it (numpy's seed range), else a one-line ValueError."""
    if not _whole(seed) or not 0 <= seed <= MAX_SEED:
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


def check_factor_keys(value: Any) -> Any:
    """A mapping whose keys are factor names (FACTOR_KEYS)."""
    unknown = [key for key in value if key not in FACTOR_KEYS]
    if unknown:
        raise ValueError(f"unknown factor {unknown[0]!r}{hint(unknown[0], FACTOR_KEYS)}; "
                         f"allowed: {', '.join(FACTOR_KEYS)}")
    return value


def check_names(value: Any) -> tuple[str, ...]:
    """A non-empty tuple of distinct names (one name alone is read as a list of one)."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or len(set(names)) < len(names):
        raise ValueError(f"expected a non-empty list of distinct names, got {list(names)}")
    return names


def check_corruptions(value: Any) -> tuple[str, ...]:
    """Known corruptions (the test ones and Hendrycks' four held-out ones), each once."""
    names, known = check_names(value), (*CORRUPTIONS, *HELD_OUT_CORRUPTIONS)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown corruption {name!r}{hint(name, known)}; known: {', '.join(known)}")
    return names


def check_criteria(value: Any) -> tuple[str, ...]:
    """Known label-free criteria, each once (one name alone is a list of one)."""
    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        one_of(CRITERIA, "criterion")(name)
    if len(set(names)) < len(names):
        raise ValueError(f"expected each criterion once, got {list(names)}")
    return names


def check_mixture_members(value: Any) -> tuple[str, ...]:
    """The natural-shift sets of a mixture (``unitta.data.mixture``), as a tuple."""
    from unitta.data import mixture

    return tuple(mixture.check_members(check_names(value)))


# ---------------------------------------------------------------------- a field's facts
_FACTS = "unitta.cell"  # the key of a dataclass field's metadata that holds its facts


def cell_field(default: Any = MISSING, *, factory: Callable[[], Any] | None = None,
               check: Callable[[Any], Any] | None = None, identity: bool = True, later: bool = False,
               column: str | None = None, column_name: str | None = None, config: str | None = "shared",
               grid: str | None = None) -> Any:
    """A field of ``Cell`` with its default (or ``factory``, for a mapping) and its facts (``CellField``)."""
    facts = dict(check=check, identity=identity, later=later, column=column, column_name=column_name, config=config,
                 grid=grid)
    if factory is not None:
        return field(default_factory=factory, metadata={_FACTS: facts})
    return field(default=default, metadata={_FACTS: facts})


@dataclass(frozen=True)
class CellField:
    """One field of a cell, as ``cell_field`` declared it (see the module docstring).

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


def fields_of(cls: type) -> tuple[CellField, ...]:
    """The ``CellField`` of every field of the dataclass ``cls`` (declared with ``cell_field``), in order."""
    assert is_dataclass(cls)
    types = get_type_hints(cls)
    out = []
    for f in fields(cls):
        if _FACTS not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with cell_field(...) (unitta.cell.fields)")
        factory = None if f.default_factory is MISSING else f.default_factory
        default = None if f.default is MISSING else f.default
        out.append(CellField(f.name, types[f.name], default, factory, **f.metadata[_FACTS]))
    return tuple(out)


# The columns ``coordinates`` writes that are no field: the id, the hash and the identity's resolved entries.
RESOLVED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("cell_id", "string"), ("config_hash", "string"), ("model_weights", "string"), ("data_digest", "string"),
    ("model_code", "string"), ("method_config", "string"), ("method_version", "int64"),
)


def column_value(value: Any) -> Any:
    """A field's value as its result column holds it: mappings as JSON, lists of names as JSON lists (None when
    empty or not set), the rest as is."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, tuple):
        return json.dumps(list(value)) if value else None
    return value
