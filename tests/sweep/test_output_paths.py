"""Output paths that cannot hold results are one line and exit 2, before anything is created; a read-only
folder whose cells are all done needs no writing (docs/results.md, "Before the first cell")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.sweep.conftest import SMALL
from unitta.outdir import is_writable
from unitta.sweep import main

BASE = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"], **SMALL}
READ_ONLY = Path("/sys/unitta-test-output")  # sysfs: no one may create files there, root included


@pytest.fixture
def config(tmp_path) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return str(path)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("extra", [[], ["--fresh"], ["--dry-run"], ["--no-preflight"]])
def test_an_output_that_is_a_file(config, tmp_path, capsys, extra):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    assert main([config, "--output", str(target), "--local", "--no-progress", *extra]) == 2
    assert f"output {target} is a file, not a directory" in _one_error_line(capsys)
    assert target.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == [
        "c.yaml",
        "results.txt",
    ]


@pytest.mark.parametrize("extra", [[], ["--fresh"], ["--dry-run"]])
def test_an_output_under_a_file(config, tmp_path, capsys, extra):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    assert main([config, "--output", str(target / "sub" / "out"), "--local", "--no-progress", *extra]) == 2
    assert f"lies under {target}, which is a file" in _one_error_line(capsys)


@pytest.mark.skipif(is_writable(READ_ONLY), reason="/sys is writable here")
def test_a_read_only_output_with_cells_to_run(config, capsys):
    assert main([config, "--output", str(READ_ONLY), "--local", "--no-progress"]) == 2
    assert "is not writable and 1 of 1 cells still have to run" in _one_error_line(capsys)


def test_a_read_only_output_whose_cells_are_all_done_needs_no_writing(config, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main([config, "--output", str(out), "--local", "--no-progress"]) == 0
    before = sorted(str(p) for p in out.rglob("*"))
    import unitta.sweep as sweep

    # root ignores a folder's mode bits here, so the folder is made read-only for the sweep through its check
    monkeypatch.setattr(sweep, "is_writable", lambda path: False)
    capsys.readouterr()
    assert main([config, "--output", str(out), "--local", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "is not writable; every cell is already done there, so nothing is written" in captured.err
    assert "0 cells run (0 failed), 1 already done" in captured.out
    assert sorted(str(p) for p in out.rglob("*")) == before


def test_an_unreachable_cluster_leaves_no_output_folder(config, tmp_path, capsys):
    out = tmp_path / "new" / "out"
    assert main([config, "--output", str(out), "--address", "127.0.0.1:1", "--no-progress"]) == 2
    assert "cannot reach the Ray cluster" in _one_error_line(capsys)
    assert not (tmp_path / "new").exists()  # no folder, no .lock


def test_an_existing_folder_keeps_its_results_when_the_cluster_is_unreachable(config, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main([config, "--output", str(out), "--address", "127.0.0.1:1", "--no-progress"]) == 2
    assert (out / "notes.txt").read_text() == "mine"
