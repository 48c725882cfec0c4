"""Search spaces as data: the ranges a method's hyper-parameters are searched over (``unitta select``).

A method declares its space beside its ``Config`` and ``presets``, one dimension per Config field worth
searching, each range cited (its paper or official config)::

    space: ClassVar[dict[str, Dim]] = {
        "lr": LogUniform(1e-5, 1e-2),   # around UT configs/adapter/cifar10/tent.yaml OPTIM.LR 1e-3 ...
    }

Four kinds of dimension: ``LogUniform`` (learning rates, scales over decades), ``Uniform`` (thresholds,
momenta, mixing weights), ``IntUniform`` (sizes, inclusive) and ``Choice`` (a finite set). Each can list
a grid of n points (``grid``), its two extreme points (``corners``), say whether a value lies in it
(``contains``) and describe itself in one line. Every point of a declared space passes the Config's own
range checks (tests/methods/test_space.py). The conversion to Ray Tune domains lives in the tune layer;
this module imports neither Ray nor torch. docs/methods.md, "Search spaces".
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from dataclasses import dataclass
from typing import Any

from unitta.methods.parts.registry import build_config, method_class

__all__ = [
    "LogUniform", "Uniform", "IntUniform", "Choice", "Dim", "method_space", "check_space", "space_rows",
    "ADAM_LR", "BN_EMA", "BN_GAMMA", "CONFIDENCE_MARGIN",
]


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
    """A real range [low, high] whose grid is evenly spaced on the scale ``_to`` maps it to (``_back`` inverts it)."""

    low: float
    high: float

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

    def contains(self, value: Any) -> bool:
        return _real(value) and self.low <= value <= self.high

    def corners(self) -> list[float]:
        return [float(self.low), float(self.high)]


@dataclass(frozen=True)
class LogUniform(_RealRange):
    """A positive real range searched on a log scale (learning rates, weights spanning decades)."""

    _to = staticmethod(math.log)
    _back = staticmethod(math.exp)

    def __post_init__(self) -> None:
        _check_range("LogUniform", self.low, self.high)
        if not self.low > 0:
            raise ValueError(f"LogUniform: low={self.low!r} must be > 0 (a log scale)")

    def describe(self) -> str:
        return f"log-uniform [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class Uniform(_RealRange):
    """A real range searched on a linear scale (thresholds, momenta, mixing weights)."""

    def __post_init__(self) -> None:
        _check_range("Uniform", self.low, self.high)

    def describe(self) -> str:
        return f"uniform [{self.low:g}, {self.high:g}]"


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

    def contains(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) or _same_number(value, v) for v in self.values)

    def corners(self) -> list:
        return [self.values[0], self.values[-1]] if len(self.values) > 1 else [self.values[0]]

    def describe(self) -> str:
        return f"choice {{{', '.join(map(repr, self.values))}}}"


Dim = LogUniform | Uniform | IntUniform | Choice
DIM_TYPES = (LogUniform, Uniform, IntUniform, Choice)


def _same_number(a: Any, b: Any) -> bool:
    return _real(a) and _real(b) and not isinstance(a, bool) and not isinstance(b, bool) and a == b


def _round(value: float) -> float:
    """A grid point to 10 significant digits: 1e-4, not 9.999999999999991e-05 (a point is part of a cell's
    identity, so the grid's 1e-4 and a user's 1e-4 must be the same number)."""
    return float(f"{value:.10g}")


def _check_n(n: Any) -> None:
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise ValueError(f"grid: n={n!r} must be an integer >= 1")


# ---------------------------------------------------------------------- ranges several methods share
# (each method's space cites its own published value beside the shared range it uses)

# Two decades around 1e-3, the CIFAR learning rate (Adam) of TENT, EATA, SAR, RoTTA, ROID, CoTTA, RMT, ... in their
# reference configs (UT configs/adapter/cifar10/*.yaml, md cfgs/cifar10_c/*.yaml); contains their ImageNet (SGD)
# rates, 2.5e-4 to 1e-2, too. The grid(3) of this range is the example grid [1e-4, 1e-3, 1e-2].
ADAM_LR = LogUniform(1e-4, 1e-2)
# The Balanced / Robust BN statistics EMA rate: TRIBE's configs use 0.01 (CIFAR-10), 0.05 (CIFAR-100), 0.5
# (ImageNet) (UT configs/adapter/*/tribe.yaml ETA); a decade below the smallest and up to the largest.
BN_EMA = LogUniform(1e-3, 0.5)
# Balanced BN's mix of class-balanced and global statistics: 0 (CIFAR-10), 0.1 (CIFAR-100), 0.5 (ImageNet) in the
# same files (GAMMA).
BN_GAMMA = Uniform(0.0, 0.5)
# E_0 = e_factor * ln K, the entropy margin of EATA, ETA, SAR and DeYO: 0.4 in all their papers and configs
# (EATA sec. 5, SAR eq. 2); 0.2 of ln K either side.
CONFIDENCE_MARGIN = Uniform(0.2, 0.6)


# ---------------------------------------------------------------------- per method
def method_space(name: str) -> dict[str, Dim]:
    """The declared search space of registered method ``name`` (Config field -> dimension); empty for a
    method with nothing worth searching (``test``). Unknown names: the registry's did-you-mean error."""
    return dict(getattr(method_class(name), "space", None) or {})


def check_space(name: str, space: dict[str, Any]) -> None:
    """Check a user-given space for method ``name``: each key a Config field, each value a non-empty list or
    a dimension (``Dim``) whose points all pass the Config's own checks. One-line ValueError otherwise.

    A list is checked value by value; a dimension by its corners and a 5-point grid (the Config's checks are
    intervals, so the ends decide).
    """
    cls = method_class(name)
    if not isinstance(space, dict) or not space:
        raise ValueError(f"method {name!r}: the search space is empty; give at least one hyper-parameter")
    fields = [f.name for f in dataclasses.fields(cls.Config)]
    for key, values in space.items():
        if key not in fields:
            hint = difflib.get_close_matches(str(key), fields, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(
                f"method {name!r} has no hyper-parameter {key!r}{did_you_mean}; allowed: {', '.join(fields) or 'none'}"
            )
        points = _points(name, key, values)
        for value in points:
            try:
                build_config(cls, **{key: value})
            except (ValueError, TypeError) as exc:
                raise ValueError(f"search space of {name}.{key}: {exc}") from None


def _points(name: str, key: str, values: Any) -> list:
    """The values of one dimension that ``check_space`` builds Configs with."""
    if isinstance(values, DIM_TYPES):
        return list(dict.fromkeys([*values.corners(), *values.grid(5)]))
    if isinstance(values, (list, tuple)):
        if not values:
            raise ValueError(f"search space of {name}.{key} is an empty list; give at least one value")
        return list(values)
    raise ValueError(
        f"search space of {name}.{key}: {values!r} is neither a list of values nor a dimension "
        "(LogUniform, Uniform, IntUniform, Choice)"
    )


def space_rows(name: str) -> list[tuple[str, str, str, str]]:
    """(hyper-parameter, kind, range, default) per dimension of ``name``'s declared space, for printing.
    The default is the method's CIFAR-10 default (the class Config's), and per dataset family where a preset
    changes it."""
    cls = method_class(name)
    base = build_config(cls)
    rows = []
    for key, dim in method_space(name).items():
        kind, _, rng = dim.describe().partition(" ")
        default = repr(getattr(base, key))
        per_family = {
            family: preset[key] for family, preset in sorted(cls.presets.items()) if key in preset
        }
        if per_family:
            default += " (" + ", ".join(f"{family}: {value!r}" for family, value in per_family.items()) + ")"
        rows.append((key, kind, rng, default))
    return rows
