"""The short-segment warning (``unitta.evaluate.segments``): a continual domain segment of a few batches is named with
the S / n_per_domain that would lengthen it, by the sweep's --dry-run too; nothing for long or non-continual
streams."""

from __future__ import annotations

import re

import pytest
import yaml

from unitta.cell import Cell
from unitta.evaluate.segments import (
    MIN_SEGMENT_BATCHES,
    mean_domain_segment,
    short_segment_warning,
    short_segment_warnings,
)
from unitta.sweep import main

SHORT = dict(dataset="fmnist-c", n_per_domain=200, S=10)


def _suggested(warning: str) -> dict[str, int]:
    return {key: int(value) for key, value in re.findall(r"(S|n_per_domain): (\d+)", warning.split(";")[1])}


def test_n_per_domain_200_s_10_is_warned_with_the_segment_and_the_fix():
    warning = short_segment_warning(Cell(setting="i111", **SHORT))
    # 15 domains x 10 classes x S = 10: 100 images a domain, 1.6 batches of 64
    assert warning is not None and "i111" in warning and "n_per_domain 200, S 10" in warning
    assert "a continual domain segment is 100 images on average, 1.6 batches (fewer than 3)" in warning
    assert "S: 20 (now 10)" in warning


@pytest.mark.parametrize("setting", ["i111", "n111", "nu11", "i11u"])
def test_the_suggested_size_really_lengthens_the_segment(setting):
    warning = short_segment_warning(Cell(setting=setting, **SHORT))
    assert warning is not None
    fix = _suggested(warning)
    longer = Cell(setting=setting, dataset="fmnist-c", S=fix["S"], n_per_domain=fix.get("n_per_domain", 200))
    assert mean_domain_segment(longer) >= MIN_SEGMENT_BATCHES * 64
    assert short_segment_warning(longer) is None


def test_no_warning_where_domains_change_by_design_or_the_stream_is_long():
    assert short_segment_warning(Cell(setting="nuiu", **SHORT)) is None  # i.i.d. domains
    assert short_segment_warning(Cell(setting="i1n1", **SHORT)) is None  # non-i.i.d. domains: the factor decides
    assert short_segment_warning(Cell(setting="i111")) is None  # full length: 10,000 images a domain
    assert mean_domain_segment(Cell(setting="i111", n_per_domain=1000, S=20)) == 200.0


def test_other_samplers_name_their_own_knob():
    exact = short_segment_warning(Cell(setting="i111", sampler="exact", dataset="fmnist-c", length=900))
    assert exact is not None and "length: " in exact and "(now 900)" in exact
    ordered = short_segment_warning(Cell(setting="1111", sampler="sorted", dataset="fmnist-c", n_per_domain=20))
    assert ordered is not None and "n_per_domain: 200 (now 20)" in ordered


def test_one_warning_per_stream_shape():
    cells = [Cell(method=m, setting=s, seed=seed, **SHORT) for m in ("test", "tent") for s in ("i111", "nuiu")
             for seed in (1, 2)]
    assert len(short_segment_warnings(cells)) == 1


def test_dry_run_prints_the_warning(tmp_path, capsys):
    config = {"name": "short", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111", "nuiu"],
              "n_per_domain": 200, "S": 10, "resources": {"num_cpus": 1, "num_gpus": 0}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main([str(path), "--output", str(tmp_path / "out"), "--dry-run", "--no-preflight"]) == 0
    captured = capsys.readouterr()
    warned = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "fmnist-c i111" in warned[0] and "S: 20 (now 10)" in warned[0]
    assert "warning" not in captured.out and not (tmp_path / "out").exists()


def test_a_run_prints_the_warning_after_its_summary(tmp_path, capsys):
    config = {"name": "short", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"],
              "n_per_domain": 20, "S": 2, "resources": {"num_cpus": 1, "num_gpus": 0}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main([str(path), "--output", str(tmp_path / "out"), "--local", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "1 cells run (0 failed)" in captured.out
    assert [line for line in captured.err.splitlines() if line.startswith("warning:")] == [
        short_segment_warning(Cell(setting="i111", n_per_domain=20, S=2))]
