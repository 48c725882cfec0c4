"""Strict YAML configs (unitta/schema.py): a key given twice and a boolean where a number belongs are errors."""

from __future__ import annotations

import re

import pytest

from unitta.schema import ConfigError
from unitta.schema.yaml_files import read_yaml_file
from unitta.sweep.config import load_config, parse_config
from unitta.tune.config import load_tune_config

SWEEP = "name: t\ndatasets: [fmnist-c]\nmethods: [test]\nsettings: [i111]\n"


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(SWEEP + "S: 5\nseeds: [1]\nS: 7\n")
    with pytest.raises(ConfigError, match=r"line 7, column 1: key 'S' is given twice \(first at line 5\)"):
        load_config(path)
    path.write_text(SWEEP + "resources:\n  num_cpus: 1\n  num_cpus: 2\n")
    with pytest.raises(ConfigError, match="key 'num_cpus' is given twice"):
        load_config(path)
    path.write_text("name: t\nmethods: [bn]\nspace: {domain_beta: [1.0]}\nmethods: [tent]\n")
    with pytest.raises(ConfigError, match="key 'methods' is given twice"):
        load_tune_config(path)


def test_merge_keys_and_anchors_still_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {S: 5, seeds: [1]}\nother:\n  <<: *b\n  S: 7\n")
    assert read_yaml_file(path) == {"base": {"S": 5, "seeds": [1]}, "other": {"S": 7, "seeds": [1]}}


@pytest.mark.parametrize(
    "change, where",
    [
        ({"S": True}, "S"),
        ({"seeds": [425, True]}, "seeds[1]"),
        ({"seeds": False}, "seeds[0]"),
        ({"factors": {"domain_beta": True}}, "factors.domain_beta"),
        ({"factor_grid": {"class_beta": [1.0, False]}}, "factor_grid.class_beta[1]"),
        ({"resources": {"num_gpus": True}}, "num_gpus"),
        ({"max_retries": True}, "max_retries"),
    ],
)
def test_a_boolean_is_not_a_number(change, where):
    data = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"], **change}
    with pytest.raises(
        ConfigError, match=rf"{re.escape(where)}: expected a number, got (True|False) \(a YAML boolean\)"
    ):
        parse_config(data)


@pytest.mark.parametrize("change, where", [
    ({"rounds": "3"}, "rounds"), ({"batch_size": "64"}, "batch_size[0]"), ({"seeds": [425, "1"]}, "seeds[1]"),
    ({"resources": {"num_cpus": "2"}}, "num_cpus"), ({"factors": {"domain_beta": "2.0"}}, "factors.domain_beta"),
])
def test_a_quoted_number_is_not_a_number(change, where):
    """Issue 52: pydantic's lax mode read ``rounds: "3"`` as 3, silently; a string where a number goes is refused."""
    data = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"], **change}
    with pytest.raises(ConfigError, match=rf"{re.escape(where)}: expected a number, got '[\d.]+' \(a string"):
        parse_config(data)


def test_booleans_stay_booleans_and_numbers_numbers():
    cfg = parse_config(
        {
            "name": "t",
            "datasets": ["fmnist-c"],
            "methods": ["test"],
            "settings": ["i111"],
            "compile": True,
            "S": 5,
            "factors": {"domain_beta": 2},
        }
    )
    assert cfg.compile is True and cfg.S == 5 and cfg.factors == {"domain_beta": 2.0}


def test_hint_prefers_a_transposition():
    """'tnet' is 'tent' with two letters swapped (one edit), 'test' two substitutions away: the hint says 'tent'."""
    from unitta.methods import list_methods
    from unitta.schema import hint

    assert hint("tnet", list_methods()) == " (did you mean 'tent'?)"
    assert hint("tentt", list_methods()) == " (did you mean 'tent'?)"
    assert hint("entropie", ["entropy", "confidence"]) == " (did you mean 'entropy'?)"
    assert hint("orcale", ["default", "oracle", "holdout"]) == " (did you mean 'oracle'?)"
    assert hint("xyz", ["tent", "test"]) == ""
