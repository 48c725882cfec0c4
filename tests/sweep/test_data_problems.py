"""A damaged or unusable dataset cache stops a sweep with one line naming the file and the fix, exit 2,
before any cell runs (docs/results.md, "Before the first cell")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.local_http import run_unprivileged
from unitta.data import prepare_fmnist_c
from unitta.sweep import main


def test_a_damaged_fashion_mnist_c_cache_is_one_line_and_exit_2(tmp_path, capsys):
    folder = prepare_fmnist_c(tmp_path / "data", n_per_domain=20, progress=False)
    damaged = folder / "fog.npy"
    damaged.write_bytes(damaged.read_bytes()[:1000])  # truncated, as by a full disk or an interrupted copy
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "d",
                "datasets": ["fmnist-c"],
                "methods": ["test"],
                "settings": ["i111"],
                "n_per_domain": 20,
                "S": 5,
                "data_dir": str(tmp_path / "data"),
            }
        )
    )
    out = tmp_path / "out"
    assert main([str(config), "--output", str(out), "--local", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: fmnist-c: {damaged}: contents differ"), err
    assert f"prepare fmnist-c --data-dir {tmp_path / 'data'} --n-per-domain 20" in err[0]
    assert not out.exists()


def test_a_subset_missing_from_a_read_only_cache_is_one_line_and_exit_2(tmp_path):
    data = tmp_path / "data"
    prepare_fmnist_c(data, n_per_domain=20, corruptions=["fog"], progress=False)  # another subset is there
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "d",
                "datasets": ["fmnist-c"],
                "methods": ["test"],
                "settings": ["i111"],
                "n_per_domain": 30,
                "S": 5,
                "data_dir": str(data),
            }
        )
    )
    paths = [data, *data.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        root = Path(__file__).resolve().parents[2]
        result = run_unprivileged(
            ["-m", "unitta.sweep", str(config), "--output", str(tmp_path / "out"), "--local", "--no-progress"],
            {"PYTHONPATH": str(root)},
        )
        if result is None:
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)
    err = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert err[-1].startswith(f"error: fmnist-c: cannot write the Fashion-MNIST-C cache {data / 'FashionMNIST-C-n30'}")
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
