"""Method profiles: which variant of each method a cell runs (``Cell.profile``, the sweep's ``profile:``).

``default``: every method as its own paper describes it (docs/methods.md lists where that differs
from the reference implementation). ``reference``: the reference implementation's code paths
(UniTTA, LeapLabTHU/UniTTA @ c41bce7, "UT" below), from which the UniTTA paper's tables come; use it
to compare with the paper (analysis/compare_paper.py). One table, ``REFERENCE``, maps method ->
hyper-parameter values (per dataset family when they differ); it is applied after the dataset preset
and before the user's overrides. docs/methods.md, "Profiles", lists every documented deviation and
how (or why not) this table covers it.
"""

from __future__ import annotations

from typing import Any

from unitta.profile_names import PROFILES

__all__ = ["PROFILES", "REFERENCE", "profile_values"]


# UT core/adapter/cotta.py hard-codes img_shape (32, 32, 3) for its augmentation (pad 16, centre crop
# 32) on every dataset, and every UT configs/adapter/<dataset>/rotta.yaml sets INPUT.SIZE (32, 32),
# which only its strong augmentation reads. On 32-pixel datasets this equals the input-sized default.
_UT_AUG_SIZE = 32

# method -> {field: value} for every dataset family, or {"cifar10"|"cifar100"|"imagenet": {field: value}}.
# Methods without an entry already run UT's code path by default (docs/methods.md, "Profiles").
REFERENCE: dict[str, dict[str, Any]] = {
    # UT configs/adapter/<dataset>/cotta.yaml + core/adapter/cotta.py: 32-pixel augmentation everywhere;
    # on ImageNet no OPTIM.METHOD/LR override, so Adam at configs/dataset/imagenet's LR 5e-4, and the
    # plain teacher->student CE (the official CoTTA ImageNet code, our preset, uses SGD 0.01 + symmetric).
    "cotta": {
        "cifar10": {"aug_size": _UT_AUG_SIZE},
        "cifar100": {"aug_size": _UT_AUG_SIZE},
        "imagenet": {"optimizer": "adam", "lr": 5e-4, "loss": "ce", "aug_size": _UT_AUG_SIZE},
    },
    # UT configs/adapter/<dataset>/rotta.yaml INPUT.SIZE (32, 32): 32x32 strong views, also on ImageNet.
    "rotta": {"aug_size": _UT_AUG_SIZE},
    # UT configs/adapter/<dataset>/rotta_rbn.yaml: NAME tribe_bbn, GAMMA 1.0, ETA 0.01/0.05/0.5 (the
    # robust_bn presets), i.e. TRIBE's Balanced BN with gamma 1, not RoTTA's Robust BN.
    "robust_bn": {"variant": "reference"},
    # UT configs/adapter/<dataset>/note.yaml: SGD lr 1e-4 (momentum 0.9, Nesterov); core/adapter/note.py
    # updates on the memory once per incoming batch (NOTE's Adam, every 64 samples, is the default).
    "note": {"optimizer": "sgd", "update_every": 0},
    # UT core/adapter/roid.py: the prior correction scales the logits (outputs * smoothed_prior).
    "roid": {"prior_on": "logits"},
    # UT configs/adapter/<dataset>/roid_unmixtns.yaml: the same core/adapter/roid.py with USE_UNMIXTNS.
    "roid_unmixtns": {"prior_on": "logits"},
    # Not in the table, because it changes no prediction: UT's ROID divides its loss by the configured
    # TEST.BATCH_SIZE and UT's UnMix-TNS fixes its momentum from it. Both differ from the actual batch
    # size only on a stream's last, short batch, whose step (or component update) comes after its own
    # prediction, and nothing is predicted after it. A fixed 64 (``loss_batch_size``) would be wrong
    # for cells run at another batch size.
}

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
