"""analysis/long_horizon.py on a real two-round sweep of the embedded Fashion-MNIST-C."""

from __future__ import annotations

import pytest

from analysis.long_horizon import collapse_point, main
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config


def test_the_collapse_point_is_where_the_method_stays_above_the_source():
    source = [40.0, 40.0, 40.0, 40.0, 40.0]
    assert collapse_point([30, 45, 35, 50, 60], source) == 3
    assert collapse_point([50, 50, 50, 50, 50], source) == 0
    assert collapse_point([50, 50, 50, 50, 30], source) is None


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_horizon")
    cfg = parse_config({"name": "lh", "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": ["i111"],
                        "sampler": "exact", "length": 300, "rounds": 2, "curve_points": 6, "n_per_domain": 20,
                        "batch_size": 32, "resources": {"num_cpus": 1, "num_gpus": 0}})
    assert run_sweep(cfg, out, local=True, progress=False, log=lambda _: None).n_failed == 0
    return out


def test_tables_and_figures_are_written(two_rounds, tmp_path, capsys):
    assert main([str(two_rounds), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "long_horizon.md").read_text()
    assert "x 2 rounds" in text and "| bn |" in text and "test (source)" in text
    for name in ("curves_1.png", "curves_1.pdf", "rounds_1.png", "rounds_1.pdf"):
        assert (tmp_path / name).stat().st_size > 0


def test_a_folder_without_a_test_cell_is_refused(two_rounds, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(two_rounds, copy)
    for path in (copy / "cells").glob("*__test__*"):
        path.unlink()
    (copy / "results.parquet").unlink(missing_ok=True)
    assert main([str(copy), "--out", str(tmp_path / "out")]) == 2
    assert "no stream has a finished TEST cell" in capsys.readouterr().err


def test_online_realtime_and_forgetting_rows_are_labelled_apart():
    """One stream, TENT online, real-time and with forgetting: three labels, one source row (the online TEST)."""
    import polars as pl

    from analysis.long_horizon import stream_tables

    base = {"dataset": "fmnist-c", "model": "resnet20", "sampler": "exact", "setting": "i111", "length": 300,
            "seed": 425, "batch_size": 32, "status": "ok", "n_samples": 300, "method_kwargs": "{}"}
    variants = [("test", "online", False, 50.0), ("test", "realtime", False, 50.0), ("tent", "online", False, 40.0),
                ("tent", "realtime", False, 45.0), ("tent", "online", True, 40.5)]
    rows = [{**base, "cell_id": f"c{i}", "method": m, "protocol": p, "forgetting": f, "error": e,
             "error_curve": [e, e]} for i, (m, p, f, e) in enumerate(variants)]
    ((_, source, methods),) = stream_tables(pl.DataFrame(rows))
    assert source["protocol"] == "online" and source["method"] == "test"
    labels = [r["label"] for r in methods]
    assert len(set(labels)) == len(labels) == 4
    assert "tent" in labels and "tent [realtime]" in labels and "tent [forgetting]" in labels


def test_a_rerun_clears_the_figures_it_did_not_write(two_rounds, tmp_path):
    """An earlier run's curves_7.png (a stream numbered otherwise then) goes; other files stay."""
    (tmp_path / "curves_7.png").write_bytes(b"old")
    (tmp_path / "rounds_7.pdf").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("mine")
    assert main([str(two_rounds), "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "curves_7.png").exists() and not (tmp_path / "rounds_7.pdf").exists()
    assert (tmp_path / "notes.txt").exists() and (tmp_path / "curves_1.png").exists()


def test_collapse_is_read_against_the_source_from_the_start():
    """A method above the source from batch 0 that dips below once: 'first above' 0, the collapse point after the
    dip, and how many parts it spent above; the note says what the columns mean."""
    import polars as pl

    from analysis.long_horizon import COLLAPSE_NOTE, _table, stream_tables

    base = {"dataset": "fmnist-c", "model": "resnet20", "sampler": "exact", "setting": "n111", "length": 320,
            "seed": 425, "batch_size": 32, "status": "ok", "n_samples": 320, "method_kwargs": "{}", "protocol": "online"}
    rows = [{**base, "cell_id": "s", "method": "test", "error": 40.0, "error_curve": [40.0] * 5},
            {**base, "cell_id": "b", "method": "bn", "error": 60.0, "error_curve": [60.0, 60.0, 30.0, 60.0, 60.0]}]
    ((_, source, (bn,)),) = stream_tables(pl.DataFrame(rows))
    assert bn["first_above_batch"] == 0 and bn["collapse_batch"] == 6 and bn["parts_above"] == (4, 5)
    assert "| bn | 60.0 | +20.0 | 4 of 5 | 0 | 6 |" in "\n".join(_table(source, [bn]))
    assert "first above" in COLLAPSE_NOTE and "source" in COLLAPSE_NOTE


def test_resets_and_transitions_are_marked_and_titles_read_as_text():
    from analysis.long_horizon import _reset_batches, _stream_name, _transition_batches

    rdumb = {"method": "rdumb", "method_config": '{"reset_every": 200, "lr": 0.001}'}
    assert _reset_batches(rdumb, 563) == [200, 400]
    assert _reset_batches({"method": "tent", "method_config": '{"lr": 0.001}'}, 563) == []
    source = {"dataset": "fmnist-c", "sampler": "ccc", "setting": "i111", "length": 9000, "batch_size": 16,
              "seed": 425, "ccc": '{"target_error": 60, "transition": 1500}'}
    assert _transition_batches(source, 563) == pytest.approx([93.75 * k for k in range(1, 7)])
    name = _stream_name(source)
    assert "{" not in name and "ccc i111 at 60 % source error, transitions of 1,500 images" in name


def test_the_summary_table_puts_each_stream_on_a_row(two_rounds):
    from analysis.common import load_dirs
    from analysis.long_horizon import stream_tables, summary_table

    table = summary_table(stream_tables(load_dirs([str(two_rounds)])))
    header, _, row = table.splitlines()
    assert header == "| stream | source (TEST) | bn |"
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0].startswith("fmnist-c exact i111") and cells[1].count(" / ") == cells[2].count(" / ") == 1
