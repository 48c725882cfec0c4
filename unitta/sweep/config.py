"""The sweep YAML schema: validated with pydantic, expanded into a list of ``Cell`` s.

A sweep config names datasets, models (``models: {dataset: name}``; each dataset's default otherwise; a
method that does not run on a model's normalisation kind is refused here), methods (with hyper-parameter
overrides), settings, factors (fixed overrides and grids), the sampler(s), S / stream length, seeds, batch
sizes, the resources of one cell and where results go (docs/results.md). Every mistake is reported before
any task runs as a ``ConfigError`` whose message is one line naming the key and the problem; unknown keys get a
"did you mean" hint::

    name: quick
    datasets: [fmnist-c]
    methods: [test, bn, {tent: {lr: 5.0e-4}}]
    settings: [i111, nui1, i11u]
    seeds: [425]
    resources: {num_cpus: 1, num_gpus: 0}

Cells are expanded in a fixed order (dataset, model, protocol, method, sampler, setting, factor grid point,
seed, batch size), so the same YAML always gives the same cells with the same ids.

``protocol`` may list both TTA protocols, like ``sampler`` its samplers: ``protocol: [online, realtime]`` runs
the grid once online and once in real time (docs/results.md, "Real time").

``sampler`` may list several samplers. The ULMM samplers (official, exact) run every listed setting and
factor point; the other benchmark's orders (sorted, dirichlet, gradual, gradual_correlated; docs/streams.md) run
once per grid point with their own setting code (1111 / n1i1 / i111 / 1111), dirichlet once per ``delta``; the
gradual ones play every corruption at severities 1..5..1 (a dataset without severities is refused)::

    sampler: [official, sorted, dirichlet, gradual, gradual_correlated]
    delta: [0.01, 0.1]
    settings: [i111, i1i1]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import field_validator, model_validator

from unitta.cell import Cell, field_named
from unitta.cell.resolution import share_resolution
from unitta.cell.sampler_keys import check_sampler_keys
from unitta.cell.spec import CellFields
from unitta.schema import (
    ConfigError,
    Resources,
    RunConfig,
    Strict,
    check_distinct,
    validate,
)
from unitta.schema.methods import check_methods
from unitta.schema.overrides import read_config, source_with
from unitta.schema.yaml_files import read_yaml_file
from unitta.streams import CCC_SAMPLER, PROTOCOL_SAMPLERS, PROTOCOL_SETTINGS, ULMM_SAMPLERS
from unitta.sweep.setting_lists import check_half, expand_settings

__all__ = [
    "SweepConfig",
    "Resources",
    "MethodSpec",
    "load_config",
    "parse_config",
    "read_yaml_file",
]


class MethodSpec(Strict):
    """One method of the grid and its hyper-parameter overrides (checked against the method's Config)."""

    name: str
    overrides: dict[str, Any] = {}


class SweepConfig(RunConfig, CellFields):
    """A validated sweep config. ``cells()`` expands it into the grid of ``Cell`` s.

    The fields every cell shares (sampler, severity, precision, ...) are ``unitta.cell.spec.CellFields``',
    the same model a tune config's ``cell`` has; the gridded ones are lists here.
    """

    datasets: list[str]
    models: dict[str, str] = {}
    methods: list[MethodSpec]
    settings: list[str] | None = None
    class_settings: list[str] | None = None
    domain_settings: list[str] | None = None
    factor_grid: dict[str, list[float]] = {}
    sampler: list[str] = ["official"]  # gridded here; one per cell (CellFields.sampler)
    protocol: list[str] = ["online"]  # gridded here too: [online, realtime] runs the grid under both
    delta: list[float] | None = None
    seeds: list[int] = [425]
    batch_size: list[int] = [64]

    # ------------------------------------------------------------------ field checks
    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        """Accept the short forms: a single value for list keys, methods as names or {name: overrides}."""
        if not isinstance(data, dict):
            raise ValueError(f"a sweep config is a mapping of keys, got {type(data).__name__}")
        data = dict(data)
        if data.get("datasets_as_domains") and "datasets" not in data:
            data["datasets"] = ["mixture"]  # the members are the domains of one pool
        for key in ("datasets", "seeds", "batch_size", "class_settings", "domain_settings", "sampler", "delta",
                    "protocol"):
            if key in data and not isinstance(data[key], list) and not (key == "delta" and data[key] is None):
                data[key] = [data[key]]
        try:
            if isinstance(data.get("settings"), str):
                data["settings"] = expand_settings(data["settings"])
            elif isinstance(data.get("settings"), list):
                data["settings"] = [s for item in data["settings"] for s in expand_settings(item)]
        except ValueError as exc:
            raise ValueError(f"settings: {exc}") from None
        methods = data.get("methods")
        if isinstance(methods, (str, dict)):
            methods = [methods]
        if isinstance(methods, list):
            data["methods"] = [_method_entry(m, i) for i, m in enumerate(methods)]
        return data

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[MethodSpec]) -> list[MethodSpec]:
        if not value:
            raise ValueError("needs at least one method")
        return value

    @field_validator("class_settings")
    @classmethod
    def _class_settings(cls, value: list[str] | None) -> list[str] | None:
        for code in value or []:
            check_half(code, "class")
        return value

    @field_validator("domain_settings")
    @classmethod
    def _domain_settings(cls, value: list[str] | None) -> list[str] | None:
        for code in value or []:
            check_half(code, "domain")
        return value

    @field_validator("factor_grid")
    @classmethod
    def _factor_grid(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        field_named("factors").check(value)
        for key, values in value.items():
            try:
                check_distinct(values)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> SweepConfig:
        given = [self.settings is not None, self.class_settings is not None or self.domain_settings is not None]
        self._check_samplers(any(given))
        if self.ulmm_samplers() or CCC_SAMPLER in self.sampler:
            self._check_settings(given)
        both = set(self.factors) & set(self.factor_grid)
        if both:
            raise ValueError(f"factors and factor_grid both set {sorted(both)}; keep each factor in one of them")
        for dataset in self.models:
            if dataset not in self.datasets:
                raise ValueError(
                    f"models: key {dataset!r} is not one of the sweep's datasets ({', '.join(self.datasets)})"
                )
        self._grid()  # every cell's own checks (unitta.cell), e.g. a stream too long for a dataset
        return self

    def _check_settings(self, given: list[bool]) -> None:
        if given == [False, False]:
            raise ValueError("settings: missing; give settings (codes, 'all24' or 'all36') "
                             "or class_settings and domain_settings")
        if all(given):
            raise ValueError("settings: give either settings or class_settings/domain_settings, not both")
        if given[1] and (self.class_settings is None or self.domain_settings is None):
            raise ValueError("class_settings and domain_settings: give both (their cross product is the grid)")
        try:
            check_distinct(self.setting_codes())
        except ValueError as exc:
            raise ValueError(f"settings: {exc}") from None

    def _check_samplers(self, has_settings: bool) -> None:
        """The sweep's own keys that only some samplers take (``unitta.cell.sampler_keys``; the shared ones, S,
        length, factors, ccc, are checked by ``CellFields``)."""
        given = {"delta": self.delta is not None, "settings": has_settings, "factor_grid": bool(self.factor_grid)}
        check_sampler_keys(self.sampler, [key for key, present in given.items() if present])

    def ulmm_samplers(self) -> list[str]:
        """The listed samplers that draw ULMM streams (official, exact): they run the listed settings."""
        return [s for s in self.sampler if s in ULMM_SAMPLERS]

    # ------------------------------------------------------------------ expansion
    def setting_codes(self) -> list[str]:
        """The settings of the grid, in order (of the ULMM samplers; the others fix their own)."""
        if self.settings is not None:
            return list(self.settings)
        return [c + d for c in self.class_settings or [] for d in self.domain_settings or []]

    def factor_points(self) -> list[dict[str, float]]:
        """The factor overrides of each grid point: ``factors`` merged with each point of ``factor_grid``."""
        keys = list(self.factor_grid)
        points = []
        for values in itertools.product(*(self.factor_grid[k] for k in keys)):
            points.append({**self.factors, **dict(zip(keys, (float(v) for v in values)))})
        return points

    def stream_points(self) -> list[dict[str, Any]]:
        """The stream coordinates of the grid, in order: Cell keywords sampler, setting, factors, delta, S, length."""
        points = []
        for sampler in self.sampler:
            if sampler in PROTOCOL_SAMPLERS:
                for delta in (self.delta or [None]) if sampler == "dirichlet" else [None]:
                    points.append(dict(sampler=sampler, setting=PROTOCOL_SETTINGS[sampler], factors={}, delta=delta))
                continue
            size = {"S": self.S} if sampler == "official" else {"length": self.length}
            if sampler == CCC_SAMPLER:
                size["ccc"] = dict(self.ccc or {})
            for setting in self.setting_codes():
                for factors in self.factor_points():
                    points.append(dict(sampler=sampler, setting=setting, factors=dict(factors), **size))
        return points

    def cells(self) -> list[Cell]:
        """Every cell of the grid (dataset, model, method, sampler, setting, factors, seed, batch size)."""
        return share_resolution(self._grid())

    def _grid(self) -> list[Cell]:
        stream_keys = ("sampler", "factors", "S", "length", "ccc", "protocol")  # set per stream point / protocol
        common = {k: v for k, v in self.cell_fields().items() if k not in stream_keys}
        common["num_threads"] = self.resources.num_threads
        cells = []
        for dataset in self.datasets:
            model = self.models.get(dataset)
            grid = itertools.product(self.protocol, self.methods, self.stream_points(), self.seeds, self.batch_size)
            for protocol, method, point, seed, batch_size in grid:
                stream = {**point, "factors": dict(point["factors"])}
                cells.append(Cell(dataset=dataset, method=method.name, model=model,
                                  method_kwargs=dict(method.overrides), **stream, seed=seed, batch_size=batch_size,
                                  protocol=protocol, **common))
        return cells


def _method_entry(entry: Any, index: int) -> Any:
    """'tent' | {'tent': {...overrides}} | {'name': 'tent', 'overrides': {...}} -> MethodSpec input."""
    if isinstance(entry, str):
        return {"name": entry}
    if isinstance(entry, dict) and "name" not in entry:
        if len(entry) != 1:
            raise ValueError(
                f"methods[{index}]: one method per list item, e.g. {{tent: {{lr: 1.0e-4}}}}, got {entry!r}"
            )
        ((name, overrides),) = entry.items()
        if overrides is not None and not isinstance(overrides, dict):
            raise ValueError(f"methods[{index}] ({name}): overrides must be a mapping, got {overrides!r}")
        return {"name": name, "overrides": overrides if overrides is not None else {}}
    return entry


# ---------------------------------------------------------------------- loading
def parse_config(data: Any, source: str = "<config>", base_dir: str | Path | None = None) -> SweepConfig:
    """Validate a parsed YAML mapping; method names and overrides are checked against the registry.

    The ``plugins`` are imported first (paths relative to ``base_dir``, default the current directory) and
    kept as absolute paths, so that the methods they register pass the check (``unitta.plugins``).
    """
    from unitta import plugins

    cfg = validate(SweepConfig, data, source)
    cfg = _absolute_builders(cfg, base_dir)
    if cfg.plugins:
        loaded = plugins.load(cfg.plugins, base_dir, source)
        cfg = cfg.model_copy(update={"plugins": [p.spec for p in loaded]})
    check_methods(
        [(f"methods[{i}]", m.name, m.overrides) for i, m in enumerate(cfg.methods)], cfg.datasets, cfg.profile, source,
        models=dict(cfg.models),
    )
    _check_duplicates(cfg, source)
    return cfg


def _absolute_builders(cfg: SweepConfig, base_dir: str | Path | None) -> SweepConfig:
    """``models: {folder: my_models.py:build}``: the file relative to the config's folder, made absolute (the
    file must then be at that path on every node; an installed module, ``my_pkg.models:build``, need not)."""
    models = {}
    for dataset, spec in cfg.models.items():
        head, _, function = spec.rpartition(":")
        if head.endswith(".py") and not Path(head).is_absolute():
            spec = f"{(Path(base_dir or Path.cwd()) / head).resolve()}:{function}"
        models[dataset] = spec
    return cfg.model_copy(update={"models": models})


def _check_duplicates(cfg: SweepConfig, source: str) -> None:
    seen: set[str] = set()
    try:
        cells = cfg.cells()
    except ValueError as exc:  # a Cell's own check of a combination the grid makes (a dataset and its keys)
        raise ConfigError(f"{source}: {exc}".replace("\n", " ")) from None
    for cell in cells:
        cid = cell.cell_id()
        if cid in seen:
            raise ConfigError(
                f"{source}: methods: the grid has the same cell twice ({cell.method} {cell.setting}, "
                f"overrides {cell.method_kwargs}); list each method/override combination once"
            )
        seen.add(cid)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> SweepConfig:
    """Read and validate a sweep YAML file with the command line's ``key=value`` ``overrides``
    (``unitta.schema.overrides``); any mistake raises ``ConfigError`` (one line)."""
    path = Path(path)
    data = read_config(path, overrides)
    if isinstance(data, dict) and "name" not in data:
        data = {"name": path.stem, **data}
    cfg = parse_config(data, source=source_with(path, overrides), base_dir=path.parent)
    return cfg.with_overrides(overrides)
