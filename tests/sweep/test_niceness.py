"""Ray workers' priority (``resources.niceness``, cluster/README.md "Worker priority"): unitta runs cells at the
raylet's priority unless told otherwise (Ray's own default is nice 15), and says so when it lowers it."""

from __future__ import annotations

import os

import pytest

from tests.sweep.conftest import small_config
from unitta.schema import ConfigError
from unitta.sweep import run_sweep

pytestmark = pytest.mark.slow


def _log_niceness(out) -> int:
    (log,) = (out / "logs").glob("fmnist-c__*.log")
    host_line = next(line for line in log.read_text().splitlines() if line.startswith("host "))
    return int(host_line.split(" nice ")[1].split()[0])


def _raylet_niceness() -> int:
    """The niceness of the session's raylet (a child of this process, started by the ``ray_cluster`` fixture at the
    niceness this process had then)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "raylet" and int(fields[1]) == os.getpid():  # fields: state, ppid, ... (proc(5))
            return int(fields[16])  # nice
    raise AssertionError("no raylet among this process's children")


def test_cells_run_at_full_priority_unless_the_config_lowers_it(ray_cluster, tmp_path, capsys):
    base = _raylet_niceness()  # cells run at their raylet's priority
    run_sweep(small_config(methods=["test"], settings=["i111"]), tmp_path / "full", progress=False)
    assert _log_niceness(tmp_path / "full") == base  # not Ray's default of +15
    assert "reduced priority" not in capsys.readouterr().err
    lowered = small_config(methods=["test"], settings=["i111"], resources={"num_cpus": 1, "niceness": 7})
    run_sweep(lowered, tmp_path / "low", progress=False)
    assert _log_niceness(tmp_path / "low") == min(19, base + 7)
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "reduced priority" in ln]
    assert "nice +7" in line and "resources.niceness" in line


@pytest.mark.parametrize("value", [-1, 20, 1.5, "high"])
def test_a_niceness_out_of_range_is_one_line(value):
    with pytest.raises(ConfigError, match="niceness"):
        small_config(resources={"num_cpus": 1, "niceness": value})
