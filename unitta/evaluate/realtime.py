"""When a method may adapt: the online protocol (every batch) or the real-time one (Alfarra et al., "Evaluation
of Test-Time Adaptation Under Computational Time Constraints", ICML'24; docs/results.md, "Real time").

In real time the stream delivers one batch per unit of time, the time of one forward pass of the source model
on one batch. A method whose adaptation of a batch costs k units is busy for the next k - 1 batches, which it
scores with ``TTAMethod.predict`` (no adaptation, no state change). k comes from a cost model:
- 'passes' (default, deterministic): k = max(1, ceil(forwards + 2 x backwards)) of that batch (``MethodCost``);
- 'measured': k = max(1, ceil(seconds of the method on that batch / seconds of the source model on one batch)),
  on the machine that runs the cell.
A method that never adapts (``TTAMethod.adapts`` False: TEST) *is* the source model's forward, k = 1 under either
model: a measured ratio above 1 would be timing noise, rounded up to a whole unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from unitta.cell.choices import COST_MODELS, PROTOCOLS

__all__ = ["Schedule"]


@dataclass
class Schedule:
    """The batches a method adapts on. ``adapts()`` before a batch; ``adapted(...)`` or ``skipped()`` after it."""

    protocol: str = "online"
    cost: str = "passes"
    source_seconds: float | None = None  # one source forward on one batch ('measured' only)
    never_adapts: bool = False  # the method is the source model (TEST): k = 1
    busy: int = 0
    ks: list[int] = field(default_factory=list)
    batches: int = 0

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol={self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if self.cost not in COST_MODELS:
            raise ValueError(f"cost={self.cost!r}: expected one of {', '.join(COST_MODELS)}")
        if self.protocol == "realtime" and self.cost == "measured" and not self.source_seconds:
            raise ValueError("cost='measured' needs the source model's seconds per batch (source_seconds > 0)")

    def adapts(self) -> bool:
        return self.protocol == "online" or self.busy == 0

    @property
    def timed(self) -> bool:
        """Whether k comes from each adapted batch's seconds (and so the batch must be timed)."""
        return self.protocol == "realtime" and self.cost == "measured" and not self.never_adapts

    def units(self, forwards: int, backwards: int, seconds: float) -> int:
        """k for one adapted batch under the cost model."""
        if self.never_adapts:
            return 1
        if self.cost == "measured":
            assert self.source_seconds, "cost='measured' without source_seconds (refused by __post_init__)"
            return max(1, math.ceil(seconds / self.source_seconds - 1e-9))
        return max(1, math.ceil(forwards + 2 * backwards))

    def adapted(self, forwards: int, backwards: int, seconds: float) -> None:
        self.batches += 1
        if self.protocol == "realtime":
            k = self.units(forwards, backwards, seconds)
            self.ks.append(k)
            self.busy = k - 1

    def skipped(self) -> None:
        self.batches += 1
        self.busy -= 1

    def columns(self) -> dict[str, object]:
        """The row's protocol columns: protocol, realtime_cost, realtime_k (mean k over adapted batches),
        adapted_fraction (batches adapted / batches)."""
        if self.protocol == "online":
            return {"protocol": "online", "realtime_cost": None, "realtime_k": None, "adapted_fraction": 1.0}
        return {
            "protocol": "realtime",
            "realtime_cost": self.cost,
            "realtime_k": sum(self.ks) / len(self.ks) if self.ks else None,
            "adapted_fraction": len(self.ks) / self.batches if self.batches else None,
        }
