"""Method profiles: which variant of each method a cell runs (``Cell.profile``, the sweep's ``profile:``).

``default``: every method as its own paper describes it (docs/methods.md lists where that differs
from the reference implementation). ``reference``: the reference implementation's code paths, from
which the UniTTA paper's tables come; use it to compare with the paper (analysis/compare_paper.py).
One table, ``REFERENCE``, maps method -> hyper-parameter values (per dataset family when they differ);
it is applied after the dataset preset and before the user's overrides.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROFILES", "REFERENCE", "profile_values"]

PROFILES = ("default", "reference")

# method -> {field: value} for every dataset family, or {"cifar10"|"cifar100"|"imagenet": {field: value}}.
REFERENCE: dict[str, dict[str, Any]] = {}

_FAMILIES = ("cifar10", "cifar100", "imagenet")


def profile_values(method: str, family: str, profile: str) -> dict[str, Any]:
    """The hyper-parameter values ``profile`` sets for ``method`` on a dataset ``family``."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}: expected one of {', '.join(PROFILES)}")
    if profile == "default":
        return {}
    entry = REFERENCE.get(method, {})
    if any(key in _FAMILIES for key in entry):
        return dict(entry.get(family, {}))
    return dict(entry)
