"""A cluster held by other jobs: the sweep says so in one line instead of waiting silently (unitta/ray_cluster.py)."""

from __future__ import annotations

import pytest

from unitta.run import ray_cluster as ray_cluster_lib

pytestmark = pytest.mark.slow


def test_other_jobs_holding_the_cluster_are_named(ray_cluster):
    ray = ray_cluster

    @ray.remote(num_cpus=2)
    class Holder:  # another job's work, holding every CPU of the test cluster
        def ping(self) -> int:
            return 1

    holder = Holder.remote()
    ray.get(holder.ping.remote())
    try:
        line = ray_cluster_lib.busy_elsewhere(ray, 1.0, 0.0, ours_at_most=0)
        assert line is not None and line.startswith("cells are waiting: other jobs hold 2 CPU / 0 GPU")
        # the same usage by our own running cells is not someone else's
        assert ray_cluster_lib.busy_elsewhere(ray, 1.0, 0.0, ours_at_most=2) is None
    finally:
        ray.kill(holder)
    assert ray_cluster_lib.joined_line(ray) is None  # this process started the test's Ray: nothing was joined
