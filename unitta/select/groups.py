"""A selection's groups (a method on one setting and stream seed), each method's search space and the cells of
its trials (docs/selection.md).

A point is a {hyper-parameter: value} dict; its cells are ordinary cells whose ``method_kwargs`` hold the
point (on top of the config cell's own overrides), so a later sweep with those overrides reuses them:
- the *test* trial: the test stream (the cell's own corruptions), with the config's criteria recorded;
- the *validation* trial: the same setting and stream seed on the validation corruptions (holdout);
- the *chosen* cell: the test stream without criteria (run for a holdout choice when no test trial ran);
- the *default* cell: the method's defaults, exactly the plain sweep cell.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from typing import Any

from unitta.cell import Cell
from unitta.schema import ConfigError
from unitta.schema.methods import check_methods
from unitta.search.cell_template import base_cell
from unitta.search.distributions import distribution
from unitta.search_dimensions import Dim
from unitta.select.config import SelectConfig

__all__ = ["Group", "STREAMS", "groups", "grid_points", "chosen_text", "trial_cell", "distributions",
           "check_spaces", "method_dims"]

STREAMS = ("test", "validation", "chosen", "default")


@dataclass(frozen=True)
class Group:
    """One selection problem: a method on one (setting, stream seed); one row per protocol (and criterion)."""

    setting: str
    seed: int
    method: str

    @property
    def key(self) -> str:
        return f"{self.method}:{self.setting}:{self.seed}"


def groups(cfg: SelectConfig) -> list[Group]:
    return [Group(s, seed, m) for m in cfg.methods for s in cfg.setting_list for seed in cfg.seed_list]


def chosen_text(point: dict[str, Any]) -> str:
    """A point as a stable JSON string (the ``chosen`` column of selection.parquet)."""
    return json.dumps(point, sort_keys=True, default=float)


def method_dims(cfg: SelectConfig, method: str) -> dict[str, Dim]:
    """The method's searched dimensions: the config's (its lists and ranges read as dimensions), or its declared
    space's."""
    if cfg.space == "declared":
        from unitta.methods import method_space

        return dict(method_space(method))
    return dict(cfg.space[method])


def grid_points(cfg: SelectConfig, method: str) -> list[dict[str, Any]]:
    """The cartesian product of the method's dimensions (``search.grid_points`` per range without ``num``)."""
    dims = method_dims(cfg, method)
    names = sorted(dims)
    values = [dims[name].points(cfg.search.grid_points) for name in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def distributions(cfg: SelectConfig, method: str) -> dict[str, Any]:
    """Optuna distributions of the method's dimensions (for the search package's Optuna driver)."""
    return {name: distribution(dim) for name, dim in sorted(method_dims(cfg, method).items())}


def trial_cell(cfg: SelectConfig, group: Group, point: dict[str, Any] | None, stream: str) -> Cell:
    """The cell of ``point`` (None: the defaults) for ``group`` on ``stream`` (one of STREAMS)."""
    base = base_cell(cfg)
    kwargs = dict(base.method_kwargs) if stream == "default" else {**base.method_kwargs, **(point or {})}
    changes: dict[str, Any] = dict(method=group.method, setting=group.setting, seed=group.seed, method_kwargs=kwargs)
    if stream == "validation":
        if "holdout" not in cfg.protocols:  # a caller's bug: only the holdout protocol validates
            raise ValueError(f"a validation cell without the holdout protocol (protocols: {cfg.protocols})")
        changes["corruptions"] = cfg.validation.names()
    elif stream == "test" and "unsupervised" in cfg.protocols:
        changes["criteria"] = tuple(cfg.criteria)
    return dataclasses.replace(base, **changes)


def check_spaces(cfg: SelectConfig, source: str) -> None:
    """Every method against the registry (did-you-mean) and every space against the method's Config
    (``unitta.methods.check_space``: names with did-you-mean, each value or range end within its checks)."""
    from unitta.methods import check_space

    base = base_cell(cfg)
    entries = [("methods", m, dict(base.method_kwargs)) for m in cfg.methods]
    check_methods(entries, [base.dataset], base.profile, source, models={base.dataset: base.model})
    for method in cfg.methods:
        try:
            check_space(method, method_dims(cfg, method))
        except ValueError as exc:
            raise ConfigError(f"{source}: space.{method}: {exc}".replace("\n", " ")) from None

