"""Class-balanced memory banks of the memory-based baselines.

- ``CSTUMemory``: RoTTA's category-balanced sampling with timeliness and uncertainty
  (Yuan et al., CVPR'23, sec. 3.2; docs/methods.md "RoTTA").
- ``PBRSMemory``: NOTE's prediction-balanced reservoir sampling
  (Gong et al., NeurIPS'22, sec. 3.2; docs/methods.md "NOTE").

Both store one image per entry with its pseudo-label; neither ever sees a true label. Both promise
class balance *with respect to the pseudo-labels*: CSTU never holds more than ceil(capacity / K)
items of one class; PBRS, once full, only ever grows a class that is not among the largest, so the
class counts of classes seen often enough end up within one of each other.

Layout, for GPU efficiency: the images live in one preallocated (capacity, ...) tensor on the
images' device (a copy, so no incoming batch is kept alive through a view); the bookkeeping that
decides what is stored (labels, uncertainties, ages, which slot holds what) lives on the host, and reaches the
device through ``device.staged`` (pinned memory, one non-blocking copy per write or read, no tensor made from
host data).
``add_batch`` reads a batch's labels (and uncertainties) with one device-to-host transfer, takes every
decision in the same order and with the same arithmetic as offering the samples one by one, then
writes all the images it keeps with one indexed copy; ``batch`` gathers the stored images with one
indexed read. The decisions are sequential by definition (each depends on the previous ones), and
host Python over 64 scalars is far cheaper than thousands of tiny device kernels.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch
from torch import Tensor

from unitta.methods.parts.device import staged

__all__ = ["CSTUMemory", "PBRSMemory", "split_at_updates"]


class _Slots:
    """Preallocated storage for ``capacity`` images, filled on first use with the images' shape/dtype/device."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.data: Tensor | None = None
        self.free = list(range(capacity - 1, -1, -1))  # pop() hands out slot 0 first

    def take(self) -> int:
        return self.free.pop()

    def release(self, slot: int) -> None:
        self.free.append(slot)

    def write(self, x: Tensor, rows: Sequence[int], slots: Sequence[int]) -> None:
        """Copy ``x[rows[j]]`` into slot ``slots[j]`` for every j (one indexed copy)."""
        if not slots:
            return
        if self.data is None:
            self.data = x.new_empty((self.capacity, *x.shape[1:]))
        x = x.detach()
        if len(slots) == 1:
            self.data[slots[0]].copy_(x[rows[0]])
            return
        index = staged([list(rows), list(slots)], torch.long, x.device)
        self.data.index_copy_(0, index[1], x.index_select(0, index[0]))

    def read(self, slots: Sequence[int]) -> Tensor:
        """The images of ``slots``, in that order, as a new (M, ...) tensor (one indexed read)."""
        assert self.data is not None
        return self.data.index_select(0, staged(list(slots), torch.long, self.data.device))


def _host_list(values: Tensor | Sequence, kind: type) -> list:
    return [kind(v) for v in (values.tolist() if isinstance(values, Tensor) else values)]


class _Item:
    """One stored CSTU entry: its slot, uncertainty (and its score term) and the attempt count at insertion."""

    __slots__ = ("memory", "slot", "uncertainty", "uncertainty_term", "born")

    def __init__(self, memory: CSTUMemory, slot: int, uncertainty: float):
        self.memory = memory
        self.slot = slot
        self.uncertainty = uncertainty
        self.uncertainty_term = memory.lambda_u * uncertainty / math.log(memory.num_classes)
        self.born = memory.clock

    @property
    def age(self) -> int:
        """Insertion attempts since this item was stored (RoTTA ages every item at every attempt)."""
        return self.memory.clock - self.born


class CSTUMemory:
    """RoTTA's CSTU bank: capacity N, per-class quota N/K, heuristic score of timeliness and uncertainty.

    Score of an item (RoTTA sec. 3.2): lambda_t / (1 + exp(-age / N)) + lambda_u * H / log K, where H is
    the teacher's entropy of the item. Inserting an item predicted as class c (docs/methods.md "RoTTA"):

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
        self.clock = 0  # insertion attempts so far; an item's age is clock - its birth
        self._size = 0
        self._slots = _Slots(capacity)
        self._timeliness: dict[int, float] = {}  # age -> lambda_t / (1 + exp(-age / N)), computed once per age

    def __len__(self) -> int:
        return self._size

    def class_counts(self) -> list[int]:
        return [len(items) for items in self.classes]

    def score(self, age: int, uncertainty: float) -> float:
        return self._timeliness_of(age) + self.lambda_u * uncertainty / math.log(self.num_classes)

    def _timeliness_of(self, age: int) -> float:
        value = self._timeliness.get(age)
        if value is None:
            value = self._timeliness[age] = self.lambda_t / (1.0 + math.exp(-age / self.capacity))
        return value

    def add(self, x: Tensor, label: int, uncertainty: float) -> bool:
        """Offer one item (x without batch dimension, copied when stored); returns whether it was stored."""
        slot = self._offer(int(label), float(uncertainty))
        if slot is not None:
            self._slots.write(x.unsqueeze(0), [0], [slot])
        return slot is not None

    def add_batch(self, x: Tensor, labels: Tensor | Sequence[int], uncertainties: Tensor | Sequence[float]) -> None:
        """Offer every sample of a batch, in order: the same result as ``add`` one by one.

        ``labels`` and ``uncertainties`` may already be host lists (a caller that needs them anyway
        reads them once); tensors are read with one transfer.
        """
        if isinstance(labels, Tensor) and isinstance(uncertainties, Tensor):
            both = torch.stack([labels.to(torch.float64), uncertainties.to(torch.float64)]).tolist()
            labels, uncertainties = both
        labels = _host_list(labels, int)
        uncertainties = _host_list(uncertainties, float)
        if not len(labels) == len(uncertainties) == x.shape[0]:
            raise ValueError(f"{x.shape[0]} images, {len(labels)} labels, {len(uncertainties)} uncertainties")
        kept: dict[int, int] = {}  # slot -> batch row; a later sample that takes the slot wins
        for row, (label, unc) in enumerate(zip(labels, uncertainties)):
            slot = self._offer(label, unc)
            if slot is not None:
                kept[slot] = row
        self._slots.write(x, list(kept.values()), list(kept.keys()))

    def _offer(self, label: int, uncertainty: float) -> int | None:
        """The CSTU decision for one item: the slot it is stored in, or None when dropped."""
        if not 0 <= label < self.num_classes:
            raise ValueError(f"label={label!r} must lie in [0, {self.num_classes})")
        new_score = self.score(0, uncertainty)
        if len(self.classes[label]) < self.quota:
            if self._size < self.capacity:
                slot: int | None = self._slots.take()
            else:
                slot = self._evict_from(self._majority_classes(), new_score)
        else:
            slot = self._evict_from([label], new_score)
        if slot is not None:
            self.classes[label].append(_Item(self, slot, uncertainty))
            self._size += 1
        self.clock += 1  # ages every stored item (the new one included) by one
        return slot

    def _majority_classes(self) -> list[int]:
        counts = self.class_counts()
        most = max(counts)
        return [c for c, n in enumerate(counts) if n == most]

    def _evict_from(self, classes: list[int], new_score: float) -> int | None:
        """Remove the highest-score item of ``classes`` if it scores above ``new_score``; its freed slot."""
        best: tuple[float, int, int] | None = None  # (score, class, index); ties go to the later item
        for c in classes:
            for i, item in enumerate(self.classes[c]):
                s = self._timeliness_of(self.clock - item.born) + item.uncertainty_term
                if best is None or s >= best[0]:
                    best = (s, c, i)
        if best is None:
            return self._slots.take()
        if best[0] > new_score:
            self._size -= 1
            return self.classes[best[1]].pop(best[2]).slot
        return None

    def batch(self) -> tuple[Tensor, Tensor]:
        """The stored images (M, ...) in class order and their ages divided by the capacity (M,)."""
        items = [item for items in self.classes for item in items]
        if not items:
            raise ValueError("the memory is empty")
        x = self._slots.read([item.slot for item in items])
        return x, staged([item.age / self.capacity for item in items], torch.float64, x.device).to(x.dtype)

    def padded_batch(self) -> tuple[Tensor, Tensor, Tensor]:
        """``batch()`` padded to the capacity, so that its shape never changes: (capacity, ...) images (the stored
        ones in class order, then copies of the first), their ages / capacity (0 for the padding) and a (capacity,)
        bool mask of the stored rows. One host-to-device copy (slots, ages and mask together)."""
        items = [item for items in self.classes for item in items]
        if not items:
            raise ValueError("the memory is empty")
        pad = self.capacity - len(items)
        slots = [item.slot for item in items] + [items[0].slot] * pad
        ages = [item.age / self.capacity for item in items] + [0.0] * pad
        stored = [1.0] * len(items) + [0.0] * pad
        assert self._slots.data is not None
        data = self._slots.data
        table = staged([slots, ages, stored], torch.float64, data.device)
        x = data.index_select(0, table[0].long())
        return x, table[1].to(data.dtype), table[2] > 0.5


class PBRSMemory:
    """NOTE's prediction-balanced reservoir sampling bank of capacity N.

    Each class c counts n_c, the items predicted as c seen so far. Inserting an item of class c when
    the bank is full (NOTE sec. 3.2; docs/methods.md "NOTE"):

    - if c is not among the largest classes: remove a random item of a random largest class, add it;
    - else: with probability m_c / n_c (m_c = stored items of class c) replace a random stored item
      of class c, otherwise drop the new item.

    All random choices come from ``rng``, a Python ``random.Random`` (as NOTE's own code draws with
    Python's ``random``): pure host work, no tensor operator and no device synchronisation per draw.
    """

    def __init__(self, capacity: int, num_classes: int, rng: random.Random):
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r} must be >= 1")
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes!r} must be >= 1")
        self.capacity = capacity
        self.num_classes = num_classes
        self.rng = rng
        self.classes: list[list[int]] = [[] for _ in range(num_classes)]  # the slots of each class's items
        self.seen = [0] * num_classes
        self._size = 0
        self._slots = _Slots(capacity)

    def __len__(self) -> int:
        return self._size

    def class_counts(self) -> list[int]:
        return [len(items) for items in self.classes]

    def add(self, x: Tensor, label: int) -> bool:
        """Offer one item (x without batch dimension, copied when stored); returns whether it was stored."""
        slot = self._offer(int(label))
        if slot is not None:
            self._slots.write(x.unsqueeze(0), [0], [slot])
        return slot is not None

    def add_batch(self, x: Tensor, labels: Tensor | Sequence[int]) -> None:
        """Offer every sample of a batch, in order: the same result (and draws) as ``add`` one by one."""
        labels = _host_list(labels, int)
        if len(labels) != x.shape[0]:
            raise ValueError(f"{x.shape[0]} images but {len(labels)} labels")
        kept: dict[int, int] = {}
        for row, label in enumerate(labels):
            slot = self._offer(label)
            if slot is not None:
                kept[slot] = row
        self._slots.write(x, list(kept.values()), list(kept.keys()))

    def _offer(self, label: int) -> int | None:
        if not 0 <= label < self.num_classes:
            raise ValueError(f"label={label!r} must lie in [0, {self.num_classes})")
        self.seen[label] += 1
        if self._size < self.capacity:
            slot = self._slots.take()
            self._size += 1
        else:
            slot = self._make_room(label)
            if slot is None:
                return None
        self.classes[label].append(slot)
        return slot

    def _make_room(self, label: int) -> int | None:
        """Remove an item as PBRS prescribes and return its slot, or None when the new item is dropped."""
        counts = self.class_counts()
        most = max(counts)
        largest = [c for c, n in enumerate(counts) if n == most]
        if label not in largest:
            victim = largest[self.rng.randrange(len(largest))]
            return self.classes[victim].pop(self.rng.randrange(len(self.classes[victim])))
        if self.rng.random() <= counts[label] / self.seen[label]:
            return self.classes[label].pop(self.rng.randrange(len(self.classes[label])))
        return None

    def batch(self) -> tuple[Tensor, Tensor]:
        """The stored images (M, ...) in class order and their pseudo-labels (M,)."""
        slots = [slot for items in self.classes for slot in items]
        if not slots:
            raise ValueError("the memory is empty")
        assert self._slots.data is not None
        labels = [c for c, items in enumerate(self.classes) for _ in items]
        table = staged([slots, labels], torch.long, self._slots.data.device)  # one copy: slots and labels
        return self._slots.data.index_select(0, table[0]), table[1]


def split_at_updates(seen: int, n: int, every: int) -> list[tuple[int, int, bool]]:
    """Rows [0, n) of a batch cut after every sample that completes ``every`` samples since the stream start.

    ``seen`` samples came before the batch. Returns (start, end, update) pieces: offer rows start..end-1 to
    the memory, then update if ``update`` (the memory methods update every ``every`` samples, counted in
    samples, so an update can fall inside a batch).
    """
    pieces, start = [], 0
    end = every - seen % every  # rows up to the next multiple of ``every``
    while end <= n:
        pieces.append((start, end, True))
        start, end = end, end + every
    if start < n:
        pieces.append((start, n, False))
    return pieces
