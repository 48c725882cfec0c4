"""A user's builder file (``models: {folder: my_models.py:build}``; docs/own_data.md, "Your model"):

- its content, not its path, is in the cell's identity: a copied project keeps every id (and the row's ``model``
  and ``model_code``), an edit of the code gives new ids;
- a builder that raises, has another signature, does not parse or calls ``sys.exit`` is one line and exit 2
  before the first cell, ``--dry-run`` included (never a crash report, never a silent end).
"""

from __future__ import annotations

import shutil
import sys

import pytest

from unitta.__main__ import main as unitta_main
from unitta.data.export import export_fmnist_c
from unitta.schema import ConfigError
from unitta.sweep.config import parse_config

GOOD = ("import torch\n"
        "def build(num_classes):\n"
        "    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),\n"
        "                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, num_classes))\n"
        "    net.input_size = 32\n"
        "    return net\n")

BAD = {
    "raises": ("def build(num_classes):\n    raise RuntimeError('no such layer size')\n", "raised RuntimeError"),
    "signature": ("def build():\n    return None\n", "build(num_classes)"),
    "syntax": ("def build(num_classes)\n    return None\n", "does not parse"),
    "exits": ("import sys\nsys.exit(3)\n", "sys.exit"),
    "not_a_module": ("def build(num_classes):\n    return 3\n", "not a torch nn.Module"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return export_fmnist_c(tmp_path_factory.mktemp("own") / "images", ["fog", "snow"], n_per_domain=10)[0]


def _config(folder, project, module="my_models"):
    return parse_config({"name": "x", "datasets": ["folder"], "data_dir": str(folder), "sampler": "sorted",
                         "methods": ["test"], "checkpoint": str(project / "mine.pth"),
                         "models": {"folder": f"{module}.py:build"}}, base_dir=project)


def _forget(module: str) -> None:
    sys.modules.pop(module, None)


def test_the_builders_content_not_its_path_is_its_identity(folder, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_models.py").write_text(GOOD)
    _forget("my_models")
    (cell,) = _config(folder, project).cells()
    moved = tmp_path / "elsewhere" / "project"
    shutil.copytree(project, moved)
    _forget("my_models")
    (copied,) = _config(folder, moved).cells()
    assert copied.model != cell.model  # another absolute path on disk ...
    assert copied.cell_id() == cell.cell_id()  # ... the same cell: nothing reruns
    assert copied.coordinates()["model"] == cell.coordinates()["model"] == "my_models.py:build"
    assert cell.coordinates()["model_code"] is not None
    (moved / "my_models.py").write_text(GOOD.replace("Conv2d(3, 4, 3)", "Conv2d(3, 4, 5)"))
    _forget("my_models")
    (edited,) = _config(folder, moved).cells()
    assert edited.cell_id() != cell.cell_id()
    assert edited.coordinates()["model_code"] != cell.coordinates()["model_code"]


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_broken_builder_is_one_line_before_any_cell(folder, tmp_path, case):
    code, words = BAD[case]
    module = f"broken_{case}"
    (tmp_path / f"{module}.py").write_text(code)
    _forget(module)
    with pytest.raises(ConfigError, match=None) as err:
        _config(folder, tmp_path, module)
    assert words in str(err.value) and f"{module}.py" in str(err.value) and "\n" not in str(err.value)
    if case in ("syntax", "exits"):
        assert module not in sys.modules  # a half-imported file is not kept


def test_dry_run_of_a_builder_that_raises_exits_2(folder, tmp_path, capsys, monkeypatch):
    (tmp_path / "boom_models.py").write_text(BAD["raises"][0])
    _forget("boom_models")
    (tmp_path / "own.yaml").write_text(
        f"name: own\ndatasets: [folder]\ndata_dir: {folder}\nsampler: sorted\nmethods: [test]\n"
        f"models: {{folder: boom_models.py:build}}\noutput: {tmp_path / 'out'}\n")
    monkeypatch.chdir(tmp_path)
    assert unitta_main(["sweep", "own.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "raised RuntimeError: no such layer size" in err[0] and "bug" not in err[0]
    assert not (tmp_path / "out").exists()


def test_a_misspelt_timm_name_is_one_line_and_no_warning(folder):
    """timm's import warns (torch.jit's deprecations) before any error: a misspelt name is one line with a hint, and
    nothing else on stderr (a fresh process: the warnings come with the first import)."""
    import subprocess
    from pathlib import Path

    from unitta.models.custom import build_custom

    with pytest.raises(ValueError, match=r"timm has no model 'resnet1888' \(did you mean 'resnet18'\?\)"):
        build_custom("timm:resnet1888", 10)
    code = "from unitta.models.custom import build_custom\ntry:\n    build_custom('timm:resnet1888', 10)\n" \
           "except ValueError:\n    pass\n"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": ""})
    assert done.returncode == 0 and done.stderr == "", done.stderr


def _constant(k: int, pad: str = "") -> str:
    """A builder whose model always predicts class ``k`` (``pad``: a comment that changes the file's size)."""
    return ("import torch\n"
            "class Const(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            f"        return torch.nn.functional.one_hot(torch.full((len(x),), {k}), 10).float()  {pad}\n"
            "def build(num_classes):\n"
            "    return Const()\n")


def _predicts(spec: str) -> int:
    import torch

    from unitta.models.custom import build_custom

    model, _ = build_custom(spec, 10)
    return int(model(torch.zeros(1, 3, 32, 32)).argmax())


def test_a_changed_builder_is_a_fresh_module_and_two_of_one_name_are_two(tmp_path):
    """Issue 52 item 3: one process, the builder edited between two loads, runs the edited code (its cell id, which
    hashes the file, already changes); two ``my_models.py`` in two folders run their own code each."""
    _forget("my_models")
    first, second = tmp_path / "a" / "my_models.py", tmp_path / "b" / "my_models.py"
    for path, k in ((first, 1), (second, 2)):
        path.parent.mkdir()
        path.write_text(_constant(k))
    assert _predicts(f"{first}:build") == 1
    assert _predicts(f"{second}:build") == 2
    assert _predicts(f"{first}:build") == 1
    first.write_text(_constant(3, "# edited"))
    assert _predicts(f"{first}:build") == 3
    _forget("my_models")


def test_a_builder_that_ends_the_process_is_one_line_not_a_silent_exit_0(folder, tmp_path):
    """Issue 52 item 8: ``build()`` calling ``os._exit(0)`` ran in the driver, which then ended with exit 0 and
    nothing said; the builder is first called in a child process whose exit is read."""
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "quits_models.py").write_text("import os\ndef build(num_classes):\n    os._exit(0)\n")
    (tmp_path / "own.yaml").write_text(
        f"name: own\ndatasets: [folder]\ndata_dir: {folder}\nsampler: sorted\nmethods: [test]\n"
        f"models: {{folder: quits_models.py:build}}\noutput: {tmp_path / 'out'}\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "unitta", "sweep", "own.yaml", "--dry-run"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert "quits_models.py:build" in line and "exit code 0" in line and "return the model" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case, code, words", [
    ("import_error", "import torch\nfrom torch import no_such_thing\n", "import_error_models.py, line 2"),
    ("null_bytes", "def build(num_classes):\x00\n", "null bytes"),
])
def test_builder_file_mistakes_name_the_line(folder, tmp_path, case, code, words):
    """Issue 52 weak items: an import error inside the builder file says its line; null bytes are no 'line None'."""
    module = f"{case}_models"
    (tmp_path / f"{module}.py").write_text(code)
    with pytest.raises(ConfigError) as err:
        _config(folder, tmp_path, module)
    assert words in str(err.value) and "None" not in str(err.value), str(err.value)


def test_a_missing_builder_file_is_named_as_a_file(folder, tmp_path):
    with pytest.raises(ConfigError) as err:
        _config(folder, tmp_path, "not_there")
    assert "no such file" in str(err.value) and "not_there.py" in str(err.value), str(err.value)
    assert "No module named" not in str(err.value)


def test_a_builder_files_module_level_input_size_counts(tmp_path):
    """docs/own_data.md: the input side is the returned module's ``input_size`` attribute, else the builder file's
    module-level ``input_size``, else 224."""
    from unitta.models.custom import build_custom

    body = "import torch\ndef build(num_classes):\n    return torch.nn.Linear(3, num_classes)\n"
    (tmp_path / "side_models.py").write_text("input_size = 48\n" + body)
    assert build_custom(f"{tmp_path / 'side_models.py'}:build", 10)[1] == 48
    (tmp_path / "plain_models.py").write_text(body)
    assert build_custom(f"{tmp_path / 'plain_models.py'}:build", 10)[1] == 224
