"""The ``tracking:`` section of sweep, tune and select configs and the ``--track`` flag (docs/tracking.md): mistakes
are one line and exit 2 before any cell; ``cell_run`` turns a result row into the content of a tracker's run."""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from unitta.schema import ConfigError
from unitta.select.config import load_select_config
from unitta.sweep import main as sweep_main
from unitta.sweep.config import parse_config
from unitta.track.cell_run import COORDINATES, cell_run
from unitta.track.command import main as track_main
from unitta.track.destinations import with_flags
from unitta.tune.config import load_tune_config

ROOT = Path(__file__).resolve().parents[2]
SWEEP = {"name": "t", "datasets": ["fmnist-c"], "methods": ["bn"], "settings": ["i111"]}
TRACKING = {"mlflow": {"tracking_uri": "http://127.0.0.1:5000", "experiment": "e"}, "wandb": {"mode": "offline"},
            "tensorboard": {"dir": "tb"}}


def _with_tracking(path: Path, tmp_path: Path, tracking) -> Path:
    data = yaml.safe_load(path.read_text())
    data["tracking"] = tracking
    out = tmp_path / path.name
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize("load, example", [(load_tune_config, "tune_factors.yaml"),
                                           (load_select_config, "select_quick.yaml")])
def test_tune_and_select_configs_take_the_same_section(load, example, tmp_path):
    cfg = load(_with_tracking(ROOT / "sweeps" / example, tmp_path, TRACKING))
    assert cfg.tracking.mlflow.experiment == "e" and cfg.tracking.wandb.mode == "offline"
    with pytest.raises(ConfigError, match=r"tracking\.mlflow: unknown key 'experimnet' \(did you mean 'experiment'"):
        load(_with_tracking(ROOT / "sweeps" / example, tmp_path, {"mlflow": {"tracking_uri": "x", "experimnet": "e"}}))


def test_tracking_does_not_change_the_config_hash():
    assert parse_config({**SWEEP, "tracking": TRACKING}).config_hash() == parse_config(SWEEP).config_hash()


@pytest.mark.parametrize("tracking, words", [
    ({"comet": {}}, "tracking: unknown key 'comet'"),
    ({"mlflow": {"experiment": "e"}}, "tracking.mlflow.tracking_uri: missing"),
    ({"tensorboard": {"logdir": "x"}}, "tracking.tensorboard: unknown key 'logdir'"),
])
def test_a_mistake_in_the_section_is_exit_2_before_any_cell(tracking, words, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({**SWEEP, "tracking": tracking}))
    assert sweep_main([str(config), "--local", "--output", str(tmp_path / "out"), "--no-preflight"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert words in line
    assert not (tmp_path / "out").exists()


def test_a_missing_package_is_a_config_error_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # how Python marks a module that cannot be imported
    with pytest.raises(ConfigError, match=r"tracking\.wandb: the 'wandb' package is not installed: "
                                          r"pip install 'unitta\[wandb\]'"):
        parse_config({**SWEEP, "tracking": {"wandb": {"mode": "offline"}}})
    with pytest.raises(ConfigError, match=r"--track: wandb: the 'wandb' package is not installed"):
        with_flags(None, ["wandb=offline"], print)
    (tmp_path / "r").mkdir()
    assert track_main([str(tmp_path / "r"), "--wandb", "offline"]) == 2
    assert "pip install 'unitta[wandb]'" in capsys.readouterr().err


def test_track_flags_add_to_the_section():
    warned: list[str] = []
    base = parse_config({**SWEEP, "tracking": {"mlflow": {"tracking_uri": "file:/a", "experiment": "kept"}}}).tracking
    merged = with_flags(base, ["mlflow=http://h:5000", "tensorboard=/tb", "wandb=online", "neptune=x", "wandb"],
                        warned.append)
    assert (merged.mlflow.tracking_uri, merged.mlflow.experiment) == ("http://h:5000", "kept")
    assert (merged.tensorboard.dir, merged.wandb.mode) == ("/tb", "online")
    assert len(warned) == 2 and "unknown tracker 'neptune'" in warned[0] and "give wandb=MODE" in warned[1]


def test_track_command_mistakes_are_exit_2(tmp_path, capsys):
    assert track_main([str(tmp_path / "nowhere"), "--tensorboard", str(tmp_path)]) == 2
    assert track_main([str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "no such results folder" in lines[0] and "give a tracker" in lines[1]


def test_a_row_becomes_params_tags_metrics_and_curves():
    at = datetime(2026, 11, 28, tzinfo=UTC)
    row = {"cell_id": "c1", "sweep_name": "s", "status": "ok", "dataset": "fmnist-c", "method": "tent", "seed": 425,
           "setting": "nui1", "delta": None, "git_commit": "abc", "model_weights": "sha", "error": 12.5, "ece": 0.1,
           "n_samples": 100, "forgetting": False, "protocol": "online", "error_curve": [10.0, None, 15.0],
           "round_errors": [12.5], "per_domain": [{"key": 0, "name": "fog_5", "n": 50, "error": 8.0}],
           "domain_errors": [8.0], "error_text": None, "hostname": "h", "worker_pid": 7, "started_at": at,
           "finished_at": at, "tune_objective_value": math.nan}
    run = cell_run(row, "parent")
    assert run.sweep == "parent" and run.name == "fmnist-c/tent/nui1/425"
    assert run.typed_params["seed"] == 425 and run.typed_params["forgetting"] is False
    named = cell_run({**row, "model": "resnet20", "factor_overrides": '{"class_beta": 10.0, "domain_alpha": 0.5}'})
    assert named.name == "fmnist-c/resnet20/tent/nui1/425/class_beta=10,domain_alpha=0.5"
    assert run.tags == {"unitta.cell_id": "c1", "unitta.sweep_name": "s", "unitta.status": "ok",
                        "unitta.git_commit": "abc", "unitta.model_weights": "sha", "unitta.sweep": "parent"}
    assert run.params == {"dataset": "fmnist-c", "method": "tent", "seed": "425", "setting": "nui1",
                          "forgetting": "false", "protocol": "online"}
    assert run.metrics == {"error": 12.5, "ece": 0.1, "n_samples": 100.0, "domain_error/fog_5": 8.0}
    assert run.curves == {"error_curve": [(0, 10.0), (2, 15.0)], "round_error": [(0, 12.5)]}
    assert run.start_ms == run.end_ms == int(at.timestamp() * 1000)
    assert cell_run({**row, "status": "failed"}) is None
    assert {"dataset", "method", "seed", "setting", "sampler", "batch_size"} <= set(COORDINATES)
