"""Class-balanced memory banks of the memory-based baselines.

- ``CSTUMemory``: RoTTA's category-balanced sampling with timeliness and uncertainty
  (Yuan et al., CVPR'23, sec. 3.2; baselines.md 2.5).
- ``PBRSMemory``: NOTE's prediction-balanced reservoir sampling
  (Gong et al., NeurIPS'22, sec. 3.2; baselines.md 2.7).

Both store one image per entry (a copy, on the tensor's device, so that no incoming batch is kept
alive through a view) with its pseudo-label; neither
ever sees a true label. Both promise class balance *with respect to the pseudo-labels*:
CSTU never holds more than ceil(capacity / K) items of one class; PBRS, once full, only ever grows a
class that is not among the largest, so the class counts of classes seen often enough end up within
one of each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CSTUMemory", "PBRSMemory"]


@dataclass
class _Item:
    x: Tensor
    uncertainty: float
    age: int = 0


class CSTUMemory:
    """RoTTA's CSTU bank: capacity N, per-class quota N/K, heuristic score of timeliness and uncertainty.

    Score of an item (RoTTA sec. 3.2): lambda_t / (1 + exp(-age / N)) + lambda_u * H / log K, where H is
    the teacher's entropy of the item. Inserting an item predicted as class c (baselines.md 2.5):

    - c under quota and the bank not full: add it;
    - c under quota, bank full: remove the highest-score item of the majority classes (those with the
      most items), if its score exceeds the new item's; otherwise drop the new item;
    - c at quota: the same, among the items of class c.

    Every insertion attempt ages every stored item by one.
    """

    def __init__(self, capacity: int, num_classes: int, lambda_t: float = 1.0, lambda_u: float = 1.0):
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r} must be >= 1")
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes!r} must be >= 2")
        self.capacity = capacity
        self.num_classes = num_classes
        self.lambda_t = lambda_t
        self.lambda_u = lambda_u
        self.quota = capacity / num_classes  # a float, as in RoTTA: K > N gives a quota below one
        self.classes: list[list[_Item]] = [[] for _ in range(num_classes)]

    def __len__(self) -> int:
        return sum(len(items) for items in self.classes)

    def class_counts(self) -> list[int]:
        return [len(items) for items in self.classes]

    def score(self, age: int, uncertainty: float) -> float:
        return self.lambda_t / (1.0 + math.exp(-age / self.capacity)) + self.lambda_u * uncertainty / math.log(
            self.num_classes
        )

    def add(self, x: Tensor, label: int, uncertainty: float) -> bool:
        """Offer one item (x without batch dimension, copied when stored); returns whether it was stored."""
        if not 0 <= label < self.num_classes:
            raise ValueError(f"label={label!r} must lie in [0, {self.num_classes})")
        new_score = self.score(0, uncertainty)
        if len(self.classes[label]) < self.quota:
            stored = len(self) < self.capacity or self._evict_from(self._majority_classes(), new_score)
        else:
            stored = self._evict_from([label], new_score)
        if stored:
            self.classes[label].append(_Item(x.detach().clone(), float(uncertainty)))
        for items in self.classes:
            for item in items:
                item.age += 1
        return stored

    def add_batch(self, x: Tensor, labels: Tensor, uncertainties: Tensor) -> None:
        """Offer every sample of a batch, in order."""
        for xi, label, unc in zip(x, labels.tolist(), uncertainties.tolist()):
            self.add(xi, int(label), float(unc))

    def _majority_classes(self) -> list[int]:
        counts = self.class_counts()
        most = max(counts)
        return [c for c, n in enumerate(counts) if n == most]

    def _evict_from(self, classes: list[int], new_score: float) -> bool:
        best: tuple[float, int, int] | None = None  # (score, class, index); ties go to the later item
        for c in classes:
            for i, item in enumerate(self.classes[c]):
                s = self.score(item.age, item.uncertainty)
                if best is None or s >= best[0]:
                    best = (s, c, i)
        if best is None:
            return True
        if best[0] > new_score:
            self.classes[best[1]].pop(best[2])
            return True
        return False

    def batch(self) -> tuple[Tensor, Tensor]:
        """The stored images (M, ...) in class order and their ages divided by the capacity (M,)."""
        items = [item for items in self.classes for item in items]
        if not items:
            raise ValueError("the memory is empty")
        x = torch.stack([item.x for item in items])
        ages = torch.tensor([item.age / self.capacity for item in items], dtype=x.dtype, device=x.device)
        return x, ages


class PBRSMemory:
    """NOTE's prediction-balanced reservoir sampling bank of capacity N.

    Each class c counts n_c, the items predicted as c seen so far. Inserting an item of class c when
    the bank is full (NOTE sec. 3.2; baselines.md 2.7):

    - if c is not among the largest classes: remove a random item of a random largest class, add it;
    - else: with probability m_c / n_c (m_c = stored items of class c) replace a random stored item
      of class c, otherwise drop the new item.

    All random choices come from ``generator``.
    """

    def __init__(self, capacity: int, num_classes: int, generator: torch.Generator):
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r} must be >= 1")
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes!r} must be >= 1")
        self.capacity = capacity
        self.num_classes = num_classes
        self.generator = generator
        self.classes: list[list[Tensor]] = [[] for _ in range(num_classes)]
        self.seen = [0] * num_classes

    def __len__(self) -> int:
        return sum(len(items) for items in self.classes)

    def class_counts(self) -> list[int]:
        return [len(items) for items in self.classes]

    def add(self, x: Tensor, label: int) -> bool:
        """Offer one item (x without batch dimension, copied when stored); returns whether it was stored."""
        if not 0 <= label < self.num_classes:
            raise ValueError(f"label={label!r} must lie in [0, {self.num_classes})")
        self.seen[label] += 1
        if len(self) >= self.capacity and not self._make_room(label):
            return False
        self.classes[label].append(x.detach().clone())
        return True

    def add_batch(self, x: Tensor, labels: Tensor) -> None:
        """Offer every sample of a batch, in order."""
        for xi, label in zip(x, labels.tolist()):
            self.add(xi, int(label))

    def _randrange(self, n: int) -> int:
        return int(torch.randint(n, (1,), generator=self.generator, device=self.generator.device).item())

    def _make_room(self, label: int) -> bool:
        counts = self.class_counts()
        most = max(counts)
        largest = [c for c, n in enumerate(counts) if n == most]
        if label not in largest:
            victim = largest[self._randrange(len(largest))]
            self.classes[victim].pop(self._randrange(len(self.classes[victim])))
            return True
        u = float(torch.rand((), generator=self.generator, device=self.generator.device).item())
        if u <= counts[label] / self.seen[label]:
            self.classes[label].pop(self._randrange(len(self.classes[label])))
            return True
        return False

    def batch(self) -> tuple[Tensor, Tensor]:
        """The stored images (M, ...) in class order and their pseudo-labels (M,)."""
        xs = [x for items in self.classes for x in items]
        if not xs:
            raise ValueError("the memory is empty")
        labels = [c for c, items in enumerate(self.classes) for _ in items]
        stacked = torch.stack(xs)
        return stacked, torch.tensor(labels, dtype=torch.long, device=stacked.device)
