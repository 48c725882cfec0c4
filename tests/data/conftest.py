"""Shared fixtures: a small class-balanced slice of Fashion-MNIST's test set, padded to 32x32x3."""

import numpy as np
import pytest

from unitta.data.arrays import balanced_subset
from unitta.data.fmnist_c import padded_test_set


@pytest.fixture(scope="session")
def fmnist_small() -> tuple[np.ndarray, np.ndarray]:
    """40 images (the first 4 of each class), uint8 (40, 32, 32, 3), and their labels."""
    images, labels = padded_test_set()
    keep = balanced_subset(labels, 40, 10)
    return images[keep], labels[keep]
