"""``recommend`` bounds its work before allocating: a stream with many classes gets its recommendation, and the
transition test it cannot afford says what it would need (docs/recommend.md). Peak memory is measured in a
subprocess, which runs under an address-space limit so that a regression fails instead of exhausting the machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MB = 500  # the recommendation's own work; numpy, scipy and polars take about 200 MB of it

_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
from unitta.recommend import main
code = main(sys.argv[1:])
# VmHWM: this process's own peak (ru_maxrss would keep the forking test process's across exec)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("PEAK_MB", int(hwm.split()[1]) / 1024, file=sys.stderr)
sys.exit(code)
"""


def _run(tmp_path: Path, labels: np.ndarray, *args: str) -> tuple[dict, float]:
    path = tmp_path / "labels.npy"
    np.save(path, labels)
    proc = subprocess.run([sys.executable, "-c", _CHILD, "--classes", str(path), *args, "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak = float(proc.stderr.rsplit("PEAK_MB", 1)[1].split()[0])
    return json.loads(proc.stdout), peak


@pytest.mark.parametrize("classes, length, paper", [(1000, 5000, "imagenet-c"), (200, 5000, "cifar100-c")])
def test_many_classes_stay_within_memory(tmp_path, classes, length, paper):
    labels = np.random.default_rng(0).integers(0, classes, length)
    rec, peak = _run(tmp_path, labels, "--paper", paper)
    assert rec["methods"] and peak < LIMIT_MB, peak
    skipped = [w for w in rec["warnings"] if w.startswith("fit not checked")]
    assert bool(skipped) == (classes > 200)  # said, with what it would need
    if skipped:
        assert "1,000 states would need 999 simulated" in skipped[0] and "GiB" in skipped[0]


def test_a_few_labels_with_a_large_maximum(tmp_path):
    rec, peak = _run(tmp_path, np.array([0, 19999, 5, 7, 3]), "--paper", "cifar10-c")
    assert rec["methods"] and peak < LIMIT_MB, peak
