"""A warning for streams too short to show what a benchmark is about: continual domain segments of a few batches.

On a continual domain setting (domain correlation '1') the stream runs the domains one after another; with a
small ``S`` or ``n_per_domain`` a domain's segment is a batch or two (``n_per_domain: 200, S: 10`` on a
10-class dataset: 100 images, 1.6 batches of 64), so a method barely adapts before the domain changes: slow
robust statistics (RoTTA) lag behind plain BN, and real-time losses vanish (docs/streams.md, "Stream length").
``short_segment_warnings(cells)`` says so, naming the segment length and the ``S`` / ``n_per_domain`` (or
``length``) that lengthen it to ``MIN_SEGMENT_BATCHES`` batches; the sweep, its ``--dry-run`` and the report
print it. The segment is measured on the cell's own stream, sampled over a stand-in dataset with the cell's pool
sizes (the sampler sees only labels and domains), so it costs milliseconds for the short streams it is about.
Domain settings 'i' and 'n' change domain every few images on purpose (their correlation factor): no warning.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from unitta.cell import Cell
from unitta.data.records import dataset_record
from unitta.evaluate.inputs import build_stream, cell_severities
from unitta.streams.settings import Setting, default_state_cap

__all__ = ["MIN_SEGMENT_BATCHES", "mean_domain_segment", "short_segment_warning", "short_segment_warnings",
           "row_stream_cell"]

MIN_SEGMENT_BATCHES = 3  # "a few batches": below it a domain is over before a method has adapted to it
# A continual stream whose every (domain, class) state holds this many batches' worth of positions is long
# enough whatever its imbalance (beta <= 50 shrinks a state at most 50-fold): not sampled, nothing to say.
_LONG_STATE_FACTOR = 50


@dataclasses.dataclass(frozen=True)
class _StandIn:
    """The labels and domains of a dataset with ``pool`` images per (domain, class) state (domain-major)."""

    num_domains: int
    num_classes: int
    pool: int

    @property
    def labels(self) -> np.ndarray:
        return np.tile(np.repeat(np.arange(self.num_classes, dtype=np.int64), self.pool), self.num_domains)

    @property
    def domains(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_domains, dtype=np.int64), self.num_classes * self.pool)


def _stand_in(cell: Cell) -> _StandIn:
    """The cell's dataset as the sampler sees it: a gradual cell's holds every severity of every corruption."""
    record = dataset_record(cell.dataset)
    per_domain = cell.n_per_domain or record.images_per_domain
    domains = record.num_domains * len(cell_severities(cell))
    return _StandIn(domains, record.num_classes, max(1, per_domain // record.num_classes))


def _state_cap(cell: Cell, pool: int) -> int:
    """The official sampler's S for ``cell`` (``unitta.evaluate.inputs.build_stream``'s rule)."""
    if cell.S is not None:
        return cell.S
    cap = default_state_cap(cell.setting, cell.dataset)
    return min(cap, pool) if cell.n_per_domain is not None else cap


def mean_domain_segment(cell: Cell) -> float | None:
    """Mean number of consecutive stream positions in one domain for ``cell``'s stream; None when the setting's
    domains are not continual or the stream is long by construction (see the module docstring)."""
    if Setting.parse(cell.setting).domain_corr != "1" or cell.sampler == "ccc":
        return None
    record = dataset_record(cell.dataset)
    if not (record.num_classes and record.num_domains and record.images_per_domain):
        return None  # an image folder or natural-shift set: its counts are on disk, not in the record (not sampled)
    data = _stand_in(cell)
    target = MIN_SEGMENT_BATCHES * cell.batch_size
    if cell.sampler == "official" and data.num_classes * _state_cap(cell, data.pool) >= _LONG_STATE_FACTOR * target:
        return None
    stream = build_stream(cell, data)
    runs = 1 + int(np.count_nonzero(np.diff(stream.domains)))
    return len(stream.domains) / runs


def _long_enough(cell: Cell) -> bool:
    segment = mean_domain_segment(cell)
    return segment is None or segment >= MIN_SEGMENT_BATCHES * cell.batch_size


def _grown(value: int, cell_of, limit: int | None = None) -> int:
    """The first value from ``value`` up (10 % steps) whose cell ``cell_of(value)`` has long enough segments:
    the proportional guess is close, but imbalance quotas round per state. ``limit`` caps the search."""
    for _ in range(12):
        if (limit is not None and value >= limit) or _long_enough(cell_of(value)):
            break
        value = max(value + 1, math.ceil(value * 1.1))
    return value if limit is None else min(value, limit)


def _lengthening(cell: Cell, segment: float) -> str:
    """The change of S / n_per_domain / length that brings the mean segment to MIN_SEGMENT_BATCHES batches."""
    data = _stand_in(cell)
    scale = MIN_SEGMENT_BATCHES * cell.batch_size / segment
    full = dataset_record(cell.dataset).images_per_domain
    k = data.num_classes
    if cell.sampler == "exact":
        now = cell.length or data.num_domains * k * data.pool
        need = _grown(math.ceil(now * scale), lambda n: dataclasses.replace(cell, length=n))
        return f"length: {need} (now {now})"
    if cell.sampler != "official":  # the other benchmark's orders use every image: only more images lengthen them
        def with_n(value: int) -> Cell:
            return dataclasses.replace(cell, n_per_domain=-(-value // k) * k)

        need = _grown(math.ceil(data.pool * scale) * k, with_n, limit=full)
        return f"n_per_domain: {-(-need // k) * k} (now {cell.n_per_domain}) or n_per_domain unset"
    s = _state_cap(cell, data.pool)

    def with_s(value: int) -> Cell:
        pool_needed = None if value <= data.pool else min(full, value * k)
        return dataclasses.replace(cell, S=value, n_per_domain=pool_needed or cell.n_per_domain)

    need_s = _grown(math.ceil(s * scale), with_s, limit=full // k)
    if not _long_enough(with_s(need_s)):
        return (f"S: {need_s} (now {s}) with all {full} images per domain (n_per_domain unset) still does not: this "
                "dataset cannot give longer segments")
    if need_s <= data.pool:
        return f"S: {need_s} (now {s})"
    return f"S: {need_s} (now {s}) with n_per_domain: {need_s * k} or more (now {cell.n_per_domain})"


def short_segment_warning(cell: Cell) -> str | None:
    """One line if ``cell``'s mean continual domain segment is shorter than MIN_SEGMENT_BATCHES batches."""
    segment = mean_domain_segment(cell)
    if segment is None or segment >= MIN_SEGMENT_BATCHES * cell.batch_size:
        return None
    size = ", ".join(f"{key} {value}" for key, value in (("n_per_domain", cell.n_per_domain), ("S", cell.S),
                                                         ("length", cell.length)) if value is not None)
    return (f"warning: {cell.dataset} {cell.setting} ({cell.sampler}{', ' + size if size else ''}, batch "
            f"{cell.batch_size}): a continual domain segment is {segment:.0f} images on average, "
            f"{segment / cell.batch_size:.1f} batches (fewer than {MIN_SEGMENT_BATCHES}): a method barely adapts "
            f"before the domain changes; {_lengthening(cell, segment)} lengthens it to {MIN_SEGMENT_BATCHES} batches "
            "(docs/streams.md, 'Stream length')")


def _stream_key(cell: Cell) -> tuple[Any, ...]:
    """What a cell's stream shape depends on (not its method, model or seed)."""
    return (cell.dataset, cell.setting, cell.sampler, cell.S, cell.n_per_domain, cell.length, cell.delta,
            cell.batch_size, tuple(sorted(cell.factors.items())))


def short_segment_warnings(cells: Iterable[Cell]) -> list[str]:
    """``short_segment_warning`` for each distinct stream shape among ``cells``, the short ones only."""
    seen: dict[tuple[Any, ...], None] = {}
    out = []
    for cell in cells:
        key = _stream_key(cell)
        if key in seen:
            continue
        seen[key] = None
        warning = short_segment_warning(cell)
        if warning:
            out.append(warning)
    return out


def row_stream_cell(row: dict[str, Any]) -> Cell | None:
    """The stream coordinates of a result row as a Cell (for ``short_segment_warnings`` over results: the report),
    or None for a row that lacks them. The row's ``S`` is the stream's own, so the stream is the same."""
    try:
        sampler = row.get("sampler") or "official"
        return Cell(dataset=row["dataset"], setting=row["setting"], sampler=sampler,
                    S=row.get("S") if sampler == "official" else None, n_per_domain=row.get("n_per_domain"),
                    length=row.get("length") if sampler == "exact" else None, delta=row.get("delta"),
                    batch_size=int(row.get("batch_size") or 64),
                    factors=json.loads(row.get("factor_overrides") or "{}"))
    except (KeyError, TypeError, ValueError):
        return None
