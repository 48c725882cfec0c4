"""How long a cell's stream may be: at most ``MAX_STREAM_LENGTH`` positions a round and over all its rounds
(docs/long_horizon.md); ``Cell`` checks it, the preflight again with an image folder's counts read from disk."""

from __future__ import annotations

from unitta.data.records import RECORDS
from unitta.streams import CCC_SAMPLER
from unitta.streams.protocols import GRADUAL_SAMPLERS, GRADUAL_STEPS
from unitta.streams.settings import MAX_STREAM_LENGTH

__all__ = ["check_played_size", "check_stream_size", "round_positions"]


def check_stream_size(dataset: str, S: int | None, length: int | None) -> None:
    """One-line ValueError when the stream asked for is longer than ``MAX_STREAM_LENGTH`` positions."""
    record = RECORDS.get(dataset)
    states = record.num_domains * record.num_classes if record else 1
    if S is not None and S * states > MAX_STREAM_LENGTH:
        raise ValueError(f"S={S}: {dataset}'s {states} (domain, class) states make a stream of up to {S * states:,} "
                         f"images, more than {MAX_STREAM_LENGTH:,}; use S <= {MAX_STREAM_LENGTH // states}")
    if length is not None and length > MAX_STREAM_LENGTH:
        raise ValueError(f"length={length}: more than {MAX_STREAM_LENGTH:,} stream positions; use a shorter stream")


def round_positions(dataset: str, sampler: str, setting: str, S: int | None, length: int | None,
                    n_per_domain: int | None, shape: tuple[int, int, int] | None = None) -> int | None:
    """The most positions one round of the cell's stream can have (None: not known before the data is read).

    shape: (domains, classes, images of the smallest domain) read from disk (an image folder; the preflight), which
    makes the count a lower bound of the largest round there."""
    from unitta.streams.settings import default_state_cap

    record = RECORDS.get(dataset)
    if length is not None:
        return length
    if record is None:
        return None
    domains, classes, images = shape or (record.num_domains, record.num_classes, record.images_per_domain)
    if not classes or not images:
        return None  # an image folder: its counts are on disk (the preflight reads them)
    per_domain = n_per_domain or images
    if sampler == "official":
        family = dataset if shape is None else record.preset_family
        cap = S if S is not None else min(default_state_cap(setting, family), max(1, per_domain // classes))
        return cap * domains * classes
    if sampler == CCC_SAMPLER:
        return None
    return per_domain * domains * (len(GRADUAL_STEPS) if sampler in GRADUAL_SAMPLERS else 1)


def check_played_size(dataset: str, sampler: str, setting: str, S: int | None, length: int | None,
                      n_per_domain: int | None, rounds: int, shape: tuple[int, int, int] | None = None) -> None:
    """One-line ValueError when ``rounds`` rounds of the stream exceed ``MAX_STREAM_LENGTH`` positions."""
    if rounds == 1:
        return
    n = round_positions(dataset, sampler, setting, S, length, n_per_domain, shape)
    if n and rounds * n > MAX_STREAM_LENGTH:
        raise ValueError(f"rounds={rounds} x {n:,} positions a round (at most) = {rounds * n:,}, more than "
                         f"{MAX_STREAM_LENGTH:,} stream positions; use rounds <= {max(1, MAX_STREAM_LENGTH // n)}")
