"""The stream orders of the other TTA benchmark (Döbler et al.'s test-time-adaptation repository) as samplers.

That benchmark evaluates six protocols (docs/streams.md, "The other benchmark's protocols"):
continual and mixed domains are ULMM settings already (``i111`` and ``i1i1``); the two correlated ones and the
two gradual ones are orders of the images that no ULMM produces, so they are samplers here:

* ``sorted`` ("Correlated"): the domains one after another in the continual (corruption) order, the images
  of each domain sorted by class label (classes ascending; within a class, a random order);
* ``dirichlet`` ("Mixed domains, correlated"): every image of every domain shuffled together, then ordered
  by a Dirichlet label shift with concentration ``delta`` (the label-shift ordering of NOTE, Gong et al.
  NeurIPS'22, that the other benchmark uses): the stream is cut into K chunks (K = number of classes); each
  class spreads over the chunks in proportions drawn from Dir(delta, ..., delta), chunks that already hold
  their share N/K take no more; each chunk then plays its classes as contiguous blocks in a random order.
  Small delta puts (almost) every class in one chunk: long single-class runs; large delta spreads every
  class evenly over the chunks, so each chunk's class mix approaches the uniform one, but inside a chunk
  the classes still come in K blocks of about N/K^2 images (the reference's behaviour, kept);
* ``gradual`` / ``gradual_correlated`` ("gradual", "gradual_correlated"): the corruptions one after another, each
  played at severities 1, 2, 3, 4, 5, 4, 3, 2, 1 in turn, every step all the images of that (corruption,
  severity) in a random order (``gradual``) or sorted by class like ``sorted`` (``gradual_correlated``). Their
  dataset holds every severity of every corruption: domain id = corruption * 5 + severity - 1, the layout of
  ``unitta.data.load_dataset(severity=[1, 2, 3, 4, 5])``.

Each order but the gradual ones uses every image exactly once; a gradual order uses every image of severity 5
once and every other image twice (once on the way up, once on the way down). Randomness: one
``numpy.random.Generator`` seeded with the stream's seed (the reference draws from numpy's and Python's global
RNGs; orders are equal in distribution, not image for image). numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from unitta.data.records import NUM_SEVERITIES

__all__ = [
    "PROTOCOL_SAMPLERS",
    "PROTOCOL_SETTINGS",
    "GRADUAL_SAMPLERS",
    "GRADUAL_STEPS",
    "DEFAULT_DELTA",
    "DELTA_RANGE",
    "check_delta",
    "sorted_order",
    "dirichlet_order",
    "gradual_order",
    "domain_severity",
]

#: sampler -> the setting code it stands for: sorted = classes continual within domains continual (1,1)x(1,1);
#: dirichlet = classes non-i.i.d. and balanced over the whole stream, domains i.i.d. (n,1)x(i,1); gradual =
#: classes i.i.d. within each step, corruptions (and severities) continual; gradual_correlated = sorted's code.
PROTOCOL_SETTINGS: dict[str, str] = {"sorted": "1111", "dirichlet": "n1i1", "gradual": "i111",
                                     "gradual_correlated": "1111"}
PROTOCOL_SAMPLERS: tuple[str, ...] = tuple(PROTOCOL_SETTINGS)
GRADUAL_SAMPLERS: tuple[str, ...] = ("gradual", "gradual_correlated")

#: The gradual protocols' steps over the severities 1..NUM_SEVERITIES of every corruption, the first one included
#: (the other benchmark's classification/test_time.py @8b2ed63: ``severities = [1, 2, 3, 4, 5, 4, 3, 2, 1]``).
GRADUAL_STEPS: tuple[int, ...] = (1, 2, 3, 4, 5, 4, 3, 2, 1)

#: The delta of the other benchmark's "mixed domains, correlated" ImageNet-C runs (its
#: cfgs/imagenet_c/mixed_domains_correlated: TEST.DELTA_DIRICHLET 0.01; ImageNet-D109 uses 0.1).
DEFAULT_DELTA = 0.01
#: Accepted delta: below 1e-4 numpy's Dirichlet draws underflow to exact zeros; above 1e4 every chunk's
#: class mix is uniform to within rounding, so larger values change nothing.
DELTA_RANGE = (1e-4, 1e4)

# The reference's minimum chunk size (NOTE's min_size_thresh) and how many draws to try before giving up
# (the reference gives up after 120 seconds).
_MIN_CHUNK = 10
_MAX_TRIES = 1000


def check_delta(delta: float) -> float:
    """``delta`` as a float in DELTA_RANGE, or a one-line ValueError naming the range."""
    lo, hi = DELTA_RANGE
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"delta={delta!r}: expected a number in [{lo:g}, {hi:g}]") from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(
            f"delta={delta!r}: the Dirichlet concentration must be in [{lo:g}, {hi:g}] (small = strongly "
            "class-correlated, large = each chunk class-balanced); for fully sorted domains use sampler 'sorted'"
        )
    return value


def sorted_order(labels: np.ndarray, domains: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Dataset indices: domains in id order, each domain's images by ascending class, random within a class."""
    perm = rng.permutation(len(labels))
    return perm[np.lexsort((labels[perm], domains[perm]))]  # lexsort is stable: perm order within (domain, class)


def dirichlet_order(labels: np.ndarray, delta: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(dataset indices, chunk sizes): all images mixed, ordered by a Dirichlet label shift (module docstring).

    Chunks must hold at least 10 images each (the reference's threshold; fewer when the dataset has fewer
    than 10 images per chunk); draws are repeated until they do, and a ValueError names delta after 1,000.
    """
    delta = check_delta(delta)
    n = len(labels)
    num_classes = int(labels.max()) + 1
    min_chunk = min(_MIN_CHUNK, n // num_classes)
    members = [np.flatnonzero(labels == k) for k in range(num_classes)]
    for _ in range(_MAX_TRIES):
        parts, sizes = _split_classes(members, n, delta, rng)
        if sizes.min() >= min_chunk:
            break
    else:
        raise ValueError(
            f"delta={delta:g}: no Dirichlet ordering gave every one of the {num_classes} chunks at least "
            f"{min_chunk} images in {_MAX_TRIES} draws; try a larger delta"
        )
    order = []
    for chunk in parts:
        for k in rng.permutation(num_classes):
            order.append(chunk[k])
    return np.concatenate(order).astype(np.int64), sizes


def _split_classes(members: list[np.ndarray], n: int, delta: float, rng: np.random.Generator):
    """One draw: parts[j][k] = the images of class k in chunk j (shuffled); sizes[j] = chunk j's size."""
    num_chunks = len(members)
    share = n / num_chunks
    sizes = np.zeros(num_chunks, dtype=np.int64)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_chunks)]
    for idx in members:
        idx = rng.permutation(idx)
        open_chunks = sizes < share
        p = _proportions(delta, open_chunks, rng)
        cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
        for j, piece in enumerate(np.split(idx, cuts)):
            parts[j].append(piece)
            sizes[j] += len(piece)
    return parts, sizes


def _proportions(delta: float, open_chunks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Dir(delta) proportions over the chunks, zero on full ones, renormalised.

    When every open chunk's draw is exactly 0 (all mass on full chunks, possible for small delta) the
    draw is repeated; the reference divides by zero there.
    """
    while True:
        p = rng.dirichlet(np.full(len(open_chunks), delta)) * open_chunks
        total = p.sum()
        if total > 0:
            return p / total


def domain_severity(domains: np.ndarray) -> np.ndarray:
    """The severity (1..5) of each domain id of a dataset laid out as the gradual orders expect (module docstring)."""
    return np.asarray(domains) % NUM_SEVERITIES + 1


def gradual_order(labels: np.ndarray, domains: np.ndarray, correlated: bool, rng: np.random.Generator) -> np.ndarray:
    """Dataset indices of the gradual protocols (module docstring): for every corruption in id order, the steps
    ``GRADUAL_STEPS``, each step the images of (corruption, severity) in a random order, or with ``correlated`` by
    ascending class (a random order within a class: ``sorted_order``'s order of one domain). A fresh random order
    per step (the reference re-seeds before every step, so its steps repeat one order: equal in distribution).

    domains: ids corruption * 5 + severity - 1; their count must be a multiple of 5 (a ValueError otherwise).
    """
    num_domains = int(np.max(domains)) + 1
    if num_domains % NUM_SEVERITIES:
        raise ValueError(
            f"domains: {num_domains} domain ids; the gradual orders need every corruption at severities 1..5 "
            f"(domain id = corruption * 5 + severity - 1, as load_dataset(severity=[1, 2, 3, 4, 5]) gives)"
        )
    members = np.argsort(domains, kind="stable")
    starts = np.concatenate(([0], np.cumsum(np.bincount(domains, minlength=num_domains))))
    steps = []
    for corruption in range(num_domains // NUM_SEVERITIES):
        for severity in GRADUAL_STEPS:
            d = corruption * NUM_SEVERITIES + severity - 1
            idx = members[starts[d]:starts[d + 1]]
            if correlated:
                steps.append(idx[sorted_order(labels[idx], np.zeros(len(idx), dtype=np.int64), rng)])
            else:
                steps.append(rng.permutation(idx))
    return np.concatenate(steps).astype(np.int64)
