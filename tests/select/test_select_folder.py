"""``unitta select`` on an image folder (docs/own_data.md, docs/selection.md): without the holdout protocol a folder
selection runs; only the holdout protocol builds validation cells (issue 52, item 1)."""

from __future__ import annotations

import pytest

from unitta.data.export import export_fmnist_c
from unitta.run import RunOptions
from unitta.select import parse_select_config, run_select

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root, _ = export_fmnist_c(tmp_path_factory.mktemp("own") / "images", ["fog", "snow"], n_per_domain=10)
    return root


def test_a_folder_selection_with_default_oracle_unsupervised_runs(folder, tmp_path) -> None:
    raw = {"name": "folder_select", "settings": ["i111"], "methods": ["tent"],
           "cell": {"dataset": "folder", "data_dir": str(folder), "batch_size": 10, "seed": 1},
           "space": {"tent": {"lr": [0.0001, 0.001]}}, "search": {"algorithm": "grid"},
           "protocols": ["default", "oracle", "unsupervised"], "criteria": ["entropy"]}
    outcome, selection = run_select(parse_select_config(raw), tmp_path / "out", RunOptions(local=True, progress=False))
    assert outcome.n_failed == 0
    assert sorted(selection["protocol"].to_list()) == ["default", "oracle", "unsupervised"]
