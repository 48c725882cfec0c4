"""Every float hyper-parameter of every method is a finite number (issue 52 item 7): ``inf`` / ``nan`` in a config's
``methods:`` is one line at ``--dry-run``, exit 2, for every registered method, never a failure inside the cell and
never ``Infinity`` in the stored ``method_kwargs`` (not JSON)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from unitta.methods import list_methods, method_class
from unitta.methods.parts.registry import build_config, resolved_hints
from unitta.sweep import main as sweep_main


def _float_fields(name: str) -> list[str]:
    hints = resolved_hints(method_class(name).Config)
    return [f.name for f in dataclasses.fields(method_class(name).Config) if hints[f.name] in (float, float | None)]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_hyper_parameter_of_every_method_must_be_finite(value):
    checked = 0
    for name in list_methods():
        for key in _float_fields(name):
            with pytest.raises(ValueError, match=rf"method '{name}': {key}=.* is not a finite number"):
                build_config(method_class(name), **{key: value})
            checked += 1
    assert checked > 20


def test_an_infinite_lr_is_exit_2_at_dry_run(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("name: t\ndatasets: [fmnist-c]\nsettings: [i111]\nmethods: [{tent: {lr: .inf}}]\n")
    assert sweep_main([str(config), "--dry-run", "--output", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "lr=inf is not a finite number" in line
    assert yaml.safe_load("x: .inf")["x"] == math.inf  # YAML's own spelling, the one a user writes
