"""Preflight (unitta/run/checks.py on unitta/evaluate/input_checks.py): --dry-run reports a missing source split for methods that need source data
(needs_source), stays fast on the paper's grid and lists the cells before its checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import unitta.evaluate.input_checks as input_checks
from unitta.data import fashion_mnist
from unitta.data.source import source_problem
from unitta.run.checks import problems
from unitta.sweep import main
from unitta.sweep.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]

# A real method plugin: it needs labelled source images and uses them (the mean source image is
# subtracted from every test batch), so it cannot start without them.
PLUGIN = '''
from dataclasses import dataclass

import torch

from unitta.methods import TTAMethod, register_method


@register_method("source_centering_probe")
class SourceCentering(TTAMethod):
    """Shift test images by the source images' mean (a probe method for the preflight tests)."""

    needs_source = True

    @dataclass(frozen=True)
    class Config:
        pass

    def setup(self) -> None:
        images = torch.stack([self.source[i][0] for i in range(min(len(self.source), 64))])
        self.shift = images.mean(dim=0) - 0.5

    def forward(self, x):
        with torch.no_grad():
            return self.model(x - self.shift)
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugin") / "source_centering_probe.py"
    path.write_text(PLUGIN)
    return path


def _config(tmp_path: Path, plugin: Path, **change) -> Path:
    data = {
        "name": "t",
        "datasets": ["fmnist-c"],
        "methods": ["test", "source_centering_probe"],
        "settings": ["i111"],
        "n_per_domain": 20,
        "plugins": [str(plugin)],
        "resources": {"num_cpus": 1, "num_gpus": 0},
        **change,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def no_fashion_mnist(monkeypatch, tmp_path) -> None:
    """Hide every Fashion-MNIST copy: the Debian folder, FASHION_MNIST_DIR and the cache are empty folders."""
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "no_debian")
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    monkeypatch.setenv("UNITTA_DATA", str(tmp_path / "no_cache"))


def test_missing_fashion_mnist_train_is_reported_by_dry_run(tmp_path, plugin, no_fashion_mnist, capsys) -> None:
    out = tmp_path / "out"
    assert main([str(_config(tmp_path, plugin)), "--output", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "error: 1 problem(s) found before running:"
    line = err[1]
    assert "source data for fmnist-c (the Fashion-MNIST train files)" in line
    assert "apt-get install dataset-fashion-mnist" in line and line.endswith("(needed by source_centering_probe)")
    assert not out.exists()


def test_methods_without_needs_source_do_not_ask_for_it(tmp_path, plugin, no_fashion_mnist, capsys) -> None:
    path = _config(tmp_path, plugin, methods=["test", "bn"])
    assert main([str(path), "--output", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "source data" not in capsys.readouterr().err


def test_cifar_source_folder_is_checked_in_data_dir(tmp_path, plugin, capsys) -> None:
    data_dir = tmp_path / "data"
    path = _config(tmp_path, plugin, datasets=["cifar10-c"], n_per_domain=None, data_dir=str(data_dir))
    assert main([str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    expected = f"source data for cifar10-c not found: expected {data_dir / 'cifar-10-batches-py'}"
    assert expected in err and "(needed by source_centering_probe)" in err
    (data_dir / "cifar-10-batches-py").mkdir(parents=True)
    assert main([str(path), "--output", str(tmp_path / "out")]) == 2  # CIFAR-10-C itself is still missing
    err = capsys.readouterr().err
    assert "source data" not in err and "CIFAR-10-C lacks" in err


def test_source_problem_agrees_with_load_source(tmp_path, no_fashion_mnist) -> None:
    from unitta.data.source import load_source

    assert "Fashion-MNIST not found" in source_problem("fmnist-c")
    with pytest.raises(FileNotFoundError):
        load_source("fmnist-c")
    assert source_problem("imagenet-c", tmp_path).startswith("source data for imagenet-c not found: expected ")
    assert source_problem("mnist").startswith("mnist: no source split is known")


def test_present_fashion_mnist_passes(tmp_path, plugin, capsys) -> None:
    if fashion_mnist.find_split("train") is None:
        pytest.skip("Fashion-MNIST train files are not installed on this machine")
    assert source_problem("fmnist-c") is None
    assert main([str(_config(tmp_path, plugin)), "--output", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "source_centering_probe" in capsys.readouterr().out


def test_the_paper_grid_at_default_factors_samples_no_stream(monkeypatch):
    asked = []
    real = input_checks.infeasibility
    monkeypatch.setattr(input_checks, "infeasibility", lambda cell, d, k: asked.append(cell) or real(cell, d, k))
    cells = load_config(ROOT / "sweeps" / "full_grid.yaml").cells()
    assert len(cells) > 1000
    problems(cells, num_gpus=0.5)
    assert asked == []  # the official sampler at the reference's own factors: nothing it could refuse


def test_factors_and_the_exact_sampler_are_still_checked_once_per_setting():
    base = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": ["nui1"], "seeds": [1, 2]}
    official = parse_config({**base, "factors": {"domain_alpha": 0.01}}).cells()
    assert any("domain_alpha" in p or "alpha" in p for p in problems(official))
    exact = parse_config({**base, "sampler": "exact", "factors": {"domain_alpha": 0.5, "domain_beta": 5.0}}).cells()
    assert problems(exact)  # Cor. 1: alpha_1 = 0.5 with beta = 5 over 15 domains is infeasible


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
