"""The tune config schema, the search-space expansion and the feasibility check (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unitta.cell import Cell
from unitta.evaluate.input_checks import infeasibility
from unitta.schema import ConfigError
from unitta.search.cell_template import base_cell
from unitta.search_dimensions import Choice, LogUniform, Uniform
from unitta.tune import main
from unitta.tune.config import expand_grid, load_tune_config, parse_tune_config, trial_cells

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "methods": ["test"], "space": {"domain_alpha": [0.9]}}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "sweeps").glob("tune_*.yaml")) + sorted((ROOT / "sweeps" / "cluster").glob("tune_*.yaml")),
    ids=lambda p: p.name,
)
def test_shipped_configs_are_valid(path: Path) -> None:
    cfg = load_tune_config(path)
    assert cfg.space.searched()
    assert isinstance(base_cell(cfg), Cell)  # the base cell is a valid Cell


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"serch": {}}, "unknown key 'serch' (did you mean 'search'?)"),
        ({"search": {"algoritm": "grid"}}, "search: unknown key 'algoritm' (did you mean 'algorithm'?)"),
        ({"space": {"domain_alpah": [0.5]}}, "space: unknown key 'domain_alpah' (did you mean 'domain_alpha'?)"),
        ({"space": {"class_beta": {"low": 1, "high": 5, "nun": 3}}}, "(did you mean 'num'?)"),
        ({"cell": {"setings": "nunu"}}, "unknown key 'setings' (did you mean 'setting'?)"),
        ({"space": {"domain_alpha": [1.5]}}, "alpha_1 must lie in (0, 1]"),
        ({"space": {"domain_beta": [0.5]}}, "beta must be >= 1"),
        ({"space": {"domain_alpha": {"low": 0.5, "high": 0.9}}}, "needs 'num'"),
        ({"space": {}}, "space is empty"),
        ({"methods": ["test", "bn"], "search": {"algorithm": "optuna"}}, "optuna search optimises one objective"),
        ({"objective": {"metric": "gap"}}, "needs objective.gap"),
        ({"cell": {"method": "bn"}}, "'method' is set by 'methods'"),
        ({"cell": {"device": "tpu"}}, "cell.device: expected 'auto', 'cpu', 'cuda'"),
    ],
)
def test_bad_configs_are_refused_with_a_hint(change: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_tune_config({**BASE, **change})
    assert expected in str(err.value)


def test_cli_exits_2_on_a_bad_config_and_writes_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, "objectve": {"mode": "max"}}))
    assert main([str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'objective'?" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_exits_2_on_an_unknown_method(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, "methods": ["tnet"]}))
    assert main([str(path), "--output", str(tmp_path / "out")]) == 2
    assert "unknown method 'tnet' (did you mean" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_range_grid_points() -> None:
    assert Uniform(0.5, 0.9, num=5).points() == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert LogUniform(1, 100, num=3).points() == [1.0, 10.0, 100.0]
    assert LogUniform(1e-5, 1e-3, num=5).points()[1] == 3.16227766e-05  # 10 significant digits, not 6 decimals


def test_a_configs_space_is_read_into_dimensions_and_written_back_as_spelt() -> None:
    """A list is a ``Choice``, a range a ``LogUniform`` / ``Uniform`` with its ``num``; the dump (the config's hash,
    its copy in the output folder) spells them as the YAML did."""
    beta = {"low": 1.0, "high": 100.0, "log": True, "num": 3}
    cfg = parse_tune_config({**BASE, "space": {"class_beta": beta, "domain_alpha": [0.5, 0.9]}})
    assert cfg.space.class_beta == LogUniform(1.0, 100.0, num=3)
    assert cfg.space.domain_alpha == Choice((0.5, 0.9))
    dumped = cfg.model_dump(mode="json")["space"]
    assert dumped["class_beta"] == beta and dumped["domain_alpha"] == [0.5, 0.9]
    assert parse_tune_config({**BASE, "space": dumped}).config_hash() == cfg.config_hash()


def test_grid_expansion_product_and_one_at_a_time() -> None:
    space = {"domain_alpha": [0.8, 0.9], "class_beta": [1.0, 10.0, 20.0], "layer": "all"}
    product = parse_tune_config({**BASE, "space": space})
    assert len(expand_grid(product, ["bn1", "layer1.0.bn1"])) == 2 * 3 * 2
    single = parse_tune_config({**BASE, "space": space, "search": {"grid": "one_at_a_time"}})
    points = expand_grid(single, ["bn1", "layer1.0.bn1"])
    assert len(points) == 2 + 3 + 2 and all(len(p) == 1 for p in points)


def test_trial_cells_apply_factors_layer_and_keep_the_base() -> None:
    cfg = parse_tune_config(
        {**BASE, "methods": ["bdn"], "cell": {"setting": "nunu", "factors": {"domain_beta": 5.0}, "S": 5},
         "space": {"domain_alpha": [0.9], "layer": "all"}}
    )
    (cell,) = trial_cells(cfg, {"domain_alpha": 0.9, "layer": "layer1.0.bn1"})
    assert cell.method == "bdn" and cell.setting == "nunu" and cell.S == 5
    assert cell.factors == {"domain_alpha": 0.9, "domain_beta": 5.0}
    assert cell.method_kwargs == {"layer": "layer1.0.bn1"}
    gap = parse_tune_config({**BASE, "methods": [], "objective": {"metric": "gap", "gap": ["bn", "test"], "mode": "max"}})
    assert [c.method for c in trial_cells(gap, {"domain_alpha": 0.9})] == ["bn", "test"]


def test_feasibility_is_the_samplers_own() -> None:
    # Exact sampler, domain (n,u), beta = 5, D = 15: Cor. 1 needs alpha_1 >= 1 - (14/15)/5 = 0.8133.
    cell = Cell(setting="nunu", sampler="exact", factors={"domain_alpha": 0.9, "domain_beta": 5.0})
    assert infeasibility(cell, 15, 10) is None
    bad = Cell(setting="nunu", sampler="exact", factors={"domain_alpha": 0.5, "domain_beta": 5.0})
    why = infeasibility(bad, 15, 10)
    assert why is not None and "alpha" in why
    # alpha_1 below 1/n is outside every sampler's range (spec 1.1)
    assert infeasibility(Cell(setting="nunu", factors={"domain_alpha": 0.01}), 15, 10) is not None


def test_feasible_only_maps_every_point_into_the_feasible_region() -> None:
    import numpy as np

    from unitta.tune.config import map_feasible, unmap_feasible

    raw = {"name": "s", "cell": {"setting": "nunu", "sampler": "exact", "length": 100},
           "space": {"domain_alpha": {"low": 0.5, "high": 0.99}, "domain_beta": {"low": 1.0, "high": 20.0},
                     "class_alpha": {"low": 0.5, "high": 0.99}, "class_beta": {"low": 1.0, "high": 50.0}},
           "search": {"algorithm": "optuna", "feasible_only": True},
           "objective": {"metric": "gap", "gap": ["bn", "test"], "mode": "max"}}
    cfg = parse_tune_config(raw)
    sizes = {"domain": 15, "class": 10}
    rng = np.random.default_rng(0)
    for _ in range(20):
        u = {"domain_alpha_u": rng.uniform(), "domain_beta": rng.uniform(1, 20),
             "class_alpha_u": rng.uniform(), "class_beta": rng.uniform(1, 50)}
        point = map_feasible(cfg, u, sizes)
        assert 0.5 <= point["domain_alpha"] <= 0.99 and 0.5 <= point["class_alpha"] <= 0.99
        cell = trial_cells(cfg, point)[0]
        assert infeasibility(cell, 15, 10) is None, point
        back = unmap_feasible(cfg, point, sizes)
        assert back["domain_alpha_u"] == pytest.approx(u["domain_alpha_u"]) and back["class_alpha_u"] == pytest.approx(u["class_alpha_u"])
    with pytest.raises(ConfigError, match="feasible_only is for optuna"):
        parse_tune_config({**raw, "search": {"algorithm": "grid", "feasible_only": True}})


@pytest.mark.parametrize("under", [False, True])
def test_cli_exits_2_on_an_output_that_is_a_file_or_under_one(tmp_path: Path, capsys, under: bool) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(BASE))
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    assert main([str(path), "--output", str(target / "out" if under else target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("lies under" if under else "is a file, not a directory") in err[0], err
    assert target.read_text() == "not a folder"


def test_cli_exits_2_on_an_unreachable_cluster_and_leaves_no_folder(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({**BASE, "cell": {"n_per_domain": 20}}))
    assert main([str(path), "--output", str(tmp_path / "new" / "out"), "--address", "127.0.0.1:1"]) == 2
    assert "cannot reach the Ray cluster" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
