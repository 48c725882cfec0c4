"""One cell schema (unitta.cell.spec): a bad cell value is the same one-line exit-2 error in a sweep and a tune."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from unitta import sweep, tune
from unitta.cell.spec import CellSpec

SWEEP = {"name": "s", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"]}
TUNE = {"name": "t", "cell": {"dataset": "fmnist-c"}, "methods": ["test"], "space": {"domain_alpha": [0.9]}}


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("severity", 9, "severity: expected a whole number in 1 .. 5, got 9"),
        ("factors", {"domain_alpah": 0.9}, "factors: unknown factor 'domain_alpah' (did you mean 'domain_alpha'?)"),
        ("precision", "fp8", "precision: unknown precision 'fp8'; known: fp32, tf32, bf16"),
        ("n_per_domain", 0, "n_per_domain: expected a whole number >= 1, got 0"),
        ("length", 100, "length: only the exact and ccc samplers take a stream length"),
    ],
)
def test_a_bad_cell_value_is_the_same_error_in_sweep_and_tune(tmp_path: Path, capsys, field, value, problem) -> None:
    lines = []
    for name, module, cfg in (
        ("s", sweep, {**SWEEP, field: value}),
        ("t", tune, {**TUNE, "cell": {**TUNE["cell"], field: value}}),
    ):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert module.main([str(path), "--output", str(tmp_path / name), "--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        lines.append(err[0])
        assert not (tmp_path / name).exists()
    # same problem text; the tune's key sits under 'cell'
    assert problem in lines[0] and problem in lines[1], lines
    assert lines[0].split("s.yaml: ")[1] == re.sub(r"^cell(\.|: )", "", lines[1].split("t.yaml: ")[1])


def test_cell_spec_builds_the_cell_it_describes() -> None:
    spec = CellSpec(dataset="fmnist-c", setting="nui1", factors={"class_beta": 3.0}, S=7, seed=3)
    cell = spec.cell(method="bn")
    assert (cell.method, cell.setting, cell.factors, cell.S, cell.seed) == ("bn", "nui1", {"class_beta": 3.0}, 7, 3)
    with pytest.raises(ValueError, match="'method' is set by 'methods'"):
        CellSpec(method="bn")
