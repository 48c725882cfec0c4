"""Shared fixtures: the small trained Fashion-MNIST CNN, the embedded ResNet-20, a Fashion-MNIST-C batch, one thread."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module's tests: the machine's 2 cores are shared, and results then do not
    depend on it. Modules ask for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def fmnist_cnn():
    """The small BatchNorm CNN of ``tests/methods/fmnist_cnn.py``, trained once per session, with its data."""
    from tests.methods.fmnist_cnn import train_fmnist_cnn

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: one thread per test process
    try:
        return train_fmnist_cnn()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def embedded_model():
    """(model, info) of the embedded ResNet-20 for Fashion-MNIST-C."""
    from unitta.models import load_model

    return load_model("fmnist-c")


@pytest.fixture(scope="session")
def fmnist_c_images() -> torch.Tensor:
    """128 Fashion-MNIST-C images (40 per domain subset, all 15 corruptions), shuffled with a fixed seed."""
    from unitta.data import load_dataset

    dataset = load_dataset("fmnist-c", n_per_domain=40)
    order = np.random.default_rng(0).permutation(len(dataset))[:128]
    return dataset.get_batch(order)
