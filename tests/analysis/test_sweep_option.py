"""``--sweep NAME`` in the analysis scripts: only the cells of one sweep's grid of a shared result directory."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from analysis import compare_paper, heatmaps, report
from analysis.common import AnalysisError, load_dirs
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config


@pytest.fixture(scope="module")
def two_sweeps(seeded_dir, tmp_path_factory):
    """The seeded directory plus a second, smaller sweep 'subset' that reuses 2 of its 18 cells."""
    out = tmp_path_factory.mktemp("two_sweeps") / "out"
    shutil.copytree(seeded_dir, out)
    cfg = parse_config({"name": "subset", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111", "n111"],
                        "n_per_domain": 40, "S": 4, "seeds": [425], "resources": {"num_cpus": 1, "num_gpus": 0}})
    outcome = run_sweep(cfg, out, local=True, progress=False, log=lambda _: None)
    assert outcome.n_failed == 0
    return out


def test_load_dirs_selects_the_sweeps_cells(two_sweeps):
    everything = load_dirs([two_sweeps])
    subset = load_dirs([two_sweeps], sweep="subset")
    assert everything.height == 18 and subset.height == 2
    assert set(subset["method"]) == {"test"} and set(subset["setting"]) == {"i111", "n111"}
    assert load_dirs([two_sweeps], sweep="tiny_seeds").height == 18
    with pytest.raises(AnalysisError, match=r"--sweep subsett: .*subset"):  # names the sweeps recorded there
        load_dirs([two_sweeps], sweep="subsett")


def test_scripts_take_sweep(two_sweeps, tmp_path, capsys):
    assert heatmaps.main([str(two_sweeps), "--out", str(tmp_path / "h"), "--sweep", "subset"]) == 0
    table = next((tmp_path / "h").glob("table_*.md")).read_text()
    assert "| test |" in table and "| tent |" not in table and "| bn |" not in table
    assert heatmaps.main([str(two_sweeps), "--out", str(tmp_path / "bad"), "--sweep", "nope"]) == 2
    assert "--sweep nope" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert compare_paper.main([str(two_sweeps), "--out", str(tmp_path / "c"), "--sweep", "subset",
                               "--paper-dataset", "cifar10-c"]) == 0
    compared = next((tmp_path / "c").glob("compare_*.csv")).read_text()
    assert "tent" not in compared
    assert report.main([str(two_sweeps), "--out", str(tmp_path / "r"), "--sweep", "subset"]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert ">tent<" not in page and "| tent |" not in page


def test_recommend_takes_sweep(two_sweeps, tmp_path, capsys):
    from unitta import recommend

    table, source = recommend.benchmark_table(results=[two_sweeps], sweep="subset")
    assert set(table["method"]) == {"test"} and "sweep subset" in source
    labels = tmp_path / "labels.npy"
    np.save(labels, np.random.default_rng(0).integers(0, 10, 600))
    assert recommend.main(["--classes", str(labels), "--results", str(two_sweeps), "--sweep", "nope"]) == 2
    assert "--sweep nope" in capsys.readouterr().err


def test_sweep_over_several_folders_needs_only_one_to_have_run_it(two_sweeps, seeded_dir, tmp_path, capsys):
    """``--sweep subset`` over a folder that ran it and one that did not: that sweep's rows, the other folder named."""
    rows = load_dirs([seeded_dir, two_sweeps], sweep="subset")
    assert rows.height == 2 and set(rows["source"]) == {str(two_sweeps)}
    assert f"note: {seeded_dir}: --sweep subset" in capsys.readouterr().err
    assert heatmaps.main([str(seeded_dir), str(two_sweeps), "--out", str(tmp_path / "h"), "--sweep", "subset"]) == 0
    with pytest.raises(AnalysisError, match="--sweep nope"):  # no folder ran it: still an error
        load_dirs([seeded_dir, two_sweeps], sweep="nope")
