"""The one executor (unitta.run): planners feed it cells, it writes what they release, in this process (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unitta.cell import Cell
from unitta.results import cells_dir, load_results
from unitta.run.executor import GridPlanner, RunOptions, execute_plan
from unitta.schema import RunConfig

CELLS = [Cell(method=m, setting="i111", n_per_domain=20, S=2, batch_size=50) for m in ("test", "bn")]
LOCAL = RunOptions(local=True, progress=False)


class _Batched(GridPlanner):
    """Offers its cells one at a time and holds every row back until all are back (like a tune trial)."""

    def __init__(self, cells, finished):
        super().__init__(cells, finished)
        self.held: list = []
        self.seen_on_disk: list[int] = []

    def take(self):
        return [self.todo.pop(0)] if self.todo else []

    def on_result(self, cell, row, text):
        self.seen_on_disk.append(len(list(cells_dir(self.out).glob("*.parquet"))))
        self.held.append((row, text))
        if not self.todo:
            self.outbox, self.held = self.held, []

    def done(self):
        return not self.todo and not self.held and not self.outbox


def test_rows_are_written_when_the_planner_releases_them(tmp_path: Path) -> None:
    planners = []

    def make(finished):
        planner = _Batched(CELLS, finished)
        planner.out = tmp_path
        planners.append(planner)
        return planner

    outcome = execute_plan(RunConfig(name="held"), tmp_path, make, LOCAL)
    assert planners[0].seen_on_disk == [0, 0]  # nothing written while the planner held the rows
    assert outcome.n_ok == 2 and load_results(tmp_path).height == 2
    assert (tmp_path / "manifest.json").is_file() and (tmp_path / "logs").is_dir()
    again = execute_plan(RunConfig(name="held"), tmp_path, make, LOCAL)  # resume: nothing to run
    assert again.n_skipped == 2 and again.n_ok == 0


def test_a_planner_that_stalls_is_a_bug_not_a_hang(tmp_path: Path) -> None:
    class Stalled(GridPlanner):
        def take(self):
            return []

    with pytest.raises(RuntimeError, match="not done"):
        execute_plan(RunConfig(name="stalled"), tmp_path, lambda finished: Stalled(CELLS, finished), LOCAL)


TINY = [Cell(method=m, setting="i111", n_per_domain=10, S=1, batch_size=20, corruptions=("fog", "snow"))
        for m in ("test", "bn")]


@pytest.mark.usefixtures("one_thread")
def test_a_broken_manifest_is_set_aside_on_resume(tmp_path: Path, capsys) -> None:
    """Issue 52 item 5: a resume whose manifest.json does not parse (or is no manifest) moves it to quarantine/ with
    one warning line, like a broken cell file, and resumes: nothing reruns, a cell left to run runs and the run
    starts a new manifest."""
    import json

    execute_plan(RunConfig(name="manifest"), tmp_path, lambda finished: GridPlanner(TINY[:1], finished), LOCAL)
    for n, broken in enumerate(['["a list"]', '{"runs": 3}', '{"broken']):
        (tmp_path / "manifest.json").write_text(broken)
        cells = TINY if n == 2 else TINY[:1]  # the last resume has a cell to run (it wrote the manifest: rc 3)
        again = execute_plan(RunConfig(name="manifest"), tmp_path, lambda finished, cells=cells: GridPlanner(cells, finished),
                             LOCAL)
        assert again.n_skipped == 1 and again.n_ok == len(cells) - 1
        aside = tmp_path / "quarantine" / ("manifest.json" if n == 0 else f"manifest.{n}.json")
        assert aside.read_text() == broken
        assert f"moved to {aside}" in capsys.readouterr().err
    assert len(json.loads((tmp_path / "manifest.json").read_text())["runs"]) == 1
