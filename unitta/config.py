"""The sweep YAML schema: validated with pydantic, expanded into a list of ``Cell`` s.

A sweep config names datasets, models, methods (with hyper-parameter overrides), settings, factors
(fixed overrides and grids), the sampler, S / stream length, seeds, batch sizes, the resources of one
cell and where results go (DESIGN.md, Sweep; issue 6). Every mistake is reported before any task runs
as a ``ConfigError`` whose message is one line naming the key and the problem; unknown keys get a
"did you mean" hint::

    name: quick
    datasets: [fmnist-c]
    methods: [test, bn, {tent: {lr: 5.0e-4}}]
    settings: [i111, nui1, i11u]
    seeds: [425]
    resources: {num_cpus: 1, num_gpus: 0}

Cells are expanded in a fixed order (dataset, model, method, setting, factor grid point, seed, batch
size), so the same YAML always gives the same cells with the same ids.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from unitta.evaluate import DEFAULT_MODELS, Cell

__all__ = [
    "ConfigError",
    "SweepConfig",
    "Resources",
    "MethodSpec",
    "load_config",
    "parse_config",
    "expand_settings",
    "SETTINGS_24",
    "SETTINGS_36",
    "FACTOR_KEYS",
]

# Setting code characters (spec 1.1): <class corr><class imb><domain corr><domain imb>.
_CORRELATIONS = ("i", "n", "1")
_IMBALANCES = ("1", "u")
# The paper's grid, in the nesting order of the reference's sh/run.sh (spec 5.2): class correlation
# {i, n} x class imbalance {1, u} x domain correlation {i, n, 1} x domain imbalance {1, u}.
SETTINGS_24: tuple[str, ...] = tuple(
    "".join(c) for c in itertools.product(("i", "n"), _IMBALANCES, _CORRELATIONS, _IMBALANCES)
)
# All 36, class-continual included (spec 1.1; excluded from the paper's experiments).
SETTINGS_36: tuple[str, ...] = tuple(
    "".join(c) for c in itertools.product(_CORRELATIONS, _IMBALANCES, _CORRELATIONS, _IMBALANCES)
)
FACTOR_KEYS = ("domain_alpha", "domain_beta", "class_alpha", "class_beta")
DATASETS = tuple(DEFAULT_MODELS)


class ConfigError(ValueError):
    """A sweep config mistake; the message is one line: '<file>: <key>: <problem>'."""


def _hint(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Strict(BaseModel):
    """Base of every section: frozen, and unknown keys refused with a 'did you mean' hint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = list(cls.model_fields)
            for key in data:
                if key not in allowed:
                    raise ValueError(
                        f"unknown key {key!r}{_hint(key, allowed)}; allowed keys: {', '.join(allowed)}"
                    )
        return data


class Resources(_Strict):
    """What one cell asks Ray for. num_cpus also pins torch's thread count (at least 1 thread)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0

    @field_validator("num_cpus")
    @classmethod
    def _cpus(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"must be > 0, got {value}")
        return value

    @field_validator("num_gpus")
    @classmethod
    def _gpus(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        if value > 1 and value != int(value):
            raise ValueError(f"a fraction of a GPU must be < 1 (or a whole number of GPUs), got {value}")
        return value

    @property
    def num_threads(self) -> int:
        return max(1, int(self.num_cpus))


class MethodSpec(_Strict):
    """One method of the grid and its hyper-parameter overrides (checked against the method's Config)."""

    name: str
    overrides: dict[str, Any] = {}


class SweepConfig(_Strict):
    """A validated sweep config. ``cells()`` expands it into the grid of ``Cell`` s."""

    name: str
    output: str | None = None
    datasets: list[str]
    models: dict[str, str] = {}
    methods: list[MethodSpec]
    settings: list[str] | None = None
    class_settings: list[str] | None = None
    domain_settings: list[str] | None = None
    factors: dict[str, float] = {}
    factor_grid: dict[str, list[float]] = {}
    sampler: Literal["official", "exact"] = "official"
    S: int | None = None
    length: int | None = None
    n_per_domain: int | None = None
    seeds: list[int] = [425]
    batch_size: list[int] = [64]
    severity: int = 5
    data_dir: str | None = None
    checkpoint_dir: str | None = None
    device: str = "auto"
    resources: Resources = Resources()
    max_retries: int = 3

    # ------------------------------------------------------------------ field checks
    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        """Accept the short forms: a single value for list keys, methods as names or {name: overrides}."""
        if not isinstance(data, dict):
            raise ValueError(f"a sweep config is a mapping of keys, got {type(data).__name__}")
        data = dict(data)
        for key in ("datasets", "seeds", "batch_size", "class_settings", "domain_settings"):
            if key in data and not isinstance(data[key], list):
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

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least one dataset")
        for name in value:
            if name not in DATASETS:
                raise ValueError(f"unknown dataset {name!r}{_hint(name, DATASETS)}; known: {', '.join(DATASETS)}")
        if len(set(value)) != len(value):
            raise ValueError(f"lists a dataset twice: {value}")
        return value

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
            _check_half(code, "class")
        return value

    @field_validator("domain_settings")
    @classmethod
    def _domain_settings(cls, value: list[str] | None) -> list[str] | None:
        for code in value or []:
            _check_half(code, "domain")
        return value

    @field_validator("factors")
    @classmethod
    def _factors(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key not in FACTOR_KEYS:
                raise ValueError(f"unknown factor {key!r}{_hint(key, FACTOR_KEYS)}; allowed: {', '.join(FACTOR_KEYS)}")
        return value

    @field_validator("factor_grid")
    @classmethod
    def _factor_grid(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for key, values in value.items():
            if key not in FACTOR_KEYS:
                raise ValueError(f"unknown factor {key!r}{_hint(key, FACTOR_KEYS)}; allowed: {', '.join(FACTOR_KEYS)}")
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            if len(set(values)) != len(values):
                raise ValueError(f"{key}: lists a value twice: {values}")
        return value

    @field_validator("S", "length", "n_per_domain")
    @classmethod
    def _positive_or_none(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one seed")
        if any(s < 0 for s in value):
            raise ValueError(f"seeds must be >= 0, got {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"lists a seed twice: {value}")
        return value

    @field_validator("batch_size")
    @classmethod
    def _batch_sizes(cls, value: list[int]) -> list[int]:
        if not value or any(b < 1 for b in value):
            raise ValueError(f"batch sizes must be >= 1, got {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"lists a batch size twice: {value}")
        return value

    @field_validator("severity")
    @classmethod
    def _severity(cls, value: int) -> int:
        if not 1 <= value <= 5:
            raise ValueError(f"must be in 1..5 (CIFAR-10-C severities), got {value}")
        return value

    @field_validator("max_retries")
    @classmethod
    def _retries(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value or any(ch in value for ch in "/\\ \t\n"):
            raise ValueError(f"must be a non-empty word without slashes or spaces, got {value!r}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> "SweepConfig":
        given = [self.settings is not None, self.class_settings is not None or self.domain_settings is not None]
        if given == [False, False]:
            raise ValueError("settings: missing; give settings (codes, 'all24' or 'all36') "
                             "or class_settings and domain_settings")
        if all(given):
            raise ValueError("settings: give either settings or class_settings/domain_settings, not both")
        if given[1] and (self.class_settings is None or self.domain_settings is None):
            raise ValueError("class_settings and domain_settings: give both (their cross product is the grid)")
        if not self.setting_codes():
            raise ValueError("settings: needs at least one setting")
        codes = self.setting_codes()
        if len(set(codes)) != len(codes):
            dup = sorted({c for c in codes if codes.count(c) > 1})
            raise ValueError(f"settings: lists a setting twice: {', '.join(dup)}")
        both = set(self.factors) & set(self.factor_grid)
        if both:
            raise ValueError(f"factors and factor_grid both set {sorted(both)}; keep each factor in one of them")
        for dataset in self.models:
            if dataset not in self.datasets:
                raise ValueError(
                    f"models: key {dataset!r} is not one of the sweep's datasets ({', '.join(self.datasets)})"
                )
        if self.S is not None and self.sampler != "official":
            raise ValueError("S: only the official sampler has a per-state cap S; use length with the exact sampler")
        if self.length is not None and self.sampler != "exact":
            raise ValueError("length: only the exact sampler takes a stream length; use S with the official sampler")
        return self

    # ------------------------------------------------------------------ expansion
    def setting_codes(self) -> list[str]:
        """The settings of the grid, in order."""
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

    def cells(self) -> list[Cell]:
        """Every cell of the grid (dataset, model, method, setting, factors, seed, batch size)."""
        cells = []
        for dataset in self.datasets:
            model = self.models.get(dataset)
            for method in self.methods:
                for setting in self.setting_codes():
                    for factors in self.factor_points():
                        for seed in self.seeds:
                            for batch_size in self.batch_size:
                                cells.append(
                                    Cell(
                                        dataset=dataset,
                                        method=method.name,
                                        setting=setting,
                                        model=model,
                                        method_kwargs=dict(method.overrides),
                                        sampler=self.sampler,
                                        factors=dict(factors),
                                        S=self.S,
                                        length=self.length,
                                        seed=seed,
                                        batch_size=batch_size,
                                        severity=self.severity,
                                        n_per_domain=self.n_per_domain,
                                        data_dir=self.data_dir,
                                        checkpoint_dir=self.checkpoint_dir,
                                        device=self.device,
                                        num_threads=self.resources.num_threads,
                                    )
                                )
        return cells

    def config_hash(self) -> str:
        """A 16-hex-digit hash of the whole validated config (output and placement included)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def output_dir(self) -> Path:
        """Where results go: ``output``, or ``results/<name>``."""
        return Path(self.output) if self.output else Path("results") / self.name


def expand_settings(value: Any) -> list[str]:
    """'all24' | 'all36' | a 4-character code -> a list of codes (spec 1.1); other input is refused."""
    if value == "all24":
        return list(SETTINGS_24)
    if value == "all36":
        return list(SETTINGS_36)
    if not isinstance(value, str):
        raise ValueError(f"a setting is a 4-character code such as 'nui1', or 'all24'/'all36', got {value!r}")
    code = value
    if (
        len(code) != 4
        or code[0] not in _CORRELATIONS
        or code[1] not in _IMBALANCES
        or code[2] not in _CORRELATIONS
        or code[3] not in _IMBALANCES
    ):
        raise ValueError(
            f"invalid setting {code!r}{_hint(code, SETTINGS_36)}: a code is <class corr><class imb>"
            f"<domain corr><domain imb> with corr in i,n,1 and imb in 1,u (e.g. 'nui1'), or 'all24'/'all36'"
        )
    return [code]


def _check_half(code: Any, which: str) -> None:
    if not (isinstance(code, str) and len(code) == 2 and code[0] in _CORRELATIONS and code[1] in _IMBALANCES):
        raise ValueError(
            f"invalid {which} setting {code!r}: a 2-character <corr><imb> with corr in i,n,1 and imb in 1,u (e.g. 'n1')"
        )


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
def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before", "function-wrap") or str(part).startswith(
            ("function-", "list[", "dict[", "str", "int", "float", "literal[", "nullable[")
        ):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _one_line(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if err["type"] == "missing":
        msg = "missing (required)"
    elif err["type"] not in ("value_error", "assertion_error"):
        msg = f"{msg} (got {err.get('input')!r})"
    loc = _format_loc(tuple(err["loc"]))
    more = len(exc.errors()) - 1
    tail = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    head = f"{loc}: " if loc else ""
    return f"{head}{msg}{tail}".replace("\n", " ")


def parse_config(data: Any, source: str = "<config>") -> SweepConfig:
    """Validate a parsed YAML mapping; method names and overrides are checked against the registry."""
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_one_line(exc)}") from None
    except ValueError as exc:  # raised by a 'before' validator outside pydantic's error wrapping
        raise ConfigError(f"{source}: {exc}".replace("\n", " ")) from None
    _check_methods(cfg, source)
    _check_duplicates(cfg, source)
    return cfg


def _check_methods(cfg: SweepConfig, source: str) -> None:
    from unitta.methods import build_config, list_methods, method_class

    registered = list_methods()
    for i, spec in enumerate(cfg.methods):
        if spec.name not in registered:
            raise ConfigError(
                f"{source}: methods[{i}]: unknown method {spec.name!r}{_hint(spec.name, registered)}; "
                f"registered methods: {', '.join(registered)}"
            )
        for dataset in cfg.datasets:
            try:
                build_config(method_class(spec.name), dataset, **spec.overrides)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{source}: methods[{i}] ({spec.name}): {exc}".replace("\n", " ")) from None


def _check_duplicates(cfg: SweepConfig, source: str) -> None:
    seen: dict[str, int] = {}
    for cell in cfg.cells():
        cid = cell.cell_id()
        if cid in seen:
            raise ConfigError(
                f"{source}: methods: the grid has the same cell twice ({cell.method} {cell.setting}, "
                f"overrides {cell.method_kwargs}); list each method/override combination once"
            )
        seen[cid] = 1


def read_yaml_file(path: Path) -> Any:
    """The parsed content of a YAML config file; a missing file or a YAML error is a one-line ``ConfigError``."""
    import yaml

    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}".replace("\n", " ")) from None


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep YAML file; any mistake raises ``ConfigError`` (one line)."""
    path = Path(path)
    data = read_yaml_file(path)
    if data is None:
        raise ConfigError(f"{path}: the file is empty")
    if isinstance(data, dict) and "name" not in data:
        data = {"name": path.stem, **data}
    return parse_config(data, source=str(path))
