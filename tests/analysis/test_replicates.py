"""Nothing averaged that should not be: rows that differ in any coordinate but the seed are never one cell.

One real result folder holds the same small cells (tent and test on nu11, Fashion-MNIST-C, 40 images per domain)
run online with two seeds, with ``protocol: realtime``, with ``forgetting: true``, and with other weights (a
perturbed copy of the embedded checkpoint): every analysis path must keep them apart (unitta/results/replicates.py).
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
import torch

from analysis import heatmaps
from analysis.common import AnalysisError, load_dirs, split_rows, sweep_panels
from analysis.tables import cell_status
from unitta.cell import PLACEMENT_FIELDS, Cell
from unitta.models import zoo
from unitta.recommend.inputs import UsageError, benchmark_table
from unitta.results import SCHEMA
from unitta.results.replicates import S_CELL, fixed_keys, replicate_keys
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

BASE = {"datasets": ["fmnist-c"], "methods": ["tent", "test"], "settings": ["nu11"], "n_per_domain": 40, "S": 4,
        "resources": {"num_cpus": 1, "num_gpus": 0}}


def _run(out, name, **extra):
    cfg = parse_config({**BASE, "name": name, "seeds": [425], **extra})
    assert run_sweep(cfg, out, local=True, progress=False, log=lambda _: None).n_failed == 0


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed") / "out"
    _run(out, "online", seeds=[425, 426])
    _run(out, "realtime", protocol="realtime")
    _run(out, "forgetting", forgetting=True)
    ckpt = tmp_path_factory.mktemp("weights")
    state = torch.load(zoo.EMBEDDED_CHECKPOINT, weights_only=True)
    key = next(k for k in state if k.endswith("weight") and state[k].ndim == 2)  # the classifier
    state[key] = state[key] * 0.5
    torch.save(state, ckpt / "resnet20_fmnist.pt")
    with pytest.MonkeyPatch.context() as mp:  # what a user sees after replacing the checkpoint file
        mp.setattr(zoo, "EMBEDDED_DIR", ckpt)
        _run(out, "new_weights", methods=["tent"], seeds=[425, 426])
    return out


def test_keys_cover_every_identity_field():
    """A field added to Cell is grouped by without anyone remembering: every identity entry but the seed is a key,
    and every key is a column of the result schema."""
    keys = set(replicate_keys())
    assert "seed" not in keys and not keys & set(PLACEMENT_FIELDS)
    cell = Cell(method="tent", protocol="realtime", cost="measured", forgetting=True, factors={"class_beta": 2.0})
    renamed = {"factors": "factor_overrides", "cost": "realtime_cost", "weights": "model_weights", "S": S_CELL}
    assert {renamed.get(k, k) for k in cell.identity()} - {"seed"} <= keys
    fields = {f.name for f in dataclasses.fields(Cell)} - set(PLACEMENT_FIELDS) - {"seed"}
    assert {renamed.get(k, k) for k in fields} <= keys
    assert keys <= {*SCHEMA.names, S_CELL}


def test_the_default_cap_that_follows_the_setting_is_one_coordinate():
    """ImageNet-C's default S is 100, 50 or 10 by setting (the row holds the cap used): one panel; an explicit
    S is its own."""
    rows = [{"cell_id": f"c{i}", "dataset": "imagenet-c", "model": "Standard_R50", "method": "bn", "setting": st,
             "sampler": "official", "S": cap, "seed": 1, "status": "ok", "error": 50.0 + i}
            for i, (st, cap) in enumerate([("n1n1", 100), ("n1i1", 50), ("i111", 10), ("i111", 5)])]
    panels = sweep_panels(pl.DataFrame(rows))
    assert sorted(p.rows.height for p in panels) == [1, 3]
    assert any("S_cell=5" in p.caption for p in panels)


def test_cost_does_not_change_an_online_cells_id():
    assert Cell(method="tent", cost="measured").cell_id() == Cell(method="tent").cell_id()
    assert (Cell(method="tent", protocol="realtime", cost="measured").cell_id()
            != Cell(method="tent", protocol="realtime").cell_id())
    # ids of existing folders stay (values computed before this change)
    assert Cell(method="tent", setting="nu11").cell_id() == "fmnist-c__tent__nu11__e15d4f85681e68f0"
    assert Cell(method="bn", protocol="realtime", cost="measured", n_per_domain=40).cell_id() == \
        "fmnist-c__bn__i111__f3962f7f6fff8aa5"


def test_panels_hold_one_cell_per_method_and_setting_but_for_the_seed(mixed):
    df = load_dirs([mixed])
    assert df.height == 10
    panels = sweep_panels(split_rows(df)[0])
    assert len(panels) == 4  # online, realtime, forgetting, other weights
    for panel in panels:
        rows = panel.rows
        keys = fixed_keys(rows, ("setting", "method_label"))
        per_cell = rows.group_by("method_label", "setting").agg(
            *[pl.col(k).cast(pl.String).n_unique().alias(k) for k in keys], pl.col("seed").n_unique().alias("seeds"),
            pl.len().alias("n"))
        assert (per_cell.select(keys).to_numpy() == 1).all(), panel.caption
        assert (per_cell["seeds"] == per_cell["n"]).all()
        assert cell_status(rows)["status"].to_list() == ["ok"] * cell_status(rows).height  # none 'partial'
    captions = " | ".join(p.caption for p in panels)
    assert "protocol=realtime" in captions and "forgetting=True" in captions and "model_weights=" in captions


def test_a_value_is_its_own_rows_mean(mixed):
    df = load_dirs([mixed])
    tent = df.filter((pl.col("method") == "tent") & (pl.col("status") == "ok"))
    for panel in sweep_panels(df):
        mine = panel.rows.filter(pl.col("method") == "tent")
        cells = cell_status(panel.rows).filter(pl.col("method_label") == "tent")
        assert cells["error"][0] == pytest.approx(mine["error"].mean())
        assert (cells["ci"][0] is None) == (mine.height == 1)  # a ± only over seeds
    assert tent["error"].n_unique() > 2  # the probe's case: the mixed mean would differ from every panel's


def test_where_selects_one_value(mixed, tmp_path, capsys):
    out = tmp_path / "rt"
    assert heatmaps.main([str(mixed), "--out", str(out), "--where", "protocol=realtime"]) == 0
    tables = sorted(out.glob("table_*.md"))
    assert [t.name for t in tables] == ["table_fmnist-c.md"]
    row = load_dirs([mixed], where=["protocol=realtime", "method=tent"])
    assert row.height == 1 and f"{row['error'][0]:.1f}" in tables[0].read_text()
    assert load_dirs([mixed], where=["forgetting=true"]).height == 2
    assert heatmaps.main([str(mixed), "--out", str(tmp_path / "x"), "--where", "protocol=offline"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "online" in err and "realtime" in err
    with pytest.raises(AnalysisError, match="no such result column"):
        load_dirs([mixed], where=["protocl=online"])


def test_recommend_refuses_mixed_rows_and_takes_where(mixed):
    with pytest.raises(UsageError, match=r"--where"):
        benchmark_table(results=[mixed])
    weights = load_dirs([mixed], where=["protocol=online", "forgetting=false"])["model_weights"].unique().to_list()
    table, _ = benchmark_table(results=[mixed], where=["protocol=online", "forgetting=false",
                                                      f"model_weights={weights[0]}"])
    assert table.height == 2 if weights[0] == zoo.REFERENCE_WEIGHTS[("fmnist-c", "resnet20")] else table.height == 1
    table, _ = benchmark_table(results=[mixed], where=["protocol=realtime"])
    assert set(table["basis"]) == {"stream sampling only"} and set(table["n_runs"]) == {1}
