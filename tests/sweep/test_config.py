"""The sweep YAML schema: expansion into cells, and one-line errors for every kind of mistake."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unitta.schema import ConfigError
from unitta.streams import SETTING_CODES_24 as SETTINGS_24
from unitta.streams import SETTING_CODES_36 as SETTINGS_36
from unitta.streams import SETTINGS_24 as STREAM_SETTINGS_24
from unitta.streams import SETTINGS_36 as STREAM_SETTINGS_36
from unitta.sweep import main
from unitta.sweep.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"]}


def test_setting_grids_match_the_stream_package():
    assert list(SETTINGS_24) == [s.code for s in STREAM_SETTINGS_24]
    assert list(SETTINGS_36) == [s.code for s in STREAM_SETTINGS_36]
    assert len(set(SETTINGS_24)) == 24 and len(set(SETTINGS_36)) == 36


def test_expansion_order_and_fields():
    cfg = parse_config(
        {
            "name": "t",
            "datasets": "fmnist-c",
            "methods": ["test", {"bn": None}],
            "class_settings": ["i1", "nu"],
            "domain_settings": ["11", "iu"],
            "factor_grid": {"domain_beta": [2, 5]},
            "factors": {"class_alpha": 0.9},
            "seeds": [1, 2],
            "batch_size": 16,
            "n_per_domain": 200,
            "S": 5,
            "resources": {"num_cpus": 2, "num_gpus": 0.25},
        }
    )
    cells = cfg.cells()
    assert len(cells) == 2 * 4 * 2 * 2  # methods x settings x factor points x seeds
    assert [c.setting for c in cells[:16:4]] == ["i111", "i1iu", "nu11", "nuiu"]
    assert cells[0].factors == {"class_alpha": 0.9, "domain_beta": 2.0}
    assert cells[2].factors == {"class_alpha": 0.9, "domain_beta": 5.0}
    assert (cells[0].seed, cells[1].seed) == (1, 2)
    assert {c.method for c in cells} == {"test", "bn"}
    assert all(c.batch_size == 16 and c.S == 5 and c.n_per_domain == 200 and c.num_threads == 2 for c in cells)
    ids = [c.cell_id() for c in cells]
    assert len(set(ids)) == len(ids)
    assert ids == [c.cell_id() for c in cfg.cells()]  # deterministic


def test_all24_and_method_overrides():
    cfg = parse_config({**BASE, "settings": "all24", "methods": [{"bn": {}}, "test"]})
    assert cfg.setting_codes() == list(SETTINGS_24)
    assert len(cfg.cells()) == 48
    cfg36 = parse_config({**BASE, "settings": ["all36"]})
    assert len(cfg36.cells()) == 36


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"methodz": ["test"]}, "unknown key 'methodz' (did you mean 'methods'?)"),
        ({"resources": {"num_gpu": 1}}, "resources: unknown key 'num_gpu' (did you mean 'num_gpus'?)"),
        ({"resources": {"num_gpus": -1}}, "resources.num_gpus: must be >= 0"),
        ({"resources": {"num_cpus": 0}}, "resources.num_cpus: must be > 0"),
        ({"settings": "all25"}, "settings: invalid setting 'all25'"),
        ({"settings": ["i111", "nuxu"]}, "settings: invalid setting 'nuxu'"),
        ({"settings": ["i111", "i111"]}, "settings: lists 'i111' twice"),
        ({"datasets": ["cifar10"]}, "datasets: unknown dataset 'cifar10' (did you mean 'cifar10-c'?)"),
        ({"methods": ["tnet"]}, "methods[0]: unknown method 'tnet'"),
        ({"methods": ["test", "test"]}, "the grid has the same cell twice"),
        ({"methods": [{"bn": {"no_such_knob": 1}}]}, "methods[0] (bn): method 'bn' has no hyper-parameter 'no_such_knob'"),
        ({"methods": [{"test": None, "bn": None}]}, "methods[0]: one method per list item"),
        ({"seeds": ["a"]}, "seeds[0]:"),
        ({"seeds": [1, 1]}, "seeds: lists 1 twice"),
        ({"factors": {"domain_alfa": 0.5}}, "factors: unknown factor 'domain_alfa' (did you mean 'domain_alpha'?)"),
        ({"factors": {"domain_beta": 2}, "factor_grid": {"domain_beta": [1, 2]}}, "factors and factor_grid both set"),
        ({"S": 0}, "S: expected a whole number >= 1, got 0"),
        ({"sampler": "exakt"}, "sampler: unknown sampler 'exakt' (did you mean 'exact'?); known: official"),
        ({"sampler": ["official", "official"]}, "sampler: lists 'official' twice"),
        ({"protocol": "real-time"}, "protocol: unknown protocol 'real-time' (did you mean 'realtime'?); known: online"),
        ({"protocol": ["online", "online"]}, "protocol: lists 'online' twice"),
        ({"protocol": []}, "protocol: needs at least one value"),
        ({"delta": 0.1}, "delta: only the dirichlet sampler takes a delta"),
        ({"sampler": "dirichlet", "settings": None, "delta": [0.0]}, "delta: delta=0.0: the Dirichlet"),
        ({"sampler": "dirichlet", "settings": None, "delta": [0.1, 0.1]}, "delta: lists 0.1 twice"),
        ({"sampler": "sorted"}, "settings: sampler sorted fixes its own stream (sorted = 1111) and takes no settings"),
        ({"sampler": "sorted", "settings": None, "factors": {"class_beta": 2}}, "factors: sampler sorted fixes"),
        ({"sampler": ["sorted", "dirichlet"], "settings": None, "S": 5}, "S: sampler sorted, dirichlet fixes"),
        ({"sampler": "exact", "S": 5}, "S: only the official sampler"),
        ({"length": 100}, "length: only the exact and ccc samplers"),
        ({"batch_size": [0]}, "batch_size: expected a whole number >= 1, got 0"),
        ({"severity": 6}, "severity: expected a whole number in 1 .. 5, got 6"),
        ({"max_retries": -1}, "max_retries: must be >= 0"),
        ({"models": {"cifar10-c": "Standard"}}, "models: key 'cifar10-c' is not one of the sweep's datasets"),
        ({"datasets": None}, "datasets"),
        ({"device": "tpu"}, "device: expected 'auto', 'cpu', 'cuda', 'cuda:N' (N: a GPU index) or 'mps', got 'tpu'"),
        ({"device": "cuda:x"}, "device: expected 'auto'"),
    ],
)
def test_bad_configs_give_one_line_naming_the_key(change, expected):
    data = {**BASE, **change}
    with pytest.raises(ConfigError) as info:
        parse_config(data, source="bad.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("bad.yaml: ")
    assert expected in message, message


def test_several_samplers_expand_per_sampler():
    cfg = parse_config({**BASE, "methods": ["test", "bn"], "settings": ["i111", "i1i1"], "S": 5,
                        "sampler": ["official", "sorted", "dirichlet"], "delta": [0.01, 0.1], "seeds": [1, 2]})
    cells = cfg.cells()
    # per method: official x 2 settings, sorted once, dirichlet x 2 deltas; x 2 seeds
    assert len(cells) == 2 * (2 + 1 + 2) * 2
    first = [(c.sampler, c.setting, c.delta, c.S) for c in cells[:10:2]]
    assert first == [("official", "i111", None, 5), ("official", "i1i1", None, 5), ("sorted", "1111", None, None),
                     ("dirichlet", "n1i1", 0.01, None), ("dirichlet", "n1i1", 0.1, None)]
    assert len({c.cell_id() for c in cells}) == len(cells)
    only = parse_config({**{k: v for k, v in BASE.items() if k != "settings"}, "sampler": "dirichlet"})
    assert [(c.setting, c.delta) for c in only.cells()] == [("n1i1", 0.01)]  # the default delta


def test_protocol_takes_a_list_as_sampler_does():
    """``protocol: [online, realtime]`` runs the grid under both; a single value is the one-item list."""
    both = parse_config({**BASE, "methods": ["test", "tent"], "protocol": ["online", "realtime"]}).cells()
    assert [(c.protocol, c.method) for c in both] == [("online", "test"), ("online", "tent"),
                                                      ("realtime", "test"), ("realtime", "tent")]
    assert len({c.cell_id() for c in both}) == 4
    one = parse_config({**BASE, "protocol": "realtime"}).cells()
    assert [c.protocol for c in one] == ["realtime"] and one[0].cell_id() == both[2].cell_id()
    assert parse_config(BASE).cells()[0].cell_id() == both[0].cell_id()  # online by default: ids unchanged


def test_cell_ids_of_the_ulmm_samplers_do_not_carry_delta():
    from unitta.cell import Cell

    cell = Cell(method="test", setting="nui1", seed=3)
    assert "delta" not in cell.identity() and cell.coordinates()["delta"] is None
    a, b = Cell(sampler="dirichlet", setting="n1i1", delta=0.1), Cell(sampler="dirichlet", setting="n1i1")
    assert a.identity()["delta"] == 0.1 and b.delta == 0.01 and a.cell_id() != b.cell_id()
    with pytest.raises(ValueError, match="the sorted sampler's setting is '1111'"):
        Cell(sampler="sorted", setting="i111")
    with pytest.raises(ValueError, match="only the dirichlet sampler takes a delta"):
        Cell(delta=0.1)


def test_missing_settings_and_half_settings():
    data = {k: v for k, v in BASE.items() if k != "settings"}
    with pytest.raises(ConfigError, match="settings: missing"):
        parse_config(data)
    with pytest.raises(ConfigError, match="give both"):
        parse_config({**data, "class_settings": ["i1"]})
    with pytest.raises(ConfigError, match="invalid domain setting 'x1'"):
        parse_config({**data, "class_settings": ["i1"], "domain_settings": ["x1"]})


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets: [fmnist-c\nmethods: test\n")
    with pytest.raises(ConfigError, match="invalid YAML at line"):
        load_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        load_config(empty)
    ok = tmp_path / "named_by_file.yaml"
    ok.write_text(yaml.safe_dump({k: v for k, v in BASE.items() if k != "name"}))
    assert load_config(ok).name == "named_by_file"


def test_cli_config_error_exits_2_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BASE, "methods": ["tnet"]}))
    out = tmp_path / "out"
    assert main([str(bad), "--output", str(out), "--local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown method 'tnet'" in err
    assert not out.exists()


def test_cli_config_error_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndatasets: [fmnist-c]\nmethods: [test]\nsettings: [i111]\nresourcez: {num_cpus: 1}\n")
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("old results")
    proc = subprocess.run(
        [sys.executable, "-m", "unitta.sweep", str(bad), "--output", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key 'resourcez' (did you mean 'resources'?)" in lines[0]
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


PAPER_METHODS = [
    "test", "bn", "tent", "cotta", "lame", "note", "roid", "robust_bn", "rotta", "tribe", "balanced_bn",
    "unmixtns", "cofa", "bdn", "unitta", "cofa_nofilter", "bdn_nofilter",
]  # spec 5.2: the 17 adapters of sh/run.sh, under this project's registry names


NEW_METHODS = [
    "bn_alpha", "eta", "eata", "sar", "deyo", "rpl", "rdumb", "cmf", "rmt", "adacontrast", "memo", "santa", "gtta",
]  # issue 20: the other TTA benchmark's methods
TTAB_METHODS = ["shot", "t3a", "conjugate_pl"]  # issue 49: the source-free online baselines of LINs-lab/ttab
RECENT_METHODS = ["tea", "come", "ttaug"]  # issue 49: TEA, COME, TTAug
MODERN_METHODS = ["test", "bn", "tent", "cotta", "rotta", "roid", "tribe", "bdn", "unitta", *NEW_METHODS, *TTAB_METHODS,
                  *RECENT_METHODS]
REFERENCE_TABLE_METHODS = ["test", "bn", "tent", "eata", "sar", "cotta", "rotta", "adacontrast", "rmt", "lame", "roid"]


@pytest.mark.parametrize(
    "name, methods, n_cells",
    [("quick", None, None), ("fmnist_grid", PAPER_METHODS + NEW_METHODS + TTAB_METHODS + RECENT_METHODS, 36 * 24),
     ("full_grid", PAPER_METHODS, 3 * 17 * 24), ("full_grid_reference", PAPER_METHODS, 3 * 17 * 24),
     ("cifar10", PAPER_METHODS, 17 * 24), ("cifar100", PAPER_METHODS, 17 * 24), ("imagenet", PAPER_METHODS, 17 * 24),
     ("modern_grid", MODERN_METHODS, 3 * 28 * 24)],
)
def test_shipped_sweeps_validate(name, methods, n_cells):
    from unitta.methods import list_methods

    path = ROOT / "sweeps" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    names = [m if isinstance(m, str) else next(iter(m)) for m in raw["methods"]]
    if methods is not None:
        assert names == methods
    missing = sorted(set(names) - set(list_methods()))
    assert not missing, f"{path.name} names methods that are not registered: {missing}"
    cfg = load_config(path)
    cells = cfg.cells()
    if n_cells is not None:
        assert len(cells) == n_cells
        assert cfg.setting_codes() == list(SETTINGS_24)
    else:
        assert 4 <= len(cells) <= 40 and cfg.datasets == ["fmnist-c"]


def test_the_vit_sweep_runs_the_layernorm_methods_on_vit_tiny():
    from unitta.methods import list_methods, method_class

    cfg = load_config(ROOT / "sweeps" / "fmnist_vit.yaml")
    assert {c.model_name for c in cfg.cells()} == {"vit_tiny"}
    layer_norm_methods = {m for m in list_methods() if "layer" in method_class(m).norm_kinds}
    assert {m.name for m in cfg.methods} == layer_norm_methods  # every method that runs on the ViT, none that is refused
    assert len(cfg.cells()) == len(cfg.methods) * 24 and cfg.setting_codes() == list(SETTINGS_24)


def test_reference_protocols_sweep_covers_the_four_protocols():
    from unitta.paper.mariodoebler import protocol_of

    path = ROOT / "sweeps" / "fmnist_reference_protocols.yaml"
    raw = yaml.safe_load(path.read_text())
    assert [m if isinstance(m, str) else next(iter(m)) for m in raw["methods"]] == REFERENCE_TABLE_METHODS
    from unitta.methods import list_methods

    missing = sorted(set(REFERENCE_TABLE_METHODS) - set(list_methods()))
    assert not missing, f"{path.name} names methods that are not registered: {missing}"
    cells = load_config(path).cells()
    assert len(cells) == len(REFERENCE_TABLE_METHODS) * 5
    protocols = {protocol_of(c.sampler, c.setting, c.delta) for c in cells}
    assert protocols == {"Continual", "Mixed domains", "Correlated", "Mixed domains, correlated"}


def test_full_length_cluster_sweep_runs_the_six_tables_online_and_in_real_time():
    """sweeps/cluster/fmnist_full_length.yaml (issue 34): n_per_domain and S unset, both protocols, long segments."""
    from unitta.evaluate.segments import short_segment_warnings

    cfg = load_config(ROOT / "sweeps" / "cluster" / "fmnist_full_length.yaml")
    cells = cfg.cells()
    assert len(cells) == 2 * 28 * 6 and {c.protocol for c in cells} == {"online", "realtime"}
    assert all(c.n_per_domain is None and c.S is None for c in cells)
    assert short_segment_warnings(cells) == []


def test_the_full_length_i111_sweep_is_a_part_of_the_cluster_sweep():
    """sweeps/fmnist_full_length_i111.yaml runs six of the cluster sweep's cells: the same ids, so its rows count
    as that sweep's."""
    part = {c.cell_id() for c in load_config(ROOT / "sweeps" / "fmnist_full_length_i111.yaml").cells()}
    whole = {c.cell_id() for c in load_config(ROOT / "sweeps" / "cluster" / "fmnist_full_length.yaml").cells()}
    assert len(part) == 6 and part <= whole
