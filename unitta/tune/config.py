"""The YAML schema of ``python -m unitta.tune`` (pydantic), validated once at load time.

A tune config names a base cell (``unitta.cell.spec.CellSpec``: every Cell field but the method, checked
by the same model as a sweep's cell fields), the methods, the search space (the four stream factors of
docs/streams.md and the BDN domain-prediction layer of docs/unitta.md), the search algorithm and the
objective. Example (``sweeps/tune_factors.yaml``)::

    name: tune_factors
    cell: {dataset: fmnist-c, setting: n1nu, S: 20}
    methods: [bn, unitta]
    space:
      domain_alpha: [0.5, 0.7, 0.85, 0.95]          # a grid ...
      class_beta: {low: 1, high: 50, log: true, num: 6}   # ... or a range (num: grid points)
      layer: all                                    # every BatchNorm layer of the model
    search: {algorithm: grid, grid: one_at_a_time}
    objective: {metric: error, mode: min}

Unknown keys are refused with a "did you mean" hint; ``load_tune_config`` raises ``ConfigError``
(the CLI turns it into one line on stderr and exit code 2).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from unitta.cell import Cell
from unitta.cell.spec import CellSpec
from unitta.schema import RunConfig, Strict, check_distinct, validate
from unitta.schema.overrides import read_config, source_with
from unitta.search.cell_template import base_cell
from unitta.search.config_dimensions import FactorValuesOrRange
from unitta.search_dimensions import REAL_RANGES, Choice, Dim
from unitta.streams.settings import FACTOR_KEYS

__all__ = [
    "FACTORS",
    "SearchSpec",
    "ObjectiveSpec",
    "TuneConfig",
    "load_tune_config",
    "parse_tune_config",
    "expand_grid",
    "feasible_pairs",
    "map_feasible",
    "unmap_feasible",
    "grid_trials",
    "trial_cells",
    "with_method",
]

# The four stream factors a Cell can override (Cell.factors keys).
FACTORS: tuple[str, ...] = FACTOR_KEYS



# A factor's values (``Choice``) or a range ``{low, high, log, num}`` (``Uniform`` / ``LogUniform``), read into the
# search's one vocabulary (``unitta.search.config_dimensions``).
FactorSpec = FactorValuesOrRange


class SpaceSpec(Strict):
    """What is searched: any of the four factors and the BDN prediction layer.

    layer: 'all' (every BatchNorm layer of the model, ModelInfo.bn_layers), or a list of layer names;
    passed to the method as its ``layer`` override (the unitta / bdn methods, docs/unitta.md).
    """

    domain_alpha: FactorSpec | None = None
    domain_beta: FactorSpec | None = None
    class_alpha: FactorSpec | None = None
    class_beta: FactorSpec | None = None
    layer: Literal["all"] | list[str] | None = None

    @field_validator("domain_alpha", "class_alpha")
    @classmethod
    def _alpha_range(cls, v: FactorSpec | None) -> FactorSpec | None:
        for x in _spec_bounds(v):
            if not 0.0 < x <= 1.0:
                raise ValueError(f"a correlation factor alpha_1 must lie in (0, 1] (docs/streams.md), got {x}")
        return v

    @field_validator("domain_beta", "class_beta")
    @classmethod
    def _beta_range(cls, v: FactorSpec | None) -> FactorSpec | None:
        for x in _spec_bounds(v):
            if x < 1.0:
                raise ValueError(f"an imbalance factor beta must be >= 1 (docs/streams.md), got {x}")
        return v

    def searched(self) -> list[str]:
        """Names of the searched dimensions, factors first, in a fixed order."""
        names = [f for f in FACTORS if getattr(self, f) is not None]
        if self.layer is not None:
            names.append("layer")
        return names


def _spec_bounds(v: Dim | None) -> list[float]:
    if v is None:
        return []
    if isinstance(v, Choice):
        return check_distinct(list(v.values))
    return [v.low, v.high]


class SearchSpec(Strict):
    """How the space is searched.

    algorithm: 'grid' (every point, Ray Tune grid search) or 'optuna' (TPE, Ray Tune's OptunaSearch).
    grid: 'product' (cartesian product of the dimensions) or 'one_at_a_time' (vary one dimension,
        keep the others at the base cell's values: the paper's figure 3 protocol).
    num_samples: optuna trials in total (already-done trials in the output directory count).
    seed: seeds the Optuna sampler.
    max_concurrent: trials running at once.
    feasible_only: optuna only: for an attribute whose alpha_1 and beta are both searched (alpha_1 as a
        range), sample beta and a fraction u in [0, 1] and set alpha_1 = lo + u (hi - lo) on the
        feasible interval [lo, hi] of paper Cor. 1 (``unitta.streams.ulmm.feasible_alpha_range``)
        intersected with the alpha_1 range, so that the search stays inside the feasible region.
    """

    algorithm: Literal["grid", "optuna"] = "grid"
    grid: Literal["product", "one_at_a_time"] = "product"
    num_samples: int = Field(default=16, ge=1)
    seed: int = 0
    max_concurrent: int = Field(default=2, ge=1)
    feasible_only: bool = False


class ObjectiveSpec(Strict):
    """What a trial reports and which way is better.

    metric: 'error' (the stream error of the trial's method, %) or 'gap' (error(gap[0]) - error(gap[1]),
        both methods run on the same stream: a positive gap means gap[0] is worse).
    mode: 'min' or 'max' ('max' with a stress search: where does the method break?).
    """

    metric: Literal["error", "gap"] = "error"
    mode: Literal["min", "max"] = "min"
    gap: tuple[str, str] | None = None

    @model_validator(mode="after")
    def _check(self) -> ObjectiveSpec:
        if self.metric == "gap" and self.gap is None:
            raise ValueError("objective.metric 'gap' needs objective.gap: [METHOD_A, METHOD_B]")
        if self.metric == "error" and self.gap is not None:
            raise ValueError("objective.gap is only used with objective.metric: gap")
        if self.gap is not None and self.gap[0] == self.gap[1]:
            raise ValueError(f"objective.gap needs two different methods, got {list(self.gap)} (the gap is always 0)")
        return self


class TuneConfig(RunConfig):
    """A whole tune config (see the module docstring)."""

    config_file_name: ClassVar[str] = "tune.yaml"

    cell: CellSpec = CellSpec()
    methods: list[str] = Field(default_factory=list)
    space: SpaceSpec
    search: SearchSpec = SearchSpec()
    objective: ObjectiveSpec = ObjectiveSpec()

    @model_validator(mode="after")
    def _check(self) -> TuneConfig:
        if not self.space.searched():
            raise ValueError("space is empty: search at least one of " + ", ".join([*FACTORS, "layer"]))
        if self.objective.metric == "gap":
            if self.methods:
                raise ValueError("with objective.metric 'gap' the methods come from objective.gap; drop 'methods'")
        elif not self.methods:
            raise ValueError("'methods' must list at least one method")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods: lists a method twice: {self.methods}")
        if self.search.algorithm == "optuna" and len(self.methods) > 1:
            raise ValueError(
                "an optuna search optimises one objective: give one method (or objective.metric: gap); "
                f"got methods={self.methods}"
            )
        if self.search.feasible_only:
            if self.search.algorithm != "optuna":
                raise ValueError("search.feasible_only is for optuna searches (a grid reports infeasible points)")
            if not feasible_pairs(self):
                raise ValueError(
                    "search.feasible_only needs an attribute whose alpha (a range) and beta are both searched"
                )
        if self.search.algorithm == "grid":
            for name in FACTORS:
                spec = getattr(self.space, name)
                if isinstance(spec, REAL_RANGES) and spec.num is None:
                    raise ValueError(f"space.{name}: a range in a grid search needs 'num' (grid points)")
        return self

    @property
    def trial_methods(self) -> list[str]:
        """Methods each trial runs: one (metric error) or the two of the gap."""
        return list(self.objective.gap) if self.objective.metric == "gap" else list(self.methods)


def parse_tune_config(raw: Any, where: str = "tune config", base_dir: str | Path | None = None) -> TuneConfig:
    """Validate an already-parsed YAML mapping; ConfigError (one line) on any problem.

    The ``plugins`` are imported here (paths relative to ``base_dir``, default the current directory) and kept
    as absolute paths, so that the methods they register pass the method check (``unitta.plugins``).
    """
    from unitta import plugins

    cfg = validate(TuneConfig, raw, where)
    if cfg.plugins:
        loaded = plugins.load(cfg.plugins, base_dir, where)
        cfg = cfg.model_copy(update={"plugins": [p.spec for p in loaded]})
    return cfg


def load_tune_config(path: str | Path, overrides: Sequence[str] = ()) -> TuneConfig:
    """Read and validate a tune YAML file with the command line's ``key=value`` ``overrides``
    (``unitta.schema.overrides``)."""
    path = Path(path)
    cfg = parse_tune_config(read_config(path, overrides), where=source_with(path, overrides), base_dir=path.parent)
    return cfg.with_overrides(overrides)


# ---------------------------------------------------------------------- search space -> cells
def _values(cfg: TuneConfig, name: str, layers: list[str]) -> list[Any]:
    if name == "layer":
        return list(layers)
    return [float(v) for v in getattr(cfg.space, name).points()]  # a range's own num points


def expand_grid(cfg: TuneConfig, layers: list[str]) -> list[dict[str, Any]]:
    """The grid points of a grid search, each a {dimension: value} dict over the searched dimensions.

    'product': the cartesian product. 'one_at_a_time': each dimension varied alone, the others left
    at the base cell's values (they are omitted from the point); the base point itself comes once.
    """
    names = cfg.space.searched()
    if cfg.search.grid == "product":
        return [dict(zip(names, combo)) for combo in itertools.product(*(_values(cfg, n, layers) for n in names))]
    points: list[dict[str, Any]] = []
    for name in names:
        points += [{name: v} for v in _values(cfg, name, layers)]
    return points


def trial_cells(cfg: TuneConfig, point: dict[str, Any]) -> list[Cell]:
    """The cells of one trial: one per method (the two of a 'gap' objective), factors and layer applied."""
    base = base_cell(cfg)
    factors = {**base.factors, **{k: float(v) for k, v in point.items() if k in FACTORS}}
    cells = []
    for method in cfg.trial_methods:
        kwargs = dict(base.method_kwargs)
        if point.get("layer") is not None:
            kwargs["layer"] = point["layer"]
        cells.append(dataclasses.replace(base, method=method, factors=factors, method_kwargs=kwargs))
    return cells


def grid_trials(cfg: TuneConfig, layers: list[str]) -> list[dict[str, Any]]:
    """Grid points as trials, duplicates (same cells) removed; with several methods, one trial per method."""
    seen: set[tuple[str, ...]] = set()
    trials = []
    methods: list[str | None] = list(cfg.methods) if cfg.objective.metric == "error" else [None]
    for method in methods:
        for point in expand_grid(cfg, layers):
            trial = dict(point) if method is None else {"method": method, **point}
            key = tuple(c.cell_id() for c in trial_cells(with_method(cfg, method), point))
            if key not in seen:
                seen.add(key)
                trials.append(trial)
    return trials


def with_method(cfg: TuneConfig, method: str | None) -> TuneConfig:
    """The config restricted to one method (a grid trial of the 'error' objective runs one method)."""
    if method is None:
        return cfg
    return cfg.model_copy(update={"methods": [method]})


def feasible_pairs(cfg: TuneConfig) -> list[str]:
    """Attributes ('domain', 'class') whose alpha_1 (a range) and beta are both searched."""
    return [
        attr
        for attr in ("domain", "class")
        if isinstance(getattr(cfg.space, f"{attr}_alpha"), REAL_RANGES)
        and getattr(cfg.space, f"{attr}_beta") is not None
    ]


def map_feasible(cfg: TuneConfig, point: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any]:
    """Turn a feasible_only point ({attr}_alpha_u in [0, 1]) into alpha_1 values (see SearchSpec).

    sizes: number of states per attribute, {'domain': D, 'class': K}. An empty interval (the alpha_1
    range lies wholly outside the feasible one for this beta) gives the range's low end, which the
    sampler then refuses: the point is reported as infeasible.
    """
    from unitta.streams.ulmm import feasible_alpha_range

    out = dict(point)
    for attr in feasible_pairs(cfg):
        key = f"{attr}_alpha_u"
        if key not in out:
            continue
        spec = getattr(cfg.space, f"{attr}_alpha")
        lo, hi = feasible_alpha_range(float(out[f"{attr}_beta"]), sizes[attr])
        lo, hi = max(lo, spec.low), min(hi - 1e-9, spec.high)  # alpha_1 = 1 cannot leave a state
        u = float(out.pop(key))
        out[f"{attr}_alpha"] = spec.low if lo > hi else lo + u * (hi - lo)
    return out


def unmap_feasible(cfg: TuneConfig, point: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any] | None:
    """The inverse of ``map_feasible`` for a done point (Optuna's warm start), None if not invertible."""
    from unitta.streams.ulmm import feasible_alpha_range

    out = dict(point)
    for attr in feasible_pairs(cfg):
        spec = getattr(cfg.space, f"{attr}_alpha")
        lo, hi = feasible_alpha_range(float(out[f"{attr}_beta"]), sizes[attr])
        lo, hi = max(lo, spec.low), min(hi - 1e-9, spec.high)
        if lo >= hi:
            return None
        out[f"{attr}_alpha_u"] = min(1.0, max(0.0, (float(out.pop(f"{attr}_alpha")) - lo) / (hi - lo)))
    return out
