"""Every sweep records its cells, computed or reused: ``load_results(out, sweep=NAME)`` is its grid."""

from __future__ import annotations

import pytest

from tests.sweep.conftest import small_config
from unitta.results import load_results
from unitta.results.membership import sweep_names
from unitta.sweep import run_sweep


def test_a_second_sweep_that_reuses_cells_gets_its_whole_grid(tmp_path):
    out = tmp_path / "out"
    run_sweep(small_config(name="first", methods=["test", "bn"], settings=["i111"]), out, local=True, progress=False)
    second = small_config(name="second", methods=["test", "bn", "tent"], settings=["i111"])
    outcome = run_sweep(second, out, local=True, progress=False)
    assert (outcome.n_skipped, outcome.n_ok) == (2, 1)  # reused 2 of the first sweep's cells
    rows = load_results(out, sweep="second")
    assert sorted(rows["cell_id"]) == sorted(c.cell_id() for c in second.cells())
    assert sorted(rows["sweep_name"]) == ["first", "first", "second"]  # who computed each row
    assert load_results(out, sweep="first").height == 2
    assert load_results(out).height == 3
    assert sweep_names(out) == ["first", "second"]


def test_an_unknown_sweep_name_is_one_line_naming_the_known_ones(tmp_path):
    out = tmp_path / "out"
    run_sweep(small_config(name="first", methods=["test"], settings=["i111"]), out, local=True, progress=False)
    with pytest.raises(ValueError, match=r"no sweep named 'frist' .*\(sweeps there: first\)"):
        load_results(out, sweep="frist")


def test_membership_is_recorded_before_any_cell_runs(tmp_path, monkeypatch):
    from unitta.run import executor

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "_run", interrupted)
    cfg = small_config(name="cut", methods=["test"], settings=["i111", "nui1"])
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, tmp_path / "out", local=True, progress=False)
    assert load_results(tmp_path / "out", sweep="cut").height == 0 and sweep_names(tmp_path / "out") == ["cut"]
