"""Preflight (unitta/preflight.py) stays fast on the paper's grid; `--dry-run` lists the cells before its checks."""

from __future__ import annotations

from pathlib import Path

import yaml

import unitta.preflight as preflight
from unitta.config import load_config, parse_config
from unitta.sweep import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_paper_grid_at_default_factors_samples_no_stream(monkeypatch):
    asked = []
    real = preflight.infeasibility
    monkeypatch.setattr(preflight, "infeasibility", lambda cell, d, k: asked.append(cell) or real(cell, d, k))
    cells = load_config(ROOT / "sweeps" / "full_grid.yaml").cells()
    assert len(cells) > 1000
    preflight.problems(cells, num_gpus=0.5)
    assert asked == []  # the official sampler at the reference's own factors: nothing it could refuse


def test_factors_and_the_exact_sampler_are_still_checked_once_per_setting():
    base = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": ["nui1"], "seeds": [1, 2]}
    official = parse_config({**base, "factors": {"domain_alpha": 0.01}}).cells()
    assert any("domain_alpha" in p or "alpha" in p for p in preflight.problems(official))
    exact = parse_config({**base, "sampler": "exact", "factors": {"domain_alpha": 0.5, "domain_beta": 5.0}}).cells()
    assert preflight.problems(exact)  # Cor. 1: alpha_1 = 0.5 with beta = 5 over 15 domains is infeasible


def test_dry_run_lists_the_cells_before_the_problems(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "datasets": ["cifar10-c"],
                "methods": ["test", "bn"],
                "settings": ["i111"],
                "data_dir": str(tmp_path / "none"),
                "checkpoint_dir": str(tmp_path),
            }
        )
    )
    assert main([str(path), "--output", str(tmp_path / "out"), "--dry-run"]) == 2
    captured = capsys.readouterr()
    listed = captured.out.splitlines()
    assert listed[0].startswith("t: 2 cells, 0 already done") and len(listed) == 3
    assert captured.err.startswith("error: 2 problem(s)") and "CIFAR-10-C lacks" in captured.err
    assert main([str(path), "--output", str(tmp_path / "out"), "--dry-run", "--no-preflight"]) == 0
    assert not (tmp_path / "out").exists()
