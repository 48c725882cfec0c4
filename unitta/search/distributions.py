"""A search dimension (``unitta.search_dimensions``) as the Optuna distribution Ray Tune's Optuna searcher samples,
and a point's identity (docs/analysis.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from unitta.search_dimensions import Choice, Dim, IntUniform, LogUniform

__all__ = ["distribution", "inside", "point_key"]


def distribution(dim: Dim) -> Any:
    """The Optuna distribution of ``dim``: a choice's values, an integer range, or a real range (log or linear)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dim, Choice):
        return CategoricalDistribution(list(dim.values))
    if isinstance(dim, IntUniform):
        return IntDistribution(int(dim.low), int(dim.high))
    return FloatDistribution(float(dim.low), float(dim.high), log=isinstance(dim, LogUniform))


def inside(point: dict[str, Any], distributions: dict[str, Any]) -> bool:
    """Whether a point lies in the space of ``distributions`` (a config that changed does not warm-start)."""
    if set(point) != set(distributions):
        return False
    try:
        return all(d._contains(d.to_internal_repr(point[name])) for name, d in distributions.items())
    except (ValueError, TypeError):
        return False


def point_key(point: dict[str, Any], names: Iterable[str] | None = None) -> str:
    """A text key of ``point``'s values of ``names`` (all of them by default), equal for a suggested point and
    the rows it produced (numbers to 12 significant digits: a value read back from Parquet or JSON)."""

    def norm(v: Any) -> Any:
        return float(f"{float(v):.12g}") if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    names = sorted(point) if names is None else sorted(names)
    return json.dumps({n: norm(point.get(n)) for n in names}, sort_keys=True, default=str)
