"""The ``ccc`` sampler's walk: continuously changing corruptions (CCC, Press et al. "RDumb", NeurIPS'23; the
generator of oripress/CCC), as a plan of indices only (docs/long_horizon.md).

CCC walks from one corruption to another: when a transition ends, the next corruption is drawn uniformly
among the others, and the stream moves to it gradually. Here the stream is a mixture of the transition's two
corruptions A -> B whose share of B grows linearly over the ``transition`` images of the transition (position
t of a transition carries B with probability (t + 1/2) / T), each image at its corruption's calibrated severity
(``unitta.evaluate.ccc_calibration``): the source model's error stays near the target all along, as in CCC.
Departure: CCC composes both corruptions on every image along a path of (severity A, severity B) pairs chosen on
a calibrated 21 x 21 accuracy grid per pair; one corruption per image at a per-corruption calibration keeps the
target without that grid (15 x 14 pairs x 441 severities of forward passes).

The class of each position follows the setting's class attribute (``<class corr><class imb>11``: i.i.d.,
non-i.i.d. or imbalanced classes, the exact sampler's chains; UniTTA paper section 3); the image is a random
clean test image of that class (with replacement), drawn from the seed. Only int64 arrays of the stream's
length are built (a 1,000,000-image stream: a few tens of MB, well under a second); the images are generated
batch by batch by ``unitta.data.ccc``. numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unitta.streams.settings import Setting

__all__ = ["CCC_DEFAULTS", "CCC_SAMPLER", "check_ccc", "check_ccc_setting", "corruption_sequence", "ccc_plan"]

CCC_SAMPLER = "ccc"

# CCC's defaults: CCC-Easy's baseline (40 % accuracy of the source model: error 60; oripress/CCC generate.py,
# --baseline 40) and a transition of 5,000 images (CCC's slowest speed is 5,000 images per severity step).
CCC_DEFAULTS: dict[str, float] = {"target_error": 60.0, "transition": 5000}


def check_ccc(ccc: dict[str, Any] | None, length: int | None) -> dict[str, float]:
    """A ccc cell's ``ccc`` settings (``target_error`` in (0, 100), ``transition`` >= 1 images, at most ``length``)
    with CCC_DEFAULTS filled in, or a one-line ValueError (which samplers take ccc: ``unitta.cell.sampler_keys``)."""
    ccc = dict(ccc or {})
    unknown = sorted(set(ccc) - set(CCC_DEFAULTS))
    if unknown:
        raise ValueError(f"ccc: unknown key(s) {unknown}; allowed: {', '.join(CCC_DEFAULTS)}")
    out = {**CCC_DEFAULTS, **ccc}
    target = out["target_error"]
    if not isinstance(target, (int, float)) or isinstance(target, bool) or not 0 < target < 100:
        raise ValueError(f"ccc.target_error={target!r}: expected a percentage strictly between 0 and 100")
    transition = out["transition"]
    if isinstance(transition, bool) or not isinstance(transition, (int, float)) or int(transition) != transition \
            or transition < 1:
        raise ValueError(f"ccc.transition={transition!r}: expected a whole number of images >= 1")
    if length is not None and transition > length:
        raise ValueError(f"ccc.transition={int(transition)} is longer than the stream (length={length}); "
                         "shorten the transition or lengthen the stream")
    return {"target_error": float(target), "transition": int(transition)}


def check_ccc_setting(code: str) -> None:
    """ValueError unless ``code`` ends in '11' (the domain attribute of a ccc stream is CCC's continual walk)."""
    if not (isinstance(code, str) and len(code) == 4 and code.endswith("11")):
        raise ValueError(f"setting={code!r}: the ccc sampler walks its own corruptions; its settings are "
                         "<class corr><class imb>11 (e.g. i111, n111, iu11)")


def corruption_sequence(eligible: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` corruption ids, each drawn uniformly among ``eligible`` but different from the one before."""
    eligible = np.asarray(eligible, dtype=np.int64)
    if len(eligible) < 2:
        raise ValueError(f"ccc: needs at least two corruptions to walk between, got {eligible.tolist()}")
    picks = np.empty(count, dtype=np.int64)
    picks[0] = rng.integers(len(eligible))
    # a step of 1..m-1 modulo m never returns to the same corruption and reaches every other with equal chance
    steps = rng.integers(1, len(eligible), size=count - 1)
    picks[1:] = (picks[0] + np.cumsum(steps)) % len(eligible)
    return eligible[picks]


def ccc_plan(
    clean_labels: np.ndarray,
    setting: str | Setting,
    eligible: np.ndarray,
    length: int,
    transition: int,
    seed: int,
    class_path_fn,
) -> dict[str, np.ndarray]:
    """The walk of a ccc stream: per position the clean image index, the corruption id and the class.

    clean_labels: the labels of the clean images the walk draws from. eligible: the corruption ids whose
    calibrated severity reaches the target error. class_path_fn(corr, n, length, rng) -> the class path (the
    exact sampler's chain for the setting's class attribute). Returns {'clean', 'corruption', 'classes',
    'sequence'} (sequence: the corruption at the start of each transition, one more than transitions).
    """
    check_ccc_setting(Setting.parse(setting).code)
    clean_labels = np.asarray(clean_labels, dtype=np.int64)
    seq_walk, seq_class, seq_image = np.random.SeedSequence(seed).spawn(3)
    rng = np.random.default_rng(seq_walk)
    n_transitions = -(-length // transition)
    sequence = corruption_sequence(eligible, n_transitions + 1, rng)
    position = np.arange(length, dtype=np.int64)
    which = position // transition
    share_b = ((position % transition) + 0.5) / transition
    corruption = np.where(rng.random(length) < share_b, sequence[which + 1], sequence[which])
    classes = class_path_fn(np.random.default_rng(seq_class))
    order = np.argsort(clean_labels, kind="stable")
    sizes = np.bincount(clean_labels, minlength=int(classes.max()) + 1)
    if np.any(sizes[np.unique(classes)] == 0):
        raise ValueError("ccc: the walk visits a class with no clean image")
    starts = np.concatenate(([0], np.cumsum(sizes)))
    pick = np.random.default_rng(seq_image).random(length)
    clean = order[starts[classes] + (pick * sizes[classes]).astype(np.int64)]
    return {"clean": clean, "corruption": corruption, "classes": classes, "sequence": sequence}
