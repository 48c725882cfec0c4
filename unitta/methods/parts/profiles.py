"""Method profiles: which variant of each method a cell runs (``Cell.profile``, the sweep's ``profile:``).

``default``: every method as its own paper describes it (docs/methods.md lists where that differs
from the reference implementation). ``reference``: the reference implementation's code paths
(UniTTA, LeapLabTHU/UniTTA @ c41bce7, "UT" in the methods' comments), from which the UniTTA paper's tables
come; use it to compare with the paper (analysis/compare_paper.py). Each method states the values a
profile sets in its own class (``TTAMethod.profiles``, beside its Config defaults and ``presets``), per
dataset family when they differ; they apply after the dataset preset and before the user's overrides.
Methods without a ``reference`` entry already run UT's code path by default. docs/methods.md, "Profiles",
lists every documented deviation and how (or why not) the methods' entries cover it.
"""

from __future__ import annotations

from typing import Any

from unitta.profile_names import PROFILES

__all__ = ["UT_AUG_SIZE", "profile_values"]

# UT core/adapter/cotta.py hard-codes img_shape (32, 32, 3) for its augmentation (pad 16, centre crop
# 32) on every dataset, and every UT configs/adapter/<dataset>/rotta.yaml sets INPUT.SIZE (32, 32),
# which only its strong augmentation reads. On 32-pixel datasets this equals the input-sized default.
UT_AUG_SIZE = 32

_FAMILIES = ("cifar10", "cifar100", "imagenet")


def profile_values(method: type, family: str, profile: str) -> dict[str, Any]:
    """The hyper-parameter values ``profile`` sets for the method class ``method`` on a dataset ``family``."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}: expected one of {', '.join(PROFILES)}")
    if profile == "default":
        return {}
    entry = vars(method).get("profiles", {}).get(profile, {})  # the class's own: never inherited
    if any(key in _FAMILIES for key in entry):
        return dict(entry.get(family, {}))
    return dict(entry)
