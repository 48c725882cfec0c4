"""Label-free selection criteria of a cell, computed along the stream from what the method predicts, never from
labels (docs/selection.md, "Unsupervised"): the surrogates that ``unitta select``'s unsupervised protocol
ranks hyper-parameters by (Cygert et al., "Realistic evaluation of test-time adaptation: unsupervised
hyper-parameter selection", arXiv 2407.14231; TTAB, Zhao et al. ICML'23, section 4).

- ``entropy``: the mean Shannon entropy of the predicted class distribution (nats; lower is better: the
  objective Tent minimises, Wang et al. ICLR'21);
- ``infomax``: information maximisation, the entropy of the stream's mean prediction minus the mean
  entropy (nats; higher is better: confident and diverse, SHOT, Liang et al. ICML'20);
- ``source_agreement``: the fraction of images on which the adapted prediction equals the frozen source
  model's (higher is better: adaptation that does not drift from the source; one extra forward per batch);
- ``consistency``: the fraction of images whose non-adapting prediction (``TTAMethod.predict``) is unchanged
  under a random flip and shift (higher is better; two extra forwards per batch, no adaptation, no state).

Only the criteria a cell names (``Cell.criteria``) are computed; each becomes a ``criterion_<name>`` column.
Importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any

from unitta.cell.choices import CRITERIA

__all__ = ["CRITERION_MODES", "CriteriaMeter", "column"]

# which way is better for each criterion (the unsupervised protocol picks the best point by it; CRITERIA: the names)
CRITERION_MODES: dict[str, str] = {
    "entropy": "min",
    "infomax": "max",
    "source_agreement": "max",
    "consistency": "max",
}
assert set(CRITERION_MODES) == set(CRITERIA)
_SHIFT = 3  # pixels of the consistency check's random translation (32x32 images)


def column(name: str) -> str:
    """The result column of criterion ``name``."""
    return f"criterion_{name}"


class CriteriaMeter:
    """Accumulates the named criteria over a stream, on the device (no host synchronisation per batch).

    ``update(method, x, log_probs)`` after each batch (``log_probs``: the method's scores as log class
    probabilities); ``values()`` at the end (one synchronisation); ``partial()`` for progress reports.
    """

    def __init__(self, names: tuple[str, ...], seed: int, device) -> None:
        import torch

        self.names = tuple(names)
        self.device = device
        self.generator = torch.Generator().manual_seed(int(seed) + 7_919)  # the flips and shifts, never global RNG
        self.n = 0
        self.entropy = torch.zeros((), dtype=torch.float64, device=device)
        self.mean_probs: Any = None
        self.agree = torch.zeros((), dtype=torch.float64, device=device)
        self.consistent = torch.zeros((), dtype=torch.float64, device=device)

    def update(self, method, x, log_probs, log_probabilities) -> None:
        """Add one batch: ``log_probs`` of the adapted scores; ``log_probabilities(scores)`` converts more scores."""
        import torch

        if not self.names:
            return
        with torch.no_grad():
            probs = log_probs.exp()
            self.n += len(x)
            self.entropy += -(probs * log_probs).sum(dim=1).double().sum()
            total = probs.double().sum(dim=0)
            self.mean_probs = total if self.mean_probs is None else self.mean_probs + total
            if "source_agreement" in self.names:
                source = method.source_model(x)
                self.agree += (source.argmax(dim=1) == log_probs.argmax(dim=1)).double().sum()
            if "consistency" in self.names:
                plain = log_probabilities(method.predict(x)).argmax(dim=1)
                moved = log_probabilities(method.predict(self._augment(x))).argmax(dim=1)
                self.consistent += (plain == moved).double().sum()

    def _augment(self, x):
        """A random horizontal flip per image and one random translation of the batch (zero padding)."""
        import torch

        flip = (torch.rand(len(x), generator=self.generator) < 0.5).to(x.device)
        out = torch.where(flip[:, None, None, None], x.flip(3), x)
        dy, dx = (int(v) for v in torch.randint(-_SHIFT, _SHIFT + 1, (2,), generator=self.generator))
        padded = torch.nn.functional.pad(out, (_SHIFT, _SHIFT, _SHIFT, _SHIFT))
        h, w = x.shape[2], x.shape[3]
        return padded[:, :, _SHIFT + dy : _SHIFT + dy + h, _SHIFT + dx : _SHIFT + dx + w]

    def partial(self) -> dict[str, float]:
        """The criteria over the stream so far (synchronises with the device)."""
        if not self.names or self.n == 0:
            return {}
        mean_entropy = float(self.entropy) / self.n
        values = {"entropy": mean_entropy}
        if "infomax" in self.names:
            p = (self.mean_probs / self.n).clamp_min(1e-12)
            values["infomax"] = float(-(p * p.log()).sum()) - mean_entropy
        if "source_agreement" in self.names:
            values["source_agreement"] = float(self.agree) / self.n
        if "consistency" in self.names:
            values["consistency"] = float(self.consistent) / self.n
        return {name: values[name] for name in self.names}

    def values(self) -> dict[str, float]:
        """The ``criterion_<name>`` columns of the row, for the criteria the cell asked for."""
        return {column(name): value for name, value in self.partial().items()}
