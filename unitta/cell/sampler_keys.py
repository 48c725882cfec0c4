"""Which stream keys each sampler takes, written once (docs/streams.md): ``Cell``, a config's cell keys
(``unitta.cell.spec``) and a sweep's grid (``unitta.sweep.config``) all ask ``check_sampler_keys``.

- the ULMM samplers draw a setting's stream with its factors: ``official`` takes a per-state cap ``S``, ``exact`` a
  stream ``length``;
- ``ccc`` walks its own corruptions over the clean test set: a ``length``, its ``ccc`` settings, a class setting
  and class factors (``Cell`` refuses its domain factors and ``n_per_domain``);
- ``sorted`` and ``dirichlet`` fix their own stream (each image once, under their own setting code): no settings,
  factors, S or length; ``dirichlet`` takes a concentration ``delta``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from unitta.streams import CCC_SAMPLER, PROTOCOL_SAMPLERS, PROTOCOL_SETTINGS, ULMM_SAMPLERS

__all__ = ["TAKEN_BY", "check_sampler_keys"]

# key -> the samplers that take it; a key set for samplers none of which takes it is refused
TAKEN_BY: dict[str, tuple[str, ...]] = {
    "settings": (*ULMM_SAMPLERS, CCC_SAMPLER),
    "factors": (*ULMM_SAMPLERS, CCC_SAMPLER),
    "S": ("official",),
    "length": ("exact", CCC_SAMPLER),
    "delta": ("dirichlet",),
    "ccc": (CCC_SAMPLER,),
}
_SAME_AS = {"factor_grid": "factors", "class_settings": "settings", "domain_settings": "settings"}  # a sweep's keys

_ONLY = {
    "S": "only the official sampler has a per-state cap S; use length with the exact and ccc samplers",
    "length": "only the exact and ccc samplers take a stream length; use S with the official sampler",
    "delta": "only the dirichlet sampler takes a delta; add dirichlet to sampler or drop delta",
    "ccc": "only the ccc sampler takes ccc settings; set sampler: ccc or drop ccc",
}


def check_sampler_keys(samplers: Sequence[str], given: Iterable[str]) -> None:
    """A one-line ValueError ``<key>: ...`` for the first key of ``given`` (the keys that are set) that none of
    ``samplers`` (a cell's one, or the samplers a sweep lists) takes."""
    for key in given:
        takers = TAKEN_BY[_SAME_AS.get(key, key)]
        if any(s in takers for s in samplers):
            continue
        if all(s in PROTOCOL_SAMPLERS for s in samplers) and set(takers) & set(ULMM_SAMPLERS):
            fixed = ", ".join(f"{s} = {PROTOCOL_SETTINGS[s]}" for s in samplers)
            raise ValueError(f"{key}: sampler {', '.join(samplers)} fixes its own stream ({fixed}) and takes no "
                             f"{key}; drop {key} or add official/exact to sampler")
        raise ValueError(f"{key}: {_ONLY[_SAME_AS.get(key, key)]}")
