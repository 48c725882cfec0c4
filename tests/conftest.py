"""Shared fixtures: the small trained Fashion-MNIST CNN, the embedded ResNet-20, a Fashion-MNIST-C batch, one thread,
the session's one local Ray cluster."""

from __future__ import annotations

import os

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


@pytest.fixture(scope="session")
def ray_cluster():
    """The test session's one local Ray cluster: ``ray.init(num_cpus=2, num_gpus=2)``, started by the first test
    that asks for it and shut down at the end of the session (fake GPUs: Ray only sets CUDA_VISIBLE_DEVICES).
    Every test that needs Ray in this process (sweep, tune, select, track, run) shares it: a cluster starts in
    seconds of CPU, and more than one in a session only repeats that."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        resources = ray.cluster_resources()
        if resources.get("CPU", 0) >= 2 and resources.get("GPU", 0) >= 2:
            yield ray
            return
        ray.shutdown()
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    yield ray
    ray.shutdown()
