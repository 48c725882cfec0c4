"""The Stream type (a sampled benchmark stream) and the mapping from states to images through pools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unitta.streams.settings import Setting


@dataclass(frozen=True)
class Stream:
    """A benchmark stream: dataset indices in stream order and the (domain, class) state of each position.

    indices, domains, classes: int64 arrays of the stream's length.
    num_domains, num_classes: the state space (D, K), from the dataset's arrays.
    setting, factors: the scenario and the four factors actually used
        (domain_alpha, domain_beta, class_alpha, class_beta).
    sampler: 'official', 'exact', 'sorted', 'dirichlet', 'gradual', 'gradual_correlated' or 'ccc'; seed: its
        seed; S: the official per-state cap (None for the others); factors is empty for the other benchmark's
        orders, meta['delta'] holds dirichlet's delta, meta['steps'] the gradual orders' severity steps.
    n_reused: positions that re-used an image already drawn earlier (a pool cycled).
    """

    indices: np.ndarray
    domains: np.ndarray
    classes: np.ndarray
    num_domains: int
    num_classes: int
    setting: Setting
    factors: dict[str, float]
    sampler: str
    seed: int
    dataset: str
    S: int | None = None
    n_reused: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.indices)

    def summary(self) -> dict[str, Any]:
        """Length, per-domain/per-class counts, mean run lengths, realised head/tail imbalance ratios,
        images reused, and per-quarter counts with a drift figure (max total-variation distance
        between a quarter's marginal and the whole stream's)."""
        out: dict[str, Any] = {
            "setting": self.setting.code,
            "name": self.setting.name,
            "sampler": self.sampler,
            "dataset": self.dataset,
            "seed": self.seed,
            "factors": dict(self.factors),
            "delta": self.meta.get("delta"),
            "S": self.S,
            "length": len(self),
            "images_reused": self.n_reused,
        }
        for attr, seq, n in (("domain", self.domains, self.num_domains), ("class", self.classes, self.num_classes)):
            counts = np.bincount(seq, minlength=n)
            quarters = quarter_counts(seq, n)
            out[f"{attr}_counts"] = counts.tolist()
            out[f"{attr}_mean_run_length"] = mean_run_length(seq)
            out[f"{attr}_head_tail_ratio"] = float(counts[0] / counts[-1]) if counts[-1] > 0 else float("inf")
            out[f"{attr}_max_min_ratio"] = float(counts.max() / counts.min()) if counts.min() > 0 else float("inf")
            out[f"{attr}_states_visited"] = int(np.count_nonzero(counts))
            out[f"{attr}_counts_per_quarter"] = quarters.tolist()
            out[f"{attr}_quarter_drift_tv"] = quarter_drift(quarters)
        return out


def mean_run_length(seq: np.ndarray) -> float:
    """Average length of maximal runs of equal consecutive values (0.0 for an empty sequence)."""
    seq = np.asarray(seq)
    if len(seq) == 0:
        return 0.0
    runs = 1 + int(np.count_nonzero(seq[1:] != seq[:-1]))
    return len(seq) / runs


def quarter_counts(seq: np.ndarray, n: int) -> np.ndarray:
    """(4, n) counts of each value in each quarter of the sequence."""
    seq = np.asarray(seq)
    return np.stack([np.bincount(part, minlength=n) for part in np.array_split(seq, 4)])


def quarter_drift(quarters: np.ndarray) -> float:
    """Max over quarters of the total-variation distance between the quarter's marginal and the overall one."""
    total = quarters.sum(axis=0)
    if total.sum() == 0:
        return 0.0
    overall = total / total.sum()
    tv = [0.5 * np.abs(q / max(q.sum(), 1) - overall).sum() for q in quarters]
    return float(max(tv))


def check_labels_domains(labels: np.ndarray, domains: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Validate the dataset arrays; returns (labels, domains, D, K) with D, K = max + 1."""
    labels = np.asarray(labels)
    domains = np.asarray(domains)
    if labels.ndim != 1 or domains.ndim != 1 or len(labels) != len(domains):
        raise ValueError(
            f"labels, domains: expected two 1-d arrays of equal length, got shapes {labels.shape} and {domains.shape}"
        )
    if len(labels) == 0:
        raise ValueError("labels: the dataset is empty (0 images); a stream needs at least one image per state")
    for name, arr in (("labels", labels), ("domains", domains)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name}: expected an integer array, got dtype {arr.dtype}")
        if arr.min() < 0:
            raise ValueError(f"{name}: ids must be >= 0, found {int(arr.min())}")
    labels = labels.astype(np.int64, copy=False)
    domains = domains.astype(np.int64, copy=False)
    num_domains, num_classes = int(domains.max()) + 1, int(labels.max()) + 1
    if num_domains < 2:
        raise ValueError(f"domains: found {num_domains} domain id(s); the benchmark needs n >= 2 domains")
    if num_classes < 2:
        raise ValueError(f"labels: found {num_classes} class id(s); the benchmark needs n >= 2 classes")
    return labels, domains, num_domains, num_classes


def draw_from_pools(states: np.ndarray, pools: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, int]:
    """Map a state sequence to dataset indices: the v-th visit of state s takes pools[s][v mod |pool s|].

    ``pools`` holds every state's (already shuffled) pool back to back, delimited by ``starts``; this is
    the reference's round-robin queue (docs/streams.md). Returns (indices, number of positions that re-used an image).
    """
    states = np.asarray(states, dtype=np.int64)
    n = len(states)
    order = np.argsort(states, kind="stable")
    sorted_states = states[order]
    first = np.searchsorted(sorted_states, sorted_states, side="left")
    visit = np.empty(n, dtype=np.int64)
    visit[order] = np.arange(n, dtype=np.int64) - first
    size = (starts[1:] - starts[:-1])[states]
    if np.any(size == 0):
        raise ValueError("states: the stream visits a state whose pool is empty")
    indices = pools[starts[states] + visit % size]
    return indices, int(np.count_nonzero(visit >= size))
