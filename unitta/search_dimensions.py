"""A search dimension: the one vocabulary of the ranges searched over, for a method's declared space
(``unitta/methods/parts/search_space.py``), ``unitta tune``'s stream factors and ``unitta select``'s spaces.

Four kinds: ``LogUniform`` (learning rates, scales over decades), ``Uniform`` (thresholds, momenta, mixing weights,
correlation factors), ``IntUniform`` (sizes, inclusive) and ``Choice`` (a finite set: a config's list of values).
Each can list a grid of n points (``grid``; ``points`` the grid a grid search walks: a range's own ``num`` points
when a config gave them), its two extreme points (``corners``), say whether a value lies in it (``contains``) and
describe itself in one line. Grid points are rounded to 10 significant digits, whoever searches them.

It sits on the lowest layer (docs/layout.md) because the methods, below the search package, declare their spaces
with it; the search package reads configs into it (``unitta.search.config_dimensions``) and turns it into Optuna
distributions (``unitta.search.distributions``). Pure Python: neither torch, Ray nor Optuna.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

__all__ = ["LogUniform", "Uniform", "IntUniform", "Choice", "Dim", "DIM_TYPES", "REAL_RANGES"]


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def _check_range(kind: str, low: Any, high: Any, *, integral: bool = False) -> None:
    """low < high, both finite reals (integers for ``integral``), else a one-line ValueError."""
    for name, value in (("low", low), ("high", high)):
        if not _real(value) or (integral and not isinstance(value, numbers.Integral)):
            expected = "an integer" if integral else "a finite number"
            raise ValueError(f"{kind}: {name}={value!r} must be {expected}")
    if not low < high:
        raise ValueError(f"{kind}: low={low!r} must be < high={high!r}")


@dataclass(frozen=True)
class _RealRange:
    """A real range [low, high] whose grid is evenly spaced on the scale ``_to`` maps it to (``_back`` inverts it).

    ``num``: the grid points a grid search takes of it (a config's ``{low, high, num}``); None: the search's own
    count (``points``)."""

    low: float
    high: float
    num: int | None = None

    @staticmethod
    def _to(value: float) -> float:
        return value

    @staticmethod
    def _back(value: float) -> float:
        return value

    def grid(self, n: int) -> list[float]:
        """n points evenly spaced on the range's scale, both ends included (n = 1: the middle of that scale)."""
        _check_n(n)
        a, b = self._to(self.low), self._to(self.high)
        if n == 1:
            return [_round(self._back((a + b) / 2))]
        points = [_round(self._back(a + (b - a) * i / (n - 1))) for i in range(n)]
        points[0], points[-1] = float(self.low), float(self.high)  # the ends exactly, not back(to(x))
        return points

    def points(self, n: int | None = None) -> list[float]:
        """The grid a grid search walks: the range's own ``num`` points, else n."""
        count = self.num if self.num is not None else n
        if count is None:
            raise ValueError("a range in a grid search needs 'num' (the number of grid points)")
        return self.grid(count)

    def contains(self, value: Any) -> bool:
        return _real(value) and self.low <= value <= self.high

    def corners(self) -> list[float]:
        return [float(self.low), float(self.high)]

    def _check(self, kind: str) -> None:
        _check_range(kind, self.low, self.high)
        if self.num is not None:
            _check_n(self.num, f"{kind}: num")

    def _grid_text(self) -> str:
        return "" if self.num is None else f", {self.num} grid points"


@dataclass(frozen=True)
class LogUniform(_RealRange):
    """A positive real range searched on a log scale (learning rates, weights spanning decades)."""

    _to = staticmethod(math.log)
    _back = staticmethod(math.exp)

    def __post_init__(self) -> None:
        self._check("LogUniform")
        if not self.low > 0:
            raise ValueError(f"LogUniform: low={self.low!r} must be > 0 (a log scale)")

    def describe(self) -> str:
        return f"log-uniform [{self.low:g}, {self.high:g}]{self._grid_text()}"


@dataclass(frozen=True)
class Uniform(_RealRange):
    """A real range searched on a linear scale (thresholds, momenta, mixing weights)."""

    def __post_init__(self) -> None:
        self._check("Uniform")

    def describe(self) -> str:
        return f"uniform [{self.low:g}, {self.high:g}]{self._grid_text()}"


@dataclass(frozen=True)
class IntUniform:
    """An integer range, both ends included (memory and filter sizes, neighbour counts)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _check_range("IntUniform", self.low, self.high, integral=True)

    def grid(self, n: int) -> list[int]:
        """Up to n evenly spaced integers from low to high, both ends included, duplicates dropped."""
        _check_n(n)
        if n == 1:
            return [(self.low + self.high) // 2]
        points = (round(self.low + (self.high - self.low) * i / (n - 1)) for i in range(n))
        return sorted({int(p) for p in points})

    def points(self, n: int) -> list[int]:
        """The grid a grid search walks: ``grid(n)``."""
        return self.grid(n)

    def contains(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and self.low <= value <= self.high

    def corners(self) -> list[int]:
        return [int(self.low), int(self.high)]

    def describe(self) -> str:
        return f"integer [{self.low}, {self.high}]"


@dataclass(frozen=True)
class Choice:
    """A finite set of values, searched as listed (booleans, variants, a hand-picked grid)."""

    values: tuple

    def __post_init__(self) -> None:
        if isinstance(self.values, (str, bytes)) or not isinstance(self.values, (tuple, list)):
            raise ValueError(f"Choice: values={self.values!r} must be a tuple of values")
        if not self.values:
            raise ValueError("Choice: values must not be empty")
        object.__setattr__(self, "values", tuple(self.values))

    def grid(self, n: int | None = None) -> list:
        """All the values, in order (n is ignored: a choice has no finer grid)."""
        return list(self.values)

    def points(self, n: int | None = None) -> list:
        """The grid a grid search walks: every value."""
        return list(self.values)

    def contains(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) or _same_number(value, v) for v in self.values)

    def corners(self) -> list:
        return [self.values[0], self.values[-1]] if len(self.values) > 1 else [self.values[0]]

    def describe(self) -> str:
        return f"choice {{{', '.join(map(repr, self.values))}}}"


Dim = LogUniform | Uniform | IntUniform | Choice
DIM_TYPES = (LogUniform, Uniform, IntUniform, Choice)
REAL_RANGES = (LogUniform, Uniform)


def _same_number(a: Any, b: Any) -> bool:
    return _real(a) and _real(b) and not isinstance(a, bool) and not isinstance(b, bool) and a == b


def _round(value: float) -> float:
    """A grid point to 10 significant digits: 1e-4, not 9.999999999999991e-05 (a point is part of a cell's
    identity, so the grid's 1e-4 and a user's 1e-4 must be the same number)."""
    return float(f"{value:.10g}")


def _check_n(n: Any, what: str = "grid: n") -> None:
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{what}={n!r} must be an integer >= 1")
