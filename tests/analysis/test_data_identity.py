"""Two image folders in one output are two datasets, never seeds of one (issue: fog/snow exported at severity 5
and at severity 1, TEST and BN on each, one ``output:``): the rows carry the folder's digest as ``data_digest``,
the panels and the long-horizon streams are split by it, and each folder's rows are compared with its own TEST row."""

from __future__ import annotations

import polars as pl
import pytest

from analysis.common import load_dirs, sweep_panels
from analysis.long_horizon import stream_tables
from unitta.data.export import export_fmnist_c
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def two_folders_one_output(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_folders")
    out = root / "out"
    for name, severity in (("imgA", 5), ("imgC", 1)):
        folder, _ = export_fmnist_c(root / name, ["fog", "snow"], n_per_domain=20, severity=severity)
        cfg = parse_config({"name": name, "datasets": ["folder"], "data_dir": str(folder), "methods": ["test", "bn"],
                            "sampler": "sorted", "batch_size": 10,
                            "resources": {"num_cpus": 1, "num_gpus": 0}})
        assert run_sweep(cfg, out, local=True, progress=False, log=lambda _: None).n_failed == 0
    return out


def test_each_folder_is_its_own_panel_and_stream(two_folders_one_output):
    df = load_dirs([two_folders_one_output])
    assert df.height == 4 and df["data_digest"].n_unique() == 2 and df["data_digest"].null_count() == 0
    panels = sweep_panels(df)
    assert len(panels) == 2
    for panel in panels:
        assert panel.rows["data_digest"].n_unique() == 1 and panel.rows.height == 2
        assert "data_digest=" in panel.caption
    streams = stream_tables(df)
    assert len(streams) == 2
    for name, source, rows in streams:
        assert [r["data_digest"] for r in rows] == [source["data_digest"]]
        assert f"(data {source['data_digest'][:12]})" in name
    errors = df.filter(pl.col("method") == "test").sort("data_digest")["error"].to_list()
    assert errors[0] != errors[1]  # severity 5 and 1: different data, different errors


def test_a_folders_caption_names_its_digest_and_input_size_not_a_severity():
    """An image folder has no severities: its table's caption names what the rows computed on (the folder's digest,
    the input size) instead of the default severity=5; a corrupted dataset's caption keeps its severity."""
    from analysis.common import sweep_panels

    base = {"model": "resnet20", "method": "test", "setting": "i111", "seed": 425, "status": "ok", "error": 50.0,
            "severity": 5, "batch_size": 64, "n_per_domain": 100}
    folder = sweep_panels(pl.DataFrame([{**base, "dataset": "folder", "data_digest": "abcdef0123456789",
                                         "input_size": 64}]))[0]
    assert "severity" not in folder.caption and "data_digest=abcdef012345" in folder.caption
    assert "input_size=64" in folder.caption
    corrupted = sweep_panels(pl.DataFrame([{**base, "dataset": "fmnist-c", "data_digest": None, "input_size": None}]))
    assert "severity=5" in corrupted[0].caption and "input_size" not in corrupted[0].caption
