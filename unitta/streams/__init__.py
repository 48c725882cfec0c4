"""The UniTTA benchmark: ULMM-driven test streams over (domain, class) states (paper section 3, docs/streams.md).

numpy only (no torch), so the streams can be built and inspected anywhere::

    from unitta.streams import make_stream
    stream = make_stream(labels, domains, "nui1", dataset="cifar10", sampler="official", seed=425)
    stream.indices, stream.domains, stream.classes, stream.summary()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unitta.data.records import dataset_record
from unitta.streams import exact as _exact
from unitta.streams import official as _official
from unitta.streams import protocols as _protocols
from unitta.streams.ccc import CCC_SAMPLER, ccc_plan, check_ccc_setting
from unitta.streams.estimate import Factors, estimate_factors
from unitta.streams.protocols import DEFAULT_DELTA, GRADUAL_SAMPLERS, PROTOCOL_SAMPLERS, PROTOCOL_SETTINGS
from unitta.streams.settings import (
    FACTOR_KEYS,
    SETTING_CODES_24,
    SETTING_CODES_36,
    SETTINGS_24,
    SETTINGS_36,
    Setting,
    default_factors,
    default_state_cap,
)
from unitta.streams.stream import Stream, check_labels_domains, draw_from_pools

__all__ = [
    "SETTINGS_24",
    "SETTINGS_36",
    "SETTING_CODES_24",
    "SETTING_CODES_36",
    "FACTOR_KEYS",
    "Factors",
    "estimate_factors",
    "SAMPLERS",
    "ULMM_SAMPLERS",
    "PROTOCOL_SAMPLERS",
    "PROTOCOL_SETTINGS",
    "GRADUAL_SAMPLERS",
    "DEFAULT_DELTA",
    "Setting",
    "Stream",
    "default_factors",
    "default_state_cap",
    "make_stream",
    "make_ccc_stream",
    "CCC_SAMPLER",
    "synthetic_labels",
]

ULMM_SAMPLERS = ("official", "exact")
SAMPLERS = ULMM_SAMPLERS + PROTOCOL_SAMPLERS + (CCC_SAMPLER,)
DEFAULT_SEED = 425  # the reference's cfg.SEED


def make_stream(
    labels: np.ndarray,
    domains: np.ndarray,
    setting: str | Setting,
    *,
    dataset: str = "cifar10",
    sampler: str = "official",
    seed: int = DEFAULT_SEED,
    domain_alpha: float | None = None,
    domain_beta: float | None = None,
    class_alpha: float | None = None,
    class_beta: float | None = None,
    S: int | None = None,
    length: int | None = None,
    domain_matrix: np.ndarray | None = None,
    class_matrix: np.ndarray | None = None,
    delta: float | None = None,
) -> Stream:
    """Sample a benchmark stream over a dataset's images.

    Args:
        labels, domains: int arrays over the dataset's images in dataset order (domain-major); domain ids
            index the reference corruption order. D and K are max + 1 of each.
        setting: a 4-character code such as 'nui1' or a Setting.
        dataset: picks the default factors and S (docs/streams.md): cifar10[-c], cifar100[-c], imagenet[-c],
            fmnist-c (CIFAR-10's values).
        sampler: 'official' (bit-identical to the reference), 'exact' (fixed length, no drift), or one of
            the other benchmark's orders (docs/streams.md), which take no factors, S or length: 'sorted' (setting
            '1111') and 'dirichlet' (setting 'n1i1') use every image once; 'gradual' ('i111') and
            'gradual_correlated' ('1111') play every corruption at severities 1..5..1, over a dataset whose
            domain ids are corruption * 5 + severity - 1 (``unitta.streams.protocols``).
        seed: 425 is the reference's seed.
        domain_alpha, domain_beta, class_alpha, class_beta: override the default factors.
        S: official only, the per-state cap / quota scale (default per dataset and setting).
        length: exact only, the stream length (default: the number of images).
        domain_matrix, class_matrix: exact only, custom row-stochastic transition matrices replacing the
            ULMMs (class_matrix may be (D, K, K): class transitions depending on the current domain).
        delta: dirichlet only, the Dirichlet concentration (default DEFAULT_DELTA = 0.01).
    """
    s = Setting.parse(setting)
    seed = _checked_seed(sampler, seed, delta)
    labels, domains, num_domains, num_classes = check_labels_domains(labels, domains)
    overrides = dict(zip(FACTOR_KEYS, (domain_alpha, domain_beta, class_alpha, class_beta)))
    if sampler in PROTOCOL_SAMPLERS:
        given = dict(overrides, S=S, length=length, domain_matrix=domain_matrix, class_matrix=class_matrix)
        _refuse_given(given, f"{{key}}: the {sampler!r} sampler orders every image once and takes no {{key}}")
        return _protocol_stream(labels, domains, s, sampler, seed, str(dataset), delta, num_domains, num_classes)
    factors = default_factors(s, dataset)
    pool_sizes, sort_keys, starts = _state_pools(labels, domains, num_domains, num_classes)
    meta: dict[str, Any] = {}
    if sampler == "official":
        given = {"length": length, "domain_matrix": domain_matrix, "class_matrix": class_matrix}
        _refuse_given(given, "{key}: only the 'exact' sampler accepts it (the official stream length is random)")
        factors.update({k: float(v) for k, v in overrides.items() if v is not None})
        states, pools, used_S = _official_states(
            s, dataset, factors, S, num_domains, num_classes, pool_sizes, sort_keys, starts, seed, meta
        )
    else:
        if S is not None:
            raise ValueError(f"S={S!r}: only the 'official' sampler has a per-state cap; use length= for 'exact'")
        factors = _exact_factors(s, factors, overrides, num_domains, num_classes)
        states, pools = _exact_states(
            s, factors, len(labels) if length is None else length, num_domains, num_classes, pool_sizes, sort_keys,
            seed, domain_matrix, class_matrix, meta,
        )
        used_S = None
    indices, n_reused = draw_from_pools(states, pools, starts)
    return Stream(indices=indices, domains=states // num_classes, classes=states % num_classes,
                  num_domains=num_domains, num_classes=num_classes, setting=s, factors=factors, sampler=sampler,
                  seed=seed, dataset=str(dataset), S=used_S, n_reused=n_reused, meta=meta)


def _checked_seed(sampler: str, seed: int, delta: float | None) -> int:
    """``make_stream``'s checks of its sampler, seed and Dirichlet concentration; the seed as an int."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler={sampler!r}: allowed values are {SAMPLERS}")
    if sampler == CCC_SAMPLER:
        raise ValueError("sampler='ccc': its images are generated, not drawn from labels/domains; use make_ccc_stream")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed={seed!r}: expected an integer >= 0")
    if delta is not None and sampler != "dirichlet":
        raise ValueError(f"delta={delta!r}: only the 'dirichlet' sampler takes a Dirichlet concentration")
    return int(seed)


def _refuse_given(given: dict[str, Any], message: str) -> None:
    """ValueError ``message`` (formatted with ``key``) for the first argument of ``given`` that is not None."""
    for key, value in given.items():
        if value is not None:
            raise ValueError(message.format(key=key))


def _state_pools(labels: np.ndarray, domains: np.ndarray, num_domains: int, num_classes: int):
    """The images grouped by state (domain * K + class): each state's pool size, the sort keys that order the
    images by state, and where each state's pool starts in that order."""
    num_states = num_domains * num_classes
    state_of_image = domains * num_classes + labels
    pool_sizes = np.bincount(state_of_image, minlength=num_states)
    # Stable sorts of 16-bit keys are radix sorts in numpy (ImageNet: 750,000 keys in a few ms).
    sort_keys = state_of_image.astype(np.uint16) if num_states <= 2**16 else state_of_image
    starts = np.concatenate(([0], np.cumsum(pool_sizes)))
    return pool_sizes, sort_keys, starts


def _protocol_stream(labels, domains, s, sampler, seed, dataset, delta, num_domains, num_classes) -> Stream:
    """A stream in one of the other benchmark's correlated orders (unitta.streams.protocols)."""
    expected = PROTOCOL_SETTINGS[sampler]
    if s.code != expected:
        raise ValueError(
            f"setting={s.code!r}: the {sampler!r} sampler is setting {expected!r} "
            f"({Setting.parse(expected).name}); pass setting={expected!r}"
        )
    rng = np.random.default_rng(seed)
    meta: dict[str, Any] = {}
    if sampler == "sorted":
        indices = _protocols.sorted_order(labels, domains, rng)
    elif sampler in GRADUAL_SAMPLERS:
        indices = _protocols.gradual_order(labels, domains, sampler == "gradual_correlated", rng)
        meta["steps"] = list(_protocols.GRADUAL_STEPS)
    else:
        delta = DEFAULT_DELTA if delta is None else _protocols.check_delta(delta)
        indices, chunk_sizes = _protocols.dirichlet_order(labels, delta, rng)
        meta.update(delta=delta, chunk_sizes=chunk_sizes.tolist())
    reused = len(indices) - int(np.count_nonzero(np.bincount(indices)))  # a gradual order plays severity 1..4 twice
    return Stream(
        indices=indices, domains=domains[indices], classes=labels[indices], num_domains=num_domains,
        num_classes=num_classes, setting=s, factors={}, sampler=sampler, seed=seed, dataset=dataset,
        n_reused=reused, meta=meta,
    )


def _official_states(s, dataset, factors, S, num_domains, num_classes, pool_sizes, sort_keys, starts, seed, meta):
    """The reference sampler's state sequence and shuffled pools (docs/streams.md, "official"); (states, pools, S)."""
    cap = default_state_cap(s, dataset) if S is None else S
    plan = _official.make_plan(num_domains, num_classes, factors, cap)
    states = _official.sample_states(
        plan, pool_sizes, seed, domain_alpha=factors["domain_alpha"], class_alpha=factors["class_alpha"]
    )
    order = np.argsort(sort_keys, kind="stable")  # each pool in dataset order (docs/streams.md)
    pools = _official.shuffled_pools(order, starts, seed)
    meta["consistency"] = {"domain": plan.domain_consistent, "class": plan.class_consistent}
    return states, pools, plan.S


def _exact_states(s, factors, length, num_domains, num_classes, pool_sizes, sort_keys, seed,
                  domain_matrix, class_matrix, meta):
    """Two independent chains of fixed length and randomly ordered pools (docs/streams.md, "exact")."""
    if int(length) != length or length < 1:
        raise ValueError(f"length={length!r}: expected an integer >= 1")
    n_len = int(length)
    empty = np.flatnonzero(pool_sizes == 0)
    if empty.size:
        pairs = [(int(x) // num_classes, int(x) % num_classes) for x in empty[:5]]
        raise ValueError(
            f"labels, domains: {empty.size} (domain, class) pool(s) are empty, e.g. {pairs}; "
            "the exact sampler needs at least one image per state"
        )
    seq_domain, seq_class, seq_pool = np.random.SeedSequence(seed).spawn(3)
    rng_d, rng_c = np.random.default_rng(seq_domain), np.random.default_rng(seq_class)
    d_path = _exact.attribute_path(
        s.domain_corr, factors["domain_alpha"], factors["domain_beta"], num_domains, n_len, rng_d,
        name="domain", matrix=domain_matrix,
    )
    if class_matrix is not None and np.ndim(class_matrix) == 3:
        c_path = _exact.conditional_class_path(class_matrix, d_path, num_domains, num_classes, rng_c)
    else:
        c_path = _exact.attribute_path(
            s.class_corr, factors["class_alpha"], factors["class_beta"], num_classes, n_len, rng_c,
            name="class", matrix=class_matrix,
        )
    # Each pool in a random order: a random permutation of all images, stably grouped by state.
    perm = np.random.default_rng(seq_pool).permutation(len(sort_keys))
    pools = perm[np.argsort(sort_keys[perm], kind="stable")]
    if domain_matrix is not None or class_matrix is not None:
        meta["custom_matrices"] = {"domain": domain_matrix is not None, "class": class_matrix is not None}
    return d_path * num_classes + c_path, pools

def _exact_factors(
    s: Setting, defaults: dict[str, float], overrides: dict[str, float | None], num_domains: int, num_classes: int
) -> dict[str, float]:
    """The exact sampler's factors: 'i' is exactly i.i.d. (alpha 1/n), '1' is continual (alpha 1)."""
    factors = dict(defaults)
    for attr, corr, n in (("domain", s.domain_corr, num_domains), ("class", s.class_corr, num_classes)):
        key = f"{attr}_alpha"
        fixed = {"i": 1.0 / n, "1": 1.0}.get(corr)
        if fixed is not None:
            if overrides[key] is not None:
                raise ValueError(
                    f"{key}={overrides[key]!r}: the exact sampler fixes the correlation of a "
                    f"{'i.i.d.' if corr == 'i' else 'continual'} {attr} setting; "
                    f"use a non-i.i.d. ('n') {attr} setting to choose alpha"
                )
            factors[key] = fixed
        elif overrides[key] is not None:
            factors[key] = float(overrides[key])
        if overrides[f"{attr}_beta"] is not None:
            factors[f"{attr}_beta"] = float(overrides[f"{attr}_beta"])
    return factors


def make_ccc_stream(
    clean_labels: np.ndarray,
    setting: str | Setting,
    *,
    eligible: np.ndarray,
    num_domains: int,
    length: int,
    transition: int,
    seed: int = DEFAULT_SEED,
    dataset: str = "cifar10",
    class_alpha: float | None = None,
    class_beta: float | None = None,
) -> Stream:
    """A ccc stream (``unitta.streams.ccc``): positions 0..length-1 as its indices (the images are generated from
    them, ``unitta.data.ccc``), the corruption id of each position as its domain, the class path of the setting's
    class attribute; ``meta['clean']`` holds the clean image of each position, ``meta['sequence']`` the walk."""
    s = Setting.parse(setting)
    check_ccc_setting(s.code)
    if int(length) != length or length < 1:
        raise ValueError(f"length={length!r}: expected an integer >= 1")
    clean_labels = np.asarray(clean_labels, dtype=np.int64)
    num_classes = int(clean_labels.max()) + 1
    overrides = {"domain_alpha": None, "domain_beta": None, "class_alpha": class_alpha, "class_beta": class_beta}
    factors = _exact_factors(s, default_factors(s, dataset), overrides, num_domains, num_classes)

    def class_path(rng: np.random.Generator) -> np.ndarray:
        return _exact.attribute_path(s.class_corr, factors["class_alpha"], factors["class_beta"], num_classes,
                                     int(length), rng, name="class")

    plan = ccc_plan(clean_labels, s, eligible, int(length), int(transition), int(seed), class_path)
    return Stream(
        indices=np.arange(int(length), dtype=np.int64), domains=plan["corruption"], classes=plan["classes"],
        num_domains=num_domains, num_classes=num_classes, setting=s, factors=factors, sampler=CCC_SAMPLER,
        seed=int(seed), dataset=str(dataset),
        meta={"clean": plan["clean"], "sequence": plan["sequence"].tolist(), "transition": int(transition)},
    )


def synthetic_labels(dataset: str, num_domains: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Labels and domain ids with the real pool sizes of a dataset (its record in ``unitta.data.records``),
    no images needed: ``images_per_domain`` per domain, label j mod ``num_classes``, or for a class-major
    record (ImageNet-C) floor(j / images per class) (the reference sampler README's rules); ``num_domains``
    defaults to the record's.
    """
    record = dataset_record(dataset)
    per_domain, num_classes = record.images_per_domain, record.num_classes
    num_domains = record.num_domains if num_domains is None else num_domains
    j = np.arange(per_domain, dtype=np.int64)
    within = j // (per_domain // num_classes) if record.class_major else j % num_classes
    labels = np.tile(within, num_domains)
    domains = np.repeat(np.arange(num_domains, dtype=np.int64), per_domain)
    return labels, domains
