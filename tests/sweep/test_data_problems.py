"""A damaged or unusable dataset cache stops a sweep with one line naming the file and the fix, exit 2,
before any cell runs (docs/results.md, "Before the first cell")."""

from __future__ import annotations

import yaml

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
