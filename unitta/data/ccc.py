"""The images of a ccc stream, generated batch by batch (CCC, Press et al. NeurIPS'23; docs/long_horizon.md).

``CCCImages`` is a ``CorruptedDataset`` whose items are the positions of one ccc stream
(``unitta.streams.make_ccc_stream``): item t is the clean image ``clean[t]`` under corruption ``corruption[t]`` at
that corruption's calibrated severity (``unitta.data.corruptions.corrupt_at``, continuous severities). Nothing
is materialised: ``get_batch`` corrupts only the images asked for, each with its own generator seeded with
``(seed, position)``, so an image is the same whatever batch (or round) asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from unitta.data.base import CorruptedDataset, float_images
from unitta.data.corruptions import corrupt_at
from unitta.data.records import CORRUPTIONS

__all__ = ["CCCImages", "ccc_images"]


@dataclass
class CCCImages(CorruptedDataset):
    """A ccc stream's images: ``clean_images`` uint8 (M, H, W, 3); per position the clean index and (as
    ``domains``) the corruption id; ``severities[d]``: the calibrated severity of corruption d."""

    clean_images: np.ndarray = field(kw_only=True, repr=False)
    clean: np.ndarray = field(kw_only=True, repr=False)
    severities: dict[int, float] = field(kw_only=True)
    seed: int = field(kw_only=True)

    def get_batch_uint8(self, indices: np.ndarray) -> np.ndarray:
        """The images at stream positions ``indices``: uint8 (B, H, W, 3)."""
        positions = np.asarray(indices, dtype=np.int64)
        out = self.clean_images[self.clean[positions]]
        corruption = self.domains[positions]
        for d in np.unique(corruption):
            rows = np.flatnonzero(corruption == d)
            rngs = [np.random.default_rng((self.seed, int(p))) for p in positions[rows]]
            out[rows] = corrupt_at(out[rows], CORRUPTIONS[int(d)], self.severities[int(d)], rngs)
        return out

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        """The images at stream positions ``indices`` as float32 (B, 3, H, W) in [0, 1]."""
        return float_images(torch.from_numpy(self.get_batch_uint8(indices)))


def ccc_images(stream, clean_images: np.ndarray, severities: dict[int, float], name: str) -> CCCImages:
    """The image source of a ccc ``stream`` (its meta['clean'] and domains) over ``clean_images``."""
    return CCCImages(
        name=name, labels=stream.classes, domains=stream.domains, domain_names=list(CORRUPTIONS),
        num_classes=stream.num_classes, clean_images=clean_images, clean=stream.meta["clean"],
        severities=dict(severities), seed=stream.seed,
    )
