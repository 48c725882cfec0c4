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


# The modules that start and kill real processes (their own Ray clusters, Slurm, drivers stopped by signals), and
# those that use the session's Ray cluster (``ray_cluster``): one unit of pytest-xdist's work, run one after another
# on one worker, so that the session holds one Ray cluster, not one per worker, and the real processes' waits leave
# the cores to the other workers (``pytest_xdist_auto_num_workers``).
PROCESS_MODULES = ("tests/run/test_slurm.py", "tests/sweep/test_node_loss.py", "tests/sweep/test_cli.py",
                   "tests/sweep/test_sigterm_ray.py", "tests/sweep/test_sweep.py", "tests/sweep/test_trust.py")
RAY_MODULES = ("tests/select/test_select_ray.py", "tests/sweep/test_busy_cluster.py",
               "tests/sweep/test_cell_progress.py", "tests/sweep/test_compaction.py", "tests/sweep/test_niceness.py",
               "tests/test_ray_cluster.py", "tests/track/test_trackers.py", "tests/tune/test_tune_ray.py")
ONE_WORKER = PROCESS_MODULES + RAY_MODULES


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    """How pytest-xdist shares the suite (``-n auto --no-loadscope-reorder``, pyproject.toml): a module is one
    unit of work, so its module-scoped fixtures are built once, and ``ONE_WORKER`` together are one unit.
    Units go out in collection order (``pytest_collection_modifyitems``)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module_of(nodeid)
            return "one worker" if module in ONE_WORKER else module

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(session, config, items):
    """The long units first: ``ONE_WORKER``, then the other modules holding a ``slow`` test, then the rest
    (each module's tests in their order), so that the short modules fill in beside the long ones. A module that
    uses ``ray_cluster`` outside ``ONE_WORKER`` is a usage error: it would start a second cluster."""
    strays = sorted({_module_of(item.nodeid) for item in items if "ray_cluster" in getattr(item, "fixturenames", ())}
                    - set(ONE_WORKER))
    if strays:
        raise pytest.UsageError(f"tests/conftest.py: add {strays} to RAY_MODULES (they use the session's Ray cluster)")
    slow_modules = {_module_of(item.nodeid) for item in items if item.get_closest_marker("slow") is not None}

    def rank(item) -> int:
        module = _module_of(item.nodeid)
        return 0 if module in ONE_WORKER else 1 if module in slow_modules else 2

    items.sort(key=rank)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core and one more for the ``ONE_WORKER`` unit, whose real processes mostly wait
    (on Ray nodes, Slurm daemons, drivers), at most 8."""
    return max(1, min((os.cpu_count() or 1) + 1, 8))


_niced: list[bool] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A pytest-xdist worker whose first test is outside ``ONE_WORKER`` runs at nice 15 (its child processes too)
    and torch on one thread: the other worker's Ray nodes, Slurm daemons and drivers, timing-sensitive as they are,
    come first, the computing workers take what they leave, one core each (more threads than cores spin)."""
    if not _niced and os.environ.get("PYTEST_XDIST_WORKER"):
        _niced.append(_module_of(item.nodeid) not in ONE_WORKER)
        if _niced[0]:
            os.nice(15)
            torch.set_num_threads(1)
