"""The one pydantic model of a cell's fields, embedded in the sweep and the tune config alike.

A sweep config carries ``CellFields`` at its top level (with lists for the gridded coordinates: datasets,
settings, seeds, batch sizes); a tune config carries a ``CellSpec`` under ``cell:`` (the base cell of
its search). Both are checked by the same validators, so a bad value (``severity: 9``, an unknown factor,
``S`` with the exact sampler) is the same one-line error, exit code 2, in both (docs/results.md, "Configs").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from unitta.cell import PRECISIONS, Cell, check_device, check_seed
from unitta.cell.horizon import RESETS, check_ccc
from unitta.cell.realtime import COST_MODELS, PROTOCOLS
from unitta.data import HELD_OUT_CORRUPTIONS
from unitta.data.records import CORRUPTIONS, DATASETS, RECORDS
from unitta.profile_names import PROFILES
from unitta.schema import Strict, hint
from unitta.streams import CCC_SAMPLER, SAMPLERS, ULMM_SAMPLERS
from unitta.streams.protocols import check_delta
from unitta.streams.settings import FACTOR_KEYS, SETTING_CODES_36, is_setting_code

__all__ = ["CellFields", "CellSpec", "check_dataset_name", "check_setting"]


def check_dataset_name(name: str) -> str:
    """``name`` if it is a known dataset, else ValueError with a 'did you mean' hint."""
    if name not in DATASETS:
        alias = next((r.name for r in RECORDS.values() if name in r.aliases), None)  # a clean set's name
        near = f" (did you mean {alias!r}?)" if alias else hint(name, DATASETS)
        raise ValueError(f"unknown dataset {name!r}{near}; known: {', '.join(DATASETS)}")
    return name


def check_setting(code: Any) -> str:
    """``code`` if it is one of the 36 setting codes (docs/streams.md), else ValueError naming the format."""
    if not isinstance(code, str) or not is_setting_code(code):
        raise ValueError(
            f"invalid setting {code!r}{hint(code, SETTING_CODES_36)}: a code is <class corr><class imb>"
            "<domain corr><domain imb> with corr in i,n,1 and imb in 1,u (e.g. 'nui1')"
        )
    return code


class CellFields(Strict):
    """The fields every cell of a config shares (see ``unitta.cell.Cell`` for what each one means)."""

    factors: dict[str, float] = {}
    sampler: str = "official"  # a sweep lists several (SweepConfig.sampler)
    S: int | None = None
    length: int | None = None
    n_per_domain: int | None = None
    severity: int = 5
    data_dir: str | None = None
    checkpoint_dir: str | None = None
    device: str = "auto"
    precision: Literal[PRECISIONS] = "fp32"  # type: ignore[valid-type]
    profile: Literal[PROFILES] = "default"  # type: ignore[valid-type]
    compile: bool = False
    trust_checkpoints: bool = False
    protocol: Literal[PROTOCOLS] = "online"  # type: ignore[valid-type]
    cost: Literal[COST_MODELS] = "passes"  # type: ignore[valid-type]
    forgetting: bool = False
    corruptions: list[str] | None = None  # the domains (None: the dataset's test corruptions; docs/selection.md)

    @field_validator("corruptions")
    @classmethod
    def _corruptions(cls, value: list[str] | None) -> list[str] | None:
        known = (*CORRUPTIONS, *HELD_OUT_CORRUPTIONS)
        for name in value or []:
            if name not in known:
                raise ValueError(f"unknown corruption {name!r}{hint(name, known)}; known: {', '.join(known)}")
        if value is not None and (not value or len(set(value)) < len(value)):
            raise ValueError(f"expected distinct corruption names, got {value}")
        return value

    rounds: int = 1
    reset: Literal[RESETS] = "none"  # type: ignore[valid-type]
    ccc: dict[str, Any] | None = None
    curve_points: int = 10
    domains: list[str] | None = None  # an image folder's domain / class folders (docs/own_data.md)
    classes: list[str] | None = None
    checkpoint: str | None = None  # weights of a torchvision:/timm:/builder model
    source_dir: str | None = None  # an image folder's labelled source images
    datasets_as_domains: list[str] | None = None  # with dataset mixture: the natural-shift sets forming its domains
    cache_images: bool = False  # decode an image folder once into memory (placement: results unchanged)

    @field_validator("datasets_as_domains")
    @classmethod
    def _members(cls, value: list[str] | None) -> list[str] | None:
        from unitta.data.mixture import check_members

        return None if value is None else check_members(value)

    @field_validator("domains", "classes")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or len(set(value)) != len(value)):
            raise ValueError(f"expected a non-empty list of distinct folder names, got {value}")
        return value

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, value: str | list[str]) -> str | list[str]:
        for name in [value] if isinstance(value, str) else value:
            if name not in SAMPLERS:
                raise ValueError(f"unknown sampler {name!r}{hint(name, SAMPLERS)}; known: {', '.join(SAMPLERS)}")
        return value

    @field_validator("factors")
    @classmethod
    def _factors(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key not in FACTOR_KEYS:
                raise ValueError(f"unknown factor {key!r}{hint(key, FACTOR_KEYS)}; allowed: {', '.join(FACTOR_KEYS)}")
        return value

    @field_validator("S", "length", "n_per_domain", "rounds", "curve_points")
    @classmethod
    def _positive_or_none(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @field_validator("severity")
    @classmethod
    def _severity(cls, value: int) -> int:
        if not 1 <= value <= 5:
            raise ValueError(f"must be in 1..5 (CIFAR-10-C severities), got {value}")
        return value

    @model_validator(mode="after")
    def _sampler_sizes(self) -> CellFields:
        samplers = [self.sampler] if isinstance(self.sampler, str) else list(self.sampler)
        if self.ccc is not None:
            check_ccc(self.ccc, CCC_SAMPLER if CCC_SAMPLER in samplers else samplers[0], self.length)
        if CCC_SAMPLER in samplers and self.reset == "each_shift":
            raise ValueError("reset=each_shift: a ccc stream changes continuously and has no domain shifts; "
                             "use reset: none or each_batch")
        if not set(samplers) & set(ULMM_SAMPLERS):
            return self  # sorted / dirichlet take no S or length: their own checks say so
        if self.S is not None and "official" not in samplers:
            raise ValueError("S: only the official sampler has a per-state cap S; use length with the exact sampler")
        if self.length is not None and not {"exact", CCC_SAMPLER} & set(samplers):
            raise ValueError("length: only the exact sampler takes a stream length; use S with the official sampler")
        return self

    def cell_fields(self) -> dict[str, Any]:
        """These fields as ``Cell`` keyword arguments (fresh copies of the mappings)."""
        fields = {
            name: (dict(v) if isinstance(v := getattr(self, name), dict) else v) for name in CellFields.model_fields
        }
        for key in ("domains", "classes", "datasets_as_domains"):
            if fields[key] is not None:
                fields[key] = tuple(fields[key])
        return fields


class CellSpec(CellFields):
    """One cell but its method (a tune config's ``cell:``; the methods and the searched fields come from elsewhere)."""

    dataset: str = "fmnist-c"
    setting: str = "i111"
    model: str | None = None
    method_kwargs: dict[str, Any] = {}
    seed: int = 425
    batch_size: int = 64
    num_threads: int | None = None
    delta: float | None = None  # the dirichlet sampler's concentration (unitta.streams.protocols)

    @model_validator(mode="before")
    @classmethod
    def _no_method(cls, data: Any) -> Any:
        if isinstance(data, dict) and "method" in data:
            raise ValueError("'method' is set by 'methods' (or objective.gap), not in 'cell'")
        return data

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return check_dataset_name(value)

    @field_validator("setting")
    @classmethod
    def _setting(cls, value: str) -> str:
        return check_setting(value)

    @field_validator("delta")
    @classmethod
    def _delta(cls, value: float | None) -> float | None:
        return None if value is None else check_delta(value)

    @field_validator("seed")
    @classmethod
    def _seed(cls, value: int) -> int:
        return check_seed(value)

    @field_validator("batch_size", "num_threads")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @model_validator(mode="after")
    def _as_cell(self) -> CellSpec:
        try:
            self.cell()  # the Cell's own checks (a sampler's fixed setting, delta, ...)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return self

    def cell(self, **changes: Any) -> Cell:
        """The ``Cell`` of this spec with ``changes`` applied (e.g. method=...)."""
        fields = {**self.cell_fields(), "method_kwargs": dict(self.method_kwargs)}
        fields.update(
            dataset=self.dataset,
            setting=self.setting,
            model=self.model,
            seed=self.seed,
            batch_size=self.batch_size,
            num_threads=self.num_threads,
        )
        return Cell(**{**fields, **changes})
