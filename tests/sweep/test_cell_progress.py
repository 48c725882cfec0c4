"""Progress inside running cells (unitta.run.cell_progress): images done, their rate and an ETA from images in the
sweep's progress line, a line a minute in the cell's log, and the Ray path through the ImagesBoard actor."""

from __future__ import annotations

import pytest

import unitta.run.cell_progress as cell_progress
import unitta.run.progress as progress
from tests.sweep.conftest import small_config
from unitta.run.capture import cell_task
from unitta.run.cell_progress import ImagesBoard, cell_reporter, images_eta
from unitta.sweep import run_sweep


def test_the_eta_counts_images_not_cells() -> None:
    """One 1,000-image cell done in 10 s, one running at 100 of 9,000, two waiting: the rate is 110 images/s;
    left are 8,900 images of the running cell and two cells of the mean length seen, (1,000 + 9,000) / 2."""
    rate, left = images_eta(1_000, 1, {"a": (100, 9_000)}, 2, 10.0)
    assert rate == pytest.approx(110.0)
    assert left == pytest.approx((8_900 + 2 * 5_000) / 110.0)
    assert images_eta(0, 0, {}, 3, 5.0) == (0.0, None)


def test_the_reporter_sends_and_logs_at_most_at_their_intervals() -> None:
    sent, logged, clock = [], [], [0.0]
    report = cell_reporter("c", lambda *a: sent.append(a), logged.append, clock=lambda: clock[0])
    for t, done in [(0.5, 10), (1.0, 20), (2.5, 30), (61.0, 40), (62.0, 50)]:
        clock[0] = t
        report(done, 50, errors=(20, 5)) if done == 20 else report(done, 50)
    # every 2 s, and the last batch always; the newest error so far once, with the next send
    assert sent == [("c", 30, 50, (20, 5)), ("c", 40, 50, None), ("c", 50, 50, None)]
    assert logged == ["images 40/50 (80 %), 1 images/s, ETA 15 s"]


def test_a_local_sweep_shows_images_in_its_progress_line_and_the_cell_log(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    monkeypatch.setattr(cell_progress, "SEND_EVERY_S", 0.0)
    monkeypatch.setattr(cell_progress, "LOG_EVERY_S", 0.0)
    cfg = small_config(methods=["tent"], settings=["i111"])
    outcome = run_sweep(cfg, tmp_path / "out", local=True)
    assert outcome.n_ok == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("small: ")]
    assert any("running cells at" in line and "images/s" in line and "ETA" in line for line in lines), lines
    (cell,) = cfg.cells()
    log = (tmp_path / "out" / "logs" / f"{cell.cell_id()}.log").read_text()
    assert "images 64/" in log and "images/s, ETA" in log


def test_a_ray_cell_tells_the_board_its_images(ray_cluster) -> None:
    """The Ray task body with the driver's board actor: the board ends at (n, n) for the cell's stream."""
    from unitta.evaluate.inputs import load_cell_dataset

    (cell,) = small_config(methods=["bn"], settings=["i111"]).cells()
    board = ray_cluster.remote(num_cpus=0)(ImagesBoard).remote()
    row, _ = ray_cluster.get(ray_cluster.remote(cell_task).remote(cell, load_cell_dataset(cell), {}, (), None, board))
    assert row["status"] == "ok"
    assert ray_cluster.get(board.snapshot.remote()) == {cell.cell_id(): (row["n_samples"], row["n_samples"])}


def test_a_finished_cell_counts_its_images_once_and_the_last_line_shows_no_running_cell(monkeypatch, capsys):
    """Two cells of 1,000 images over 10 s: while the board still lists the first cell as it finishes, its images
    are counted once (100 images/s, not 200), and the last line has running=0 and no running cells' images."""
    import io

    from unitta.run import progress as progress_module

    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    bar = progress_module.Progress(2, "p", enabled=True)
    bar.stream, bar.interactive = io.StringIO(), False
    now[0] = 5.0
    bar.images({"a": (500, 1_000), "b": (0, 1_000)})
    now[0] = 10.0
    bar.update("ok", running=1, images=1_000, cell_id="a")  # the board has not dropped 'a' yet
    assert bar.running_images == {"b": (0, 1_000)}
    rate, _ = bar._eta()
    assert rate == 100.0
    bar.update("ok", running=0, images=1_000, cell_id="b")
    last = bar.stream.getvalue().strip().splitlines()[-1]
    assert "running=0" in last and "running cells" not in last and "2/2 cells" in last


def test_the_rate_is_over_the_last_minute(monkeypatch):
    """1,000 images in the first 10 s, then 100 in the next 100 s: the rate shown is the last minute's (~1/s),
    not the run's (1,100 / 110 s = 10/s)."""
    from unitta.run import progress as progress_module

    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    bar = progress_module.Progress(3, "p", enabled=False)
    for t, done in [(10.0, 1_000), (50.0, 1_040), (110.0, 1_100)]:
        now[0] = t
        bar.images({"a": (done, 5_000)})
    rate, left = bar._eta()
    assert rate == pytest.approx(60 / 60, rel=0.01) and left == pytest.approx((3_900 + 2 * 5_000) / rate, rel=0.01)
