"""A method's declared search space: the ranges its hyper-parameters are searched over (``unitta select``).

A method declares its space beside its ``Config`` and ``presets``, one dimension per Config field worth
searching, each range cited (its paper or official config)::

    space: ClassVar[dict[str, Dim]] = {
        "lr": LogUniform(1e-5, 1e-2),   # around UT configs/adapter/cifar10/tent.yaml OPTIM.LR 1e-3 ...
    }

The dimensions are the one vocabulary of ``unitta.search_dimensions`` (``LogUniform``, ``Uniform``, ``IntUniform``,
``Choice``). Here: the ranges several methods share, a method's space (``method_space``), the check of a space
against a method's Config (``check_space``: every point of a declared space passes the Config's own range checks,
tests/methods/test_space.py) and its rows for printing. Neither Ray nor torch. docs/methods.md, "Search spaces".
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from unitta.methods.parts.registry import build_config, method_class
from unitta.search_dimensions import DIM_TYPES, Dim, LogUniform, Uniform

__all__ = ["method_space", "check_space", "space_rows", "ADAM_LR", "BN_EMA", "BN_GAMMA", "CONFIDENCE_MARGIN"]


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
