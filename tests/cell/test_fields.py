"""The fields of ``Cell`` (one ``cell_field`` line each, ``unitta.cell.fields``) and what is made from them agree,
and a field is one edit."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import unitta
from unitta.cell import FIELDS, LATER_FIELDS, PLACEMENT_FIELDS, Cell, cell_columns
from unitta.cell.spec import CellFields, CellSpec
from unitta.results import SCHEMA


def test_cell_has_the_table_fields_in_order_with_their_defaults():
    fields = dataclasses.fields(Cell)
    assert [f.name for f in fields] == [f.name for f in FIELDS]
    cell = Cell()
    assert all(getattr(cell, f.name) == f.default_value() for f in FIELDS)
    assert set(PLACEMENT_FIELDS) == {f.name for f in FIELDS if not f.identity}
    assert set(LATER_FIELDS) == {f.name for f in FIELDS if f.later and f.identity}


def test_identity_coordinates_and_schema_are_the_table_columns():
    cell = Cell(method="bn", setting="nui1", factors={"class_beta": 3.0}, corruptions=["fog"], criteria=["entropy"])
    columns = cell_columns()
    assert list(cell.coordinates()) == [name for name, _ in columns]
    assert SCHEMA.names[: len(columns)] == [name for name, _ in columns]
    for f in FIELDS:
        assert (f.name in cell.identity() or f.later) == f.identity, f.name  # later fields at their default: left out
        if f.identity and f.name != "cost":  # cost: evaluate's realtime_cost column (a real-time cell's only)
            assert f.column_key in SCHEMA.names, f.name
    coords = cell.coordinates()
    assert coords["factor_overrides"] == json.dumps({"class_beta": 3.0}) and coords["class_beta"] == 3.0
    assert coords["corruptions"] == '["fog"]' and coords["criteria"] == '["entropy"]' and coords["model"] == "resnet20"


def test_config_keys_are_the_table_fields():
    assert set(CellFields.model_fields) == {f.name for f in FIELDS if f.config == "shared"}
    assert set(CellSpec.model_fields) == {f.name for f in FIELDS if f.config is not None}
    spec = CellSpec(setting="nui1", seed=3, corruptions=["fog", "snow"])
    assert spec.cell(method="bn") == Cell(method="bn", setting="nui1", seed=3, corruptions=("fog", "snow"),
                                          num_threads=None)


# One edit: a line added to ``Cell`` in a copy of the package, as a new field is added (``later``).
_NEW_LINE = '    warmup: int = cell_field(0, check=whole_at_least(0), later=True, column="int64")\n'
_END = "    # (a new field goes above this line"
_USE_IT = """
import json
from unitta.cell import Cell
from unitta.cell.spec import CellSpec
from unitta.results import SCHEMA
from unitta.sweep.config import parse_config
sweep = {"name": "s", "datasets": ["fmnist-c"], "methods": ["bn"], "settings": ["i111"], "warmup": 4}
out = {"ids": [Cell(method="bn").cell_id(), Cell(method="bn", warmup=0).cell_id(), Cell(method="bn", warmup=2).cell_id()],
       "column": str(SCHEMA.field("warmup").type), "coordinate": Cell(warmup=2).coordinates()["warmup"],
       "spec": CellSpec(warmup=3).cell(method="bn").warmup, "sweep": parse_config(sweep).cells()[0].warmup}
try:
    Cell(warmup=-1)
except ValueError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def test_a_line_added_to_cell_reaches_configs_rows_and_keeps_old_ids(tmp_path):
    package = Path(unitta.__file__).parent
    shutil.copytree(package, tmp_path / "unitta", ignore=shutil.ignore_patterns("__pycache__"))
    module = tmp_path / "unitta" / "cell" / "__init__.py"
    text = module.read_text()
    assert text.count(_END) == 1
    module.write_text(text.replace(_END, _NEW_LINE + _END))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _USE_IT], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    before = Cell(method="bn").cell_id()
    assert out["ids"][:2] == [before, before] and out["ids"][2] != before  # at its default: the old id
    assert out["column"] == "int64" and out["coordinate"] == 2 and out["spec"] == 3 and out["sweep"] == 4
    assert out["error"] == "warmup: expected a whole number >= 0, got -1"
