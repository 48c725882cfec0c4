"""Bad selection configs: one line on stderr naming the problem, exit code 2, nothing created."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from unitta.select.run import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "sweeps" / "select_example.yaml").read_text())


def _with(**changes) -> dict:
    cfg = copy.deepcopy(EXAMPLE)
    for key, value in changes.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    return cfg


BAD = {
    "unknown method": (_with(methods=["tentt", "sar"], space="declared"), "did you mean 'tent'"),
    "unknown hyper-parameter": (_with(space={"tent": {"lrr": [0.001]}, "sar": {"lr": [0.001]}}), "did you mean 'lr'"),
    "outside the Config": (_with(space={"tent": {"lr": [-1.0]}, "sar": {"lr": [0.001]}}), "tent.lr"),
    "empty space": (_with(space={"tent": {}, "sar": {"lr": [0.001]}}), "empty space"),
    "empty values": (_with(space={"tent": {"lr": []}, "sar": {"lr": [0.001]}}), "empty list"),
    "no criteria": (_with(criteria=None), "needs 'criteria'"),
    "unknown criterion": (_with(criteria=["entropie"]), "did you mean 'entropy'"),
    "held-out overlaps the test": (
        _with(validation={"corruptions": ["fog", "spatter"]}), "fog also test corruption"),
    "asha without holdout": (
        _with(protocols=["default", "oracle"], criteria=None, search={"scheduler": "asha"}), "add 'holdout'"),
    "unknown protocol": (_with(protocols=["default", "orcale"]), "protocols"),
    "unknown validation corruption": (_with(validation={"corruptions": ["foggy", "spatter"]}), "'foggy'"),
    "one validation corruption": (_with(validation={"corruptions": ["spatter"]}), "at least 2"),
    "holdout on an image folder": (
        _with(cell={"dataset": "folder", "data_dir": "imgs"}), "drop 'holdout'"),
    "a method twice": (_with(methods=["tent", "tent"], space="declared"), "twice"),
    "a grid value twice": (_with(space={"tent": {"lr": [0.001, 0.001]}, "sar": {"lr": [0.001]}}), "twice"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_one_line_exit_2_nothing_created(case: str, tmp_path: Path, capsys) -> None:
    cfg, expected = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    assert main([str(path), "--output", str(out), "--local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not out.exists()


def test_example_config_parses_as_written() -> None:
    from unitta.data import HELD_OUT_CORRUPTIONS
    from unitta.select import load_select_config

    cfg = load_select_config(ROOT / "sweeps" / "select_example.yaml")
    assert cfg.protocols == ["default", "oracle", "holdout", "unsupervised"] and cfg.criteria == ["entropy"]
    assert cfg.validation.names() == tuple(HELD_OUT_CORRUPTIONS) and cfg.setting_list == ["i111", "nu11"]


def test_dry_run_checks_the_validation_corruptions(tmp_path: Path, capsys) -> None:
    """Checked before anything runs, --dry-run included: a misspelt validation corruption, one exit 2 line."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with(validation={"corruptions": ["foggy", "spatter"]})))
    assert main([str(path), "--output", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'foggy'" in err, err
