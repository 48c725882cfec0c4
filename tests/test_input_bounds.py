"""Every input that passes validation runs, or validation refuses it in one line (exit 2): numbers finite and in
range, names that fit a file system, YAML aliases bounded; operating-system errors are one line, never "a bug"."""

from __future__ import annotations

import pytest
import yaml

from unitta.schema import ConfigError
from unitta.sweep.config import load_config, parse_config
from unitta.tune.config import parse_tune_config

SWEEP = {"name": "x", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"], "n_per_domain": 20, "S": 2,
         "resources": {"num_cpus": 1, "num_gpus": 0}}
TUNE = {"name": "t", "cell": {"dataset": "fmnist-c"}, "methods": ["test"], "space": {"domain_alpha": [0.5, 0.9]}}


@pytest.mark.parametrize("change, expected", [
    ({"resources": {"num_cpus": float("nan")}}, "resources.num_cpus: Input should be a finite number"),
    ({"resources": {"num_cpus": float("inf")}}, "resources.num_cpus: Input should be a finite number"),
    ({"resources": {"num_gpus": float("inf")}}, "finite"),
    ({"seeds": [10**20]}, "seeds: expected a whole number in 0 .. 4294967295 (numpy's seed range), got 100000000000000000000"),
    ({"seeds": [2**32]}, "numpy's seed range"),
    ({"name": "a" * 300}, "name: must be at most 100 characters"),
    ({"S": 10**11}, "use S <= 66666"),
    ({"sampler": "exact", "S": None, "length": 10**10}, "length=10000000000: more than 10,000,000"),
    ({"sampler": "ccc", "length": 20_000, "n_per_domain": None}, "S: only the official sampler has a per-state cap"),
    ({"rounds": 1_000_000_000}, "rounds=1000000000 x 300 positions"),  # S 2 x 150 (domain, class) states
    ({"sampler": "exact", "S": None, "length": 300, "rounds": 40_000}, "use rounds <= 33333"),
    ({"S": None, "n_per_domain": None, "sampler": "exact", "rounds": 100}, "rounds=100 x 150,000 positions"),
    ({"factors": {"class_beta": float("nan")}}, "factors.class_beta: Input should be a finite number"),
    ({"factor_grid": {"class_beta": [1.0, float("inf")]}}, "finite"),
])
def test_sweep_configs_that_would_crash_later_are_refused(change, expected):
    with pytest.raises(ConfigError, match=None) as err:
        parse_config({**SWEEP, **change})
    text = str(err.value)
    assert expected in text and "\n" not in text


@pytest.mark.parametrize("change, expected", [
    ({"objective": {"metric": "gap", "gap": ["bn", "bn"]}, "methods": []}, "two different methods"),
    ({"methods": ["bn", "bn"]}, "methods: lists a method twice"),
    ({"space": {"domain_beta": [2.0, 2.0]}}, "lists 2.0 twice"),
    ({"space": {"domain_beta": [2.0, float("nan")]}}, "finite"),
    ({"space": {"domain_beta": {"low": 1.0, "high": float("inf")}}}, "finite"),
    ({"cell": {"seed": 10**20}}, "numpy's seed range"),
    ({"cell": {"S": 10**11}}, "use S <= 66666"),
])
def test_tune_configs_that_would_crash_later_are_refused(change, expected):
    with pytest.raises(ConfigError) as err:
        parse_tune_config({**TUNE, **change})
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ["name: bomb", "datasets: [fmnist-c]", "settings: [i111]", "a0: &a0 [test, test, test, test, test, test, "
             "test, test, test, test]"]
    for i in range(1, 6):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("methods: *a5")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="aliases expand to more than 100,000 values"):
        load_config(path)
    ok = tmp_path / "ok.yaml"  # a few aliases stay fine
    ok.write_text("name: ok\ndatasets: [fmnist-c]\nsettings: &s [i111]\nclass_settings_note: *s\nmethods: [test]\n")
    with pytest.raises(ConfigError, match="unknown key 'class_settings_note'"):
        load_config(ok)


def test_streams_cli_bounds_s_length_and_seed(capsys, tmp_path):
    from unitta.streams.__main__ import main

    for argv in (["--S", "100000000000"], ["--sampler", "exact", "--length", "10000000000"], ["--seed", str(2**40)]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "error:" in err and ("10,000,000" in err or "seed range" in err)
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    assert main(["--dataset", "cifar10", "--setting", "i111", "--S", "2", "--plot", str(blocker / "s.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(EEXIST)" in err and str(blocker) in err and "Traceback" not in err


def _sweep_yaml(tmp_path, **change) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, **change}))
    return str(path)


def test_os_errors_of_a_run_are_one_line_exit_4(tmp_path, capsys):
    from unitta.sweep import main

    long_out = tmp_path / ("d" * 300)
    assert main([_sweep_yaml(tmp_path), "--output", str(long_out), "--local", "--no-progress", "--no-preflight"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "File name too long (ENAMETOOLONG)" in err[0] and "Traceback" not in err[0]


def test_cli_weak_spots_are_one_line(tmp_path, capsys):
    from unitta.sweep import main

    dangling = tmp_path / "out"
    dangling.symlink_to(tmp_path / "gone")
    assert main([_sweep_yaml(tmp_path), "--output", str(dangling), "--dry-run", "--no-preflight"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([_sweep_yaml(tmp_path), "--num-cpus", "abc"])
    err = capsys.readouterr().err
    assert "_positive_int" not in err and "expected a whole number >= 1, got 'abc'" in err


def test_dry_run_says_the_output_is_not_writable(tmp_path, capsys):
    """/proc refuses new files to every user, root included (who ignores mode bits): the run would stop there."""
    from unitta.sweep import main

    assert main([_sweep_yaml(tmp_path), "--output", "/proc/unitta_out", "--dry-run", "--no-preflight"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "output /proc/unitta_out is not writable and 1 of 1 cells still have to run" in err[0]


def test_fresh_dry_run_lists_what_fresh_runs(tmp_path, capsys):
    from unitta.sweep import main

    out = tmp_path / "out"
    args = [_sweep_yaml(tmp_path), "--output", str(out), "--local", "--no-progress", "--no-preflight"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--dry-run"]) == 0
    assert "1 already done" in capsys.readouterr().out
    assert main([*args, "--dry-run", "--fresh"]) == 0
    assert "0 already done" in capsys.readouterr().out


class Note:
    """An object a checkpoint may pickle beside its tensors (loading it would import and run code)."""


def test_dry_run_checks_forgetting_data_and_pickled_checkpoints(tmp_path, monkeypatch):
    import torch

    from unitta.cell import Cell
    from unitta.models import zoo
    from unitta.run.checks import problems

    found = problems([Cell(dataset="cifar10-c", forgetting=True, data_dir=str(tmp_path))])
    assert any(p.startswith("forgetting: the clean test images of cifar10-c") for p in found)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    state = torch.load(zoo.EMBEDDED_CHECKPOINT, weights_only=True)
    torch.save({"state_dict": state, "extra": Note()}, folder / "resnet20_fmnist.pt")
    monkeypatch.setattr(zoo, "EMBEDDED_DIR", folder)
    found = problems([Cell(n_per_domain=20)])
    assert any("not a plain state_dict (it pickles tests.test_input_bounds.Note" in p for p in found)
    assert not problems([Cell(n_per_domain=20, trust_checkpoints=True)])


def test_recommend_top_0_is_refused(tmp_path, capsys):
    import numpy as np

    from unitta.recommend import main

    labels = tmp_path / "labels.npy"
    np.save(labels, np.arange(100) % 10)
    assert main(["--classes", str(labels), "--paper", "cifar10-c", "--top", "0"]) == 2
    assert "--top 0: must be >= 1" in capsys.readouterr().err


def test_analysis_of_a_file_names_the_input_not_the_output(tmp_path, capsys):
    from analysis import heatmaps, report

    target = tmp_path / "results.parquet"
    target.write_bytes(b"x")
    assert heatmaps.main([str(target)]) == 2 and report.main([str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("is a file, not a result directory" in line for line in err)


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_is_one_line_naming_the_file(tmp_path):
    from unitta.files import naming, os_error_text

    target = tmp_path / "cells" / "x.parquet"
    with pytest.raises(OSError) as err, naming(target), open("/dev/full", "w") as full:
        full.write("x")
        full.flush()
    assert os_error_text(err.value) == f"{target}: No space left on device (ENOSPC)"


def test_methods_check_with_a_checkpoint_that_pickles_code_is_one_line(tmp_path, monkeypatch, capsys):
    import torch

    from unitta.contract.command import main
    from unitta.models import zoo

    folder = tmp_path / "ckpt"
    folder.mkdir()
    state = torch.load(zoo.EMBEDDED_CHECKPOINT, weights_only=True)
    torch.save({"state_dict": state, "extra": Note()}, folder / "resnet20_fmnist.pt")
    monkeypatch.setattr(zoo, "EMBEDDED_DIR", folder)
    assert main(["check", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a plain state_dict" in err and "Traceback" not in err


def test_an_input_size_no_batch_fits_in_memory_is_refused():
    """Issue 52 weak item: ``input_size: 100000`` was accepted until a MemoryError inside the cell."""
    from unitta.cell import Cell

    with pytest.raises(ValueError, match=r"input_size.*in 8 \.\. 4096, got 100000"):
        Cell(dataset="folder", data_dir="/nowhere", model="torchvision:resnet18", input_size=100000)
    assert Cell(dataset="folder", data_dir="/nowhere", model="torchvision:resnet18", input_size=4096).input_size == 4096
