"""The allowed values of a cell's protocol fields, shared by ``Cell`` (its checks) and ``unitta.evaluate`` (what runs
them): the TTA protocols and real-time cost models (``unitta.evaluate.realtime``), the reset protocols
(``unitta.evaluate.horizon``) and the label-free selection criteria (``unitta.evaluate.criteria``)."""

from __future__ import annotations

__all__ = ["COST_MODELS", "CRITERIA", "PROTOCOLS", "RESETS"]

# online: every batch adapts; realtime: Alfarra et al. ICML'24 (docs/results.md, "Real time")
PROTOCOLS: tuple[str, ...] = ("online", "realtime")
# a real-time method's cost per batch: its forward and backward passes, or its measured seconds
COST_MODELS: tuple[str, ...] = ("passes", "measured")
# when a method goes back to its initial state (docs/long_horizon.md)
RESETS: tuple[str, ...] = ("none", "each_shift", "each_batch")
# the label-free criteria a cell can record (docs/selection.md, "Unsupervised")
CRITERIA: tuple[str, ...] = ("entropy", "infomax", "source_agreement", "consistency")
