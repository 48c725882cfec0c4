"""Range checks for method Configs: one-line errors naming the field, the value and the allowed range.

Every method's ``Config.__post_init__`` calls these, so a bad hyper-parameter is refused where the
config is built (``build_config``, which the sweep's config check runs), not later inside ``setup()``.
Written as "accept if the condition holds", so NaN is refused everywhere.
"""

from __future__ import annotations

__all__ = ["check_interval", "check_at_least", "check_positive", "check_probability", "check_optional_size"]


def check_interval(field: str, value: float, low: float, high: float, *, open_low: bool = False) -> None:
    """``value`` in [low, high] (or (low, high] with ``open_low``), else ValueError."""
    ok = (low < value) if open_low else (low <= value)
    if not (ok and value <= high):
        bracket = "(" if open_low else "["
        raise ValueError(f"{field}={value!r} must be in {bracket}{low:g}, {high:g}]")


def check_probability(field: str, value: float) -> None:
    """``value`` in [0, 1] (momenta, rates, mixing weights)."""
    check_interval(field, value, 0.0, 1.0)


def check_positive(field: str, value: float) -> None:
    """``value`` > 0 (learning rates, temperatures, thresholds)."""
    if not value > 0:
        raise ValueError(f"{field}={value!r} must be > 0")


def check_at_least(field: str, value: float, minimum: float, why: str = "") -> None:
    """``value`` >= ``minimum``; ``why`` (optional) says what the bound means."""
    if not value >= minimum:
        suffix = f" ({why})" if why else ""
        raise ValueError(f"{field}={value!r} must be >= {minimum:g}{suffix}")


def check_optional_size(field: str, value: int | None, minimum: int = 2) -> None:
    """``value`` is None (the input's own size) or an int >= ``minimum``."""
    if value is not None and not value >= minimum:
        raise ValueError(f"{field}={value!r} must be None (the input's size) or >= {minimum}")
