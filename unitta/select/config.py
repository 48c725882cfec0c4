"""The YAML schema of ``unitta select`` (pydantic), validated once at load time (docs/selection.md).

Example (the interface; ``sweeps/select_quick.yaml`` is a bigger one)::

    name: select_example
    cell: {dataset: fmnist-c, n_per_domain: 200, S: 10, seed: 425, batch_size: 64, sampler: official}
    settings: [i111, nu11]
    methods: [tent, sar]
    space:                      # 'declared' (the methods' own spaces) or per method
      tent: {lr: [0.0001, 0.001, 0.01]}
      sar: {lr: [0.0001, 0.001, 0.01]}
    search: {algorithm: grid}   # grid | optuna (num_samples), scheduler: none | asha
    protocols: [default, oracle, holdout, unsupervised]
    criteria: [entropy]         # the unsupervised criteria to report
    validation: {corruptions: held_out}

A per-method space maps hyper-parameter names to a list of values (grid points; Optuna's choices) or a
range ``{low, high, log, num}`` (``num`` grid points; Optuna samples the range). Every mistake is one line,
exit code 2, nothing created: unknown methods or hyper-parameters (did-you-mean), values the method's
Config refuses, an empty space, a method or a grid value listed twice, ``unsupervised`` without criteria, an
unknown criterion, validation corruptions that are unknown, fewer than two or also test corruptions, the holdout
protocol on a dataset whose domains are not corruptions (an image folder), ``scheduler: asha`` without the
holdout protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from unitta.cell import field_named
from unitta.cell.choices import CRITERIA
from unitta.cell.fields import check_setting
from unitta.cell.spec import CellSpec
from unitta.schema import ConfigError, RunConfig, Strict, check_distinct, hint, validate
from unitta.schema.overrides import read_config, source_with
from unitta.search.config_dimensions import ValuesOrRange
from unitta.search_dimensions import Choice

__all__ = [
    "SELECTION_PROTOCOLS", "SelectSearchSpec", "ValidationSpec", "SelectConfig", "load_select_config",
    "parse_select_config",
]

# default: the published defaults; oracle: best on the test stream (labels; an upper bound, TTAB's oracle);
# holdout: best on a validation stream of held-out corruptions; unsupervised: best by a label-free criterion
SELECTION_PROTOCOLS: tuple[str, ...] = ("default", "oracle", "holdout", "unsupervised")

# a hyper-parameter's values (``Choice``) or a range ``{low, high, log, num}`` (``Uniform`` / ``LogUniform``), read
# into the search's one vocabulary (``unitta.search.config_dimensions``)
ParamSpec = ValuesOrRange


class SelectSearchSpec(Strict):
    """How each method's space is searched (through Ray Tune's searcher and scheduler interfaces).

    algorithm: 'grid' (every point) or 'optuna' (Ray Tune's OptunaSearch, TPE seeded by ``seed``:
        ``num_samples`` points per (setting, seed, method), proposed by the holdout validation error, else
        the oracle's test error, else the first criterion; every protocol chooses among the points run).
    grid_points: points per dimension of a range without ``num`` (and of a declared space's dimensions).
    scheduler: 'none' or 'asha' (Ray Tune's AsyncHyperBandScheduler stops validation trials early from the
        validation error they report every ``report_every`` batches; ``reduction_factor`` its eta).
    report_every: batches between reports (None: the first rung, the validation stream's batches / rf^3).
    max_concurrent: open Optuna trials per (setting, seed, method).
    """

    algorithm: Literal["grid", "optuna"] = "grid"
    grid_points: int = Field(default=3, ge=2)
    num_samples: int = Field(default=8, ge=1)
    seed: int = 0
    scheduler: Literal["none", "asha"] = "none"
    reduction_factor: float = Field(default=3.0, gt=1.0)
    report_every: int | None = Field(default=None, ge=1)
    max_concurrent: int = Field(default=2, ge=1)


class ValidationSpec(Strict):
    """The holdout protocol's validation stream: the test cell's setting and stream seed on other corruptions.

    corruptions: 'held_out' (Hendrycks' four held-out corruptions, ``unitta.data.HELD_OUT_CORRUPTIONS``) or a
    list of at least two names (a stream needs two domains); refused when one is also a test corruption.
    """

    corruptions: Literal["held_out"] | list[str] = "held_out"

    @field_validator("corruptions")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list; give corruption names or 'held_out'")
            field_named("corruptions").check(value)
            if len(value) < 2:
                raise ValueError(f"{value}: a validation stream needs at least 2 domains; list 2 or more "
                                 "corruptions (or 'held_out')")
        return value

    def names(self) -> tuple[str, ...]:
        if self.corruptions == "held_out":
            from unitta.data import HELD_OUT_CORRUPTIONS

            return tuple(HELD_OUT_CORRUPTIONS)
        return tuple(self.corruptions)


class SelectConfig(RunConfig):
    """A whole selection config (see the module docstring)."""

    config_file_name: ClassVar[str] = "select.yaml"

    cell: CellSpec = CellSpec()
    settings: list[str] = Field(default_factory=list)  # empty: the cell's setting
    seeds: list[int] = Field(default_factory=list)  # empty: the cell's seed
    methods: list[str]
    space: Literal["declared"] | dict[str, dict[str, ParamSpec]]
    search: SelectSearchSpec = SelectSearchSpec()
    protocols: list[Literal[SELECTION_PROTOCOLS]] = list(SELECTION_PROTOCOLS)  # type: ignore[valid-type]
    criteria: list[str] = Field(default_factory=list)
    validation: ValidationSpec = ValidationSpec()

    @field_validator("settings")
    @classmethod
    def _settings(cls, value: list[str]) -> list[str]:
        return [check_setting(code) for code in value]

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: list[str]) -> list[str]:
        return check_distinct(value) if value else value  # none at all: said by _check

    @field_validator("space")
    @classmethod
    def _space(cls, value: Any) -> Any:
        for method, params in value.items() if isinstance(value, dict) else ():
            for name, spec in params.items():
                if isinstance(spec, Choice):
                    try:
                        check_distinct(list(spec.values))
                    except ValueError as exc:
                        raise ValueError(f"{method}.{name}: {exc}") from None
        return value

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, value: list[str]) -> list[str]:
        return list(field_named("criteria").check(value))

    @model_validator(mode="after")
    def _check(self) -> SelectConfig:
        if not self.methods:
            raise ValueError("'methods' must list at least one method")
        if not self.protocols:
            raise ValueError("'protocols' must list at least one of " + ", ".join(SELECTION_PROTOCOLS))
        if "unsupervised" in self.protocols and not self.criteria:
            raise ValueError(f"protocol 'unsupervised' needs 'criteria' (one or more of {', '.join(CRITERIA)})")
        if self.criteria and "unsupervised" not in self.protocols:
            raise ValueError("'criteria' are for the 'unsupervised' protocol; add it to 'protocols' or drop them")
        if self.search.scheduler == "asha" and "holdout" not in self.protocols:
            raise ValueError("search.scheduler 'asha' stops the holdout protocol's validation trials; add 'holdout'")
        if isinstance(self.space, dict):
            for method, params in self.space.items():
                if method not in self.methods:
                    raise ValueError(f"space: {method!r} is not in 'methods'{hint(method, self.methods)}")
                if not params:
                    raise ValueError(f"space.{method}: an empty space; name at least one hyper-parameter")
            missing = [m for m in self.methods if m not in self.space]
            if missing:
                raise ValueError(f"space: no space for {', '.join(missing)} (or use space: declared)")
        return self

    @property
    def setting_list(self) -> list[str]:
        return list(self.settings) or [self.cell.setting]

    @property
    def seed_list(self) -> list[int]:
        return list(self.seeds) or [self.cell.seed]

    @property
    def uses_test_trials(self) -> bool:
        """Whether every point runs on the test stream (oracle, unsupervised) or only the chosen ones."""
        return bool({"oracle", "unsupervised"} & set(self.protocols))


def parse_select_config(raw: Any, where: str = "select config", base_dir: str | Path | None = None) -> SelectConfig:
    """Validate an already-parsed YAML mapping; ConfigError (one line) on any problem (plugins imported first)."""
    from unitta import plugins

    cfg = validate(SelectConfig, raw, where)
    if cfg.plugins:
        loaded = plugins.load(cfg.plugins, base_dir, where)
        cfg = cfg.model_copy(update={"plugins": [p.spec for p in loaded]})
    if "holdout" in cfg.protocols:
        _check_disjoint(cfg, where)
    return cfg


def _check_disjoint(cfg: SelectConfig, where: str) -> None:
    from unitta.data.records import CORRUPTIONS, RECORDS

    if not RECORDS[cfg.cell.dataset].has_corruptions:
        raise ConfigError(
            f"{where}: protocols: holdout validates on held-out corruptions, and {cfg.cell.dataset}'s domains are "
            "folders, not corruptions; drop 'holdout' from protocols (docs/selection.md)")
    validation = cfg.validation.names()
    test = cfg.cell.corruptions or CORRUPTIONS
    overlap = [c for c in validation if c in test]
    if overlap:
        raise ConfigError(
            f"{where}: validation.corruptions: {', '.join(overlap)} also test corruption(s); the holdout protocol "
            "needs corruptions disjoint from the test ones (e.g. held_out)"
        )


def load_select_config(path: str | Path, overrides: Sequence[str] = ()) -> SelectConfig:
    """Read and validate a select YAML file with the command line's ``key=value`` ``overrides``
    (``unitta.schema.overrides``)."""
    path = Path(path)
    cfg = parse_select_config(read_config(path, overrides), where=source_with(path, overrides), base_dir=path.parent)
    return cfg.with_overrides(overrides)
