"""Command-line overrides (``key=value`` after the config) of ``unitta sweep``, ``tune`` and ``select``: checked by
the config's schema, one line and exit 2 before any cell, recorded in the output's config copy and manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from unitta.schema import ConfigError
from unitta.schema.overrides import apply_overrides
from unitta.select.run import main as select_main
from unitta.sweep import main as sweep_main
from unitta.sweep.config import load_config
from unitta.tune import main as tune_main

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "sweeps" / "quick.yaml"


def test_values_are_yaml_and_dotted_keys_reach_nested_mappings():
    data = {"name": "q", "resources": {"num_cpus": 1}, "methods": ["test"]}
    got = apply_overrides(data, ["methods=[test, {tent: {lr: 1e-3}}]", "resources.num_gpus=0.5", "n_per_domain=100",
                                 "tracking.mlflow.experiment=x", "output=results/q2", "seeds=[1,2]", "seeds=[3]"])
    assert got["methods"] == ["test", {"tent": {"lr": 1e-3}}]  # YAML 1.2 float, as in a file
    assert got["resources"] == {"num_cpus": 1, "num_gpus": 0.5}
    assert got["tracking"] == {"mlflow": {"experiment": "x"}} and got["output"] == "results/q2"
    assert got["n_per_domain"] == 100 and got["seeds"] == [3]  # the last of a key given twice
    assert data == {"name": "q", "resources": {"num_cpus": 1}, "methods": ["test"]}  # the file's mapping untouched


def test_the_config_has_the_overridden_values():
    cfg = load_config(QUICK, ["methods=[test,bn]", "settings=[i111]", "n_per_domain=100", "resources.num_cpus=2"])
    assert [m.name for m in cfg.methods] == ["test", "bn"] and cfg.settings == ["i111"]
    assert cfg.n_per_domain == 100 and cfg.resources.num_cpus == 2 and cfg.resources.num_gpus == 0
    assert cfg.overrides == ("methods=[test,bn]", "settings=[i111]", "n_per_domain=100", "resources.num_cpus=2")
    assert len(cfg.cells()) == 2


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("methds=[test]", "unknown key 'methds' (did you mean 'methods'?)"),
        ("n_per_domain=many", "n_per_domain"),
        ("resources.num_gpus=-1", "resources.num_gpus: must be >= 0"),
        ("resources.gpus=1", "unknown key 'gpus'"),
        ("methods=[tset]", "tset"),
        ("n_per_domain", "override 'n_per_domain': expected key=value"),
        ("=3", "expected key=value"),
        ("resources..num_cpus=1", "expected key=value"),
        ("methods=[test", "not valid YAML"),
        ("name.first=x", "name is 'quick', not a mapping"),
    ],
)
def test_a_bad_override_is_one_line_exit_2_before_any_cell(override, named, tmp_path, capsys):
    out = tmp_path / "out"
    code = sweep_main([str(QUICK), override, "--local", "--output", str(out), "--no-preflight"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert named in err and err.startswith("error: "), err
    assert not out.exists()  # nothing written


def test_tune_and_select_take_overrides_and_refuse_bad_ones(capsys):
    assert tune_main([str(ROOT / "sweeps/tune_factors.yaml"), "methods=[test]", "cell.n_per_domain=100",
                      "space.domain_beta=[1.0,5.0]", "--dry-run", "--no-preflight"]) == 0
    listed = capsys.readouterr().out
    assert "fmnist-c__test__nunu__" in listed and "fmnist-c__bn__" not in listed
    assert select_main([str(ROOT / "sweeps/select_quick.yaml"), "settings=[n111]", "cell.seed=7", "--dry-run",
                        "--no-preflight"]) == 0
    listed = capsys.readouterr().out
    assert "seed=7" in listed and "nu11" not in listed
    for main, config in ((tune_main, "tune_factors.yaml"), (select_main, "select_quick.yaml")):
        assert main([str(ROOT / "sweeps" / config), "cell.sede=7", "--dry-run"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "with cell.sede=7" in err and "'sede'" in err, err


def test_overrides_go_anywhere_among_the_flags_and_into_the_config_copy(tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(QUICK), "methods=[test]", "--local", "settings=[i111]", "n_per_domain=20", "S=2", "--no-progress",
            f"output={out}", "--no-preflight"]
    assert sweep_main(argv) == 0
    capsys.readouterr()
    copy = (out / "sweep.yaml").read_text()
    assert copy.startswith("# override: methods=[test]\n# override: settings=[i111]\n")
    values = yaml.safe_load(copy)
    assert values["methods"] == [{"name": "test", "overrides": {}}] and values["n_per_domain"] == 20
    run = json.loads((out / "manifest.json").read_text())["runs"][-1]
    assert run["overrides"] == ["methods=[test]", "settings=[i111]", "n_per_domain=20", "S=2", f"output={out}"]
    # other overrides into the same folder: another config, as an edited file would be (its cells added)
    assert sweep_main([str(QUICK), "methods=[test,bn]", "settings=[i111]", "n_per_domain=20", "S=2", "--local",
                       "--no-progress", "--output", str(out), "--no-preflight"]) == 0
    assert "1 already done" in capsys.readouterr().out
    assert "# override: methods=[test,bn]" in (out / "sweep.yaml").read_text()


def test_help_shows_the_syntax(capsys):
    with pytest.raises(SystemExit):
        sweep_main(["--help"])
    text = capsys.readouterr().out
    assert "KEY=VALUE" in text and "resources.num_gpus=1" in text and "methods=[test,bn]" in text


def test_a_config_error_names_the_overrides():
    with pytest.raises(ConfigError, match=r"quick.yaml with S=0: "):
        load_config(QUICK, ["S=0"])
