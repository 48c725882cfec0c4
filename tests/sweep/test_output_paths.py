"""Output paths that cannot hold results are one line and exit 2, before anything is created; a read-only
folder whose cells are all done needs no writing (docs/results.md, "Before the first cell")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.local_http import run_unprivileged
from tests.sweep.conftest import SMALL
from unitta.results.output_checks import is_writable
from unitta.sweep import main

ROOT = Path(__file__).resolve().parents[2]
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


def _read_only(root: Path, writable: bool = False) -> None:
    for path in (root, *root.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200 if writable else path.stat().st_mode & ~0o222)


def test_a_read_only_output_whose_cells_are_all_done_needs_no_writing(config, tmp_path):
    out = tmp_path / "out"
    assert main([config, "--output", str(out), "--local", "--no-progress"]) == 0
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({**BASE, "settings": ["i111", "nui1"]}))
    before = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*"))
    _read_only(out)
    try:
        done = run_unprivileged(
            ["-m", "unitta.sweep", config, "--output", str(out), "--local", "--no-progress"], {"PYTHONPATH": str(ROOT)}
        )
        if done is None:
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        assert done.returncode == 0, done.stderr
        assert "is not writable; every cell is already done there, so nothing is written" in done.stderr
        assert "0 cells run (0 failed), 1 already done" in done.stdout
        todo = run_unprivileged(
            ["-m", "unitta.sweep", str(more), "--output", str(out), "--local", "--no-progress"],
            {"PYTHONPATH": str(ROOT)},
        )
        assert todo.returncode == 2 and todo.stderr.strip().splitlines() == [
            f"error: output {out} is not writable and 1 of 2 cells still have to run; make it writable or give "
            "another directory with --output"
        ], todo.stderr
    finally:
        _read_only(out, writable=True)
    assert sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) == before


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
