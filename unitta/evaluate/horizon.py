"""Long horizons: recurring rounds, reset protocols and the batch plan of a stream (docs/long_horizon.md).

* ``rounds: R``: the stream of one round is played R times in the same order (PeTTA's recurring protocol,
  Hoang et al. NeurIPS'24; CoTTA's 10-round experiment, Wang et al. CVPR'22). Batches never straddle a round
  boundary, so every round is the same sequence of batches.
* ``reset``: 'none'; 'each_shift': the method goes back to its initial state at every change of the stream's
  true domain (the other benchmark's ``reset_each_shift``, mariodoebler/test-time-adaptation, where each domain
  is its own loader: batches are cut at domain changes here too); 'each_batch': before every batch (episodic).
* ``curve_points``: how many equal parts ``error_curve`` has.

The allowed resets are ``unitta.cell.choices.RESETS``; the ccc sampler's settings are checked by
``unitta.streams.ccc.check_ccc``. numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ResetCounter", "batch_bounds", "repeat_rounds", "reset_points", "round_errors"]

def batch_bounds(n_round: int, rounds: int, batch_size: int, domains: np.ndarray | None = None) -> np.ndarray:
    """Start positions of the batches of ``rounds`` rounds of an ``n_round``-position stream, plus the end.

    Batches of ``batch_size`` are cut at every round boundary and, when ``domains`` (the round's true domain
    per position) is given, at every domain change, so that no batch mixes two domains ('each_shift').
    """
    cuts = [0, n_round]
    if domains is not None and n_round > 1:
        cuts.extend((np.flatnonzero(domains[1:] != domains[:-1]) + 1).tolist())
    edges = np.unique(np.asarray(cuts, dtype=np.int64))
    lengths = np.diff(edges)
    # each segment [edge, next edge) split into ceil(length / batch_size) batches
    per_segment = -(-lengths // batch_size)
    seg_of_batch = np.repeat(np.arange(len(lengths)), per_segment)
    within = np.arange(len(seg_of_batch)) - np.repeat(np.cumsum(per_segment) - per_segment, per_segment)
    starts = edges[:-1][seg_of_batch] + within * batch_size
    all_starts = (starts[None, :] + n_round * np.arange(rounds, dtype=np.int64)[:, None]).ravel()
    return np.append(all_starts, n_round * rounds)


def reset_points(bounds: np.ndarray, reset: str, domains: np.ndarray | None) -> np.ndarray:
    """Boolean per batch: reset the method before it? 'each_batch': every batch but the first; 'each_shift': the
    batches whose first position's true domain differs from the previous position's (``domains``: whole stream)."""
    starts = bounds[:-1]
    flags = np.zeros(len(starts), dtype=bool)
    if reset == "each_batch":
        flags[1:] = True
    elif reset == "each_shift":
        if domains is None:
            raise ValueError("reset=each_shift needs the stream's true domain of every position")
        later = starts[1:]
        flags[1:] = domains[later] != domains[later - 1]
    return flags


def round_errors(correct: np.ndarray, rounds: int) -> list[float]:
    """Error (%) of each round (the rounds are equal parts of the stream)."""
    return [float(100.0 * (1.0 - part.mean())) for part in np.split(np.asarray(correct), rounds)]


class ResetCounter:
    """Resets a method to its initial state for a reset protocol (``method.reset()``: a fresh deep copy of the
    source model and ``setup()``, exact by the method contract, ``unitta.contract``), keeping its cost
    counters, and counts every reset: the protocol's plus the method's own (``own_resets``, e.g. RDumb's)."""

    def __init__(self) -> None:
        self.protocol = 0
        self._own_before = 0  # the method's own resets before its last protocol reset (reset() clears them)

    def reset(self, method) -> None:
        self._own_before += method.own_resets()
        cost = method.cost
        method.reset()
        method.cost = cost
        self.protocol += 1

    def total(self, method) -> int:
        return self.protocol + self._own_before + method.own_resets()


def repeat_rounds(stream, rounds: int):
    """``stream`` played ``rounds`` times in the same order (indices, domains and classes tiled)."""
    if rounds == 1:
        return stream
    return dataclasses.replace(
        stream, indices=np.tile(stream.indices, rounds), domains=np.tile(stream.domains, rounds),
        classes=np.tile(stream.classes, rounds), n_reused=stream.n_reused + (rounds - 1) * len(stream.indices),
    )
