"""Compaction (unitta.results.compaction, docs/results.md "Layout"): a real sweep that compacts gives the rows of one that
does not; resume, sweep membership, quarantine and the analysis scripts work on a compacted folder; a crash
between any two steps of a compaction or a consolidation never shows a row twice, an older row, or loses one."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

import unitta.results.compaction as compaction
from tests.sweep.conftest import REFERENCE_SETTINGS, metric_rows, small_config
from unitta.cell import Cell
from unitta.results import cell_statuses, consolidate, done_cells, load_results, write_cell_result
from unitta.results.cell_files import QUARANTINE_DIR, cell_files, cells_dir, part_files
from unitta.results.compaction import compact
from unitta.sweep import run_sweep

COMPACT_AT = 3  # 8 cells: two parts while the sweep runs, two cell files left at its end


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """small_config(settings=REFERENCE_SETTINGS) run --local with compaction every 3 cells; the folder and
    what each compaction left readable (rows, distinct ids, parts) at that moment."""
    out = tmp_path_factory.mktemp("compacted") / "out"
    seen = []
    real = compaction.compact

    def watched(out_dir, at_least=compaction.COMPACT_AT, warn=print):
        n = real(out_dir, at_least, warn)
        if n:
            df = load_results(out_dir)
            seen.append((n, df.height, df["cell_id"].n_unique(), len(part_files(out_dir))))
        return n

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction, "compact", watched)
        outcome = run_sweep(small_config(settings=REFERENCE_SETTINGS), out, local=True, progress=False,
                            compact_at=COMPACT_AT)
    assert (outcome.n_ok, outcome.n_failed) == (8, 0)
    return out, seen


def test_a_compacting_sweep_has_the_rows_of_one_that_does_not(compacted, reference):
    out, seen = compacted
    assert seen == [(3, 3, 3, 1), (3, 6, 6, 2)]  # each compaction left every row readable, once
    assert part_files(out) == [] and cell_files(out) == []  # at the end: all in results.parquet
    assert pl.read_parquet(out / "results.parquet").height == 8
    assert metric_rows(load_results(out)) == metric_rows(reference)


def test_resume_and_membership_on_a_compacted_folder(compacted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(compacted[0], out)
    assert len(done_cells(out)) == 8
    again = small_config(name="again", settings=REFERENCE_SETTINGS[:2])
    outcome = run_sweep(again, out, local=True, progress=False, compact_at=1)
    assert (outcome.n_skipped, outcome.n_ok) == (4, 0)
    assert sorted(load_results(out, sweep="again")["cell_id"]) == sorted(c.cell_id() for c in again.cells())
    assert load_results(out, sweep="small").height == 8 and cell_files(out) == []  # compact_at=1: none left


def test_the_analysis_scripts_read_a_compacted_folder_as_the_plain_one(compacted, tmp_path):
    import analysis.heatmaps as heatmaps

    plain, layered = tmp_path / "plain", tmp_path / "layered"
    shutil.copytree(compacted[0], layered)  # every row in results.parquet
    rows = list(load_results(compacted[0]).iter_rows(named=True))
    plain.mkdir()
    for row in rows:  # one file per cell, as before compaction
        write_cell_result(plain, row)
    for row in rows[:4]:  # the state in the middle of a run: copies in a part and in cell files too
        write_cell_result(layered, row)
    compact(layered, at_least=1)
    for row in rows[2:5]:
        write_cell_result(layered, row)
    assert part_files(layered) and cell_files(layered) and (layered / "results.parquet").is_file()
    for folder in (plain, layered):
        assert heatmaps.main([str(folder), "--out", str(folder / "analysis")]) == 0
    tables = sorted(p.name for p in (plain / "analysis").iterdir() if p.suffix in (".md", ".csv", ".tex"))
    assert tables
    for name in tables:
        assert (plain / "analysis" / name).read_text() == (layered / "analysis" / name).read_text(), name


# ---------------------------------------------------------------------- crashes between two steps
def _row(cell: Cell, status: str = "ok") -> dict:
    row = {**cell.coordinates(), "status": status}
    row.update(error=10.0, n_samples=8) if status == "ok" else row.update(error_text="RuntimeError: boom")
    return row


def _crash_after(monkeypatch, n: int) -> None:
    """Path.unlink raises after ``n`` calls: the process died there."""
    real, calls = Path.unlink, []

    def unlink(self, missing_ok=False):
        if len(calls) >= n:
            raise KeyboardInterrupt("killed")
        calls.append(self)
        real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)


CELLS = [Cell(method=m, setting=s) for m in ("test", "bn") for s in ("i111", "nuiu")]


def test_a_crash_after_the_part_before_the_deletes_shows_each_row_once(tmp_path, monkeypatch):
    for cell in CELLS:
        write_cell_result(tmp_path, _row(cell))
    _crash_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        compact(tmp_path, at_least=1)
    monkeypatch.undo()
    assert len(part_files(tmp_path)) == 1 and len(cell_files(tmp_path)) == 3  # rows in both layers
    df = load_results(tmp_path)
    assert df.height == 4 and df["cell_id"].n_unique() == 4
    assert done_cells(tmp_path) == {c.cell_id() for c in CELLS}
    assert compact(tmp_path, at_least=1) == 3 and cell_files(tmp_path) == []
    assert load_results(tmp_path).height == 4


def test_a_retried_cell_is_never_shadowed_by_its_older_row(tmp_path, monkeypatch):
    victim = CELLS[0].cell_id()
    for cell in CELLS:
        write_cell_result(tmp_path, _row(cell, "failed" if cell.cell_id() == victim else "ok"))
    compact(tmp_path, at_least=1)  # part 1: the failed row
    write_cell_result(tmp_path, _row(CELLS[0]))  # retried: ok, in a cell file
    assert cell_statuses(tmp_path)[victim] == "ok"
    compact(tmp_path, at_least=1)  # part 2: the ok row
    _crash_after(monkeypatch, 1)  # consolidation dies after deleting one part
    with pytest.raises(KeyboardInterrupt):
        consolidate(tmp_path)
    monkeypatch.undo()
    assert [p.name for p in part_files(tmp_path)] == ["part-000002.parquet"]  # the oldest went first
    assert cell_statuses(tmp_path)[victim] == "ok" and load_results(tmp_path).height == 4
    consolidate(tmp_path)
    assert part_files(tmp_path) == [] and cell_statuses(tmp_path)[victim] == "ok"


def test_an_unreadable_part_is_skipped_by_readers_and_quarantined_by_the_writer(tmp_path, capsys):
    for cell in CELLS:
        write_cell_result(tmp_path, _row(cell))
    compact(tmp_path, at_least=1)
    part = part_files(tmp_path)[0]
    part.write_bytes(part.read_bytes()[:50])
    assert load_results(tmp_path).height == 0 and part.exists()
    assert "skipping unreadable result file" in capsys.readouterr().err
    assert done_cells(tmp_path, quarantine=True) == set()  # its cells run again
    assert not part.exists() and (tmp_path / QUARANTINE_DIR / part.name).exists()


def test_quarantine_and_temp_files_stay_out_of_cells(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import unitta.results as results

    for cell in CELLS:
        write_cell_result(tmp_path, _row(cell))
    during = []
    real = pq.write_table
    monkeypatch.setattr(results.pq, "write_table", lambda *a, **k: (during.append(
        sorted(p.name for p in cells_dir(tmp_path).iterdir())), real(*a, **k))[1])
    write_cell_result(tmp_path, _row(Cell(method="tent")))
    monkeypatch.undo()
    assert during and all(name.endswith(".parquet") for name in during[0])  # the temp file is elsewhere
    victim = cell_files(tmp_path)[0]
    victim.write_bytes(b"not parquet")
    old = cells_dir(tmp_path) / ".corrupt"  # where an older version quarantined
    old.mkdir()
    (old / "x.parquet").write_bytes(b"old")
    from unitta.results.cell_files import move_old_quarantine

    done_cells(tmp_path, quarantine=True)
    move_old_quarantine(tmp_path)
    assert sorted(p.name for p in (tmp_path / QUARANTINE_DIR).iterdir()) == sorted([victim.name, "x.parquet"])
    assert pl.read_parquet(cells_dir(tmp_path)).height == 4  # polars reads the folder: good files only


def test_a_crash_while_a_large_folder_drops_its_cell_files_keeps_every_row(tmp_path, monkeypatch):
    victim = CELLS[0].cell_id()
    for cell in CELLS:
        write_cell_result(tmp_path, _row(cell, "failed" if cell.cell_id() == victim else "ok"))
    compact(tmp_path, at_least=1)
    for cell in CELLS[:2]:  # the victim retried (ok now), another cell written again
        write_cell_result(tmp_path, _row(cell))
    _crash_after(monkeypatch, 2)  # the part goes, one cell file goes, then the process dies
    with pytest.raises(KeyboardInterrupt):
        consolidate(tmp_path, compact_at=1)
    monkeypatch.undo()
    assert part_files(tmp_path) == [] and len(cell_files(tmp_path)) == 1
    assert load_results(tmp_path).height == 4 and cell_statuses(tmp_path)[victim] == "ok"
    consolidate(tmp_path, compact_at=1)
    assert cell_files(tmp_path) == [] and set(cell_statuses(tmp_path).values()) == {"ok"}


@pytest.mark.slow
def test_a_sweep_on_ray_compacts_and_resumes(ray_cluster, tmp_path):
    cfg = small_config(name="onray", methods=["test"], settings=["i111", "nui1"])
    first = run_sweep(cfg, tmp_path, progress=False, compact_at=1)
    assert first.n_ok == 2 and cell_files(tmp_path) == [] and part_files(tmp_path) == []
    assert sorted(load_results(tmp_path, sweep="onray")["cell_id"]) == sorted(c.cell_id() for c in cfg.cells())
    again = run_sweep(cfg, tmp_path, progress=False, compact_at=1)
    assert (again.n_skipped, again.n_ok) == (2, 0)
