"""``unitta``: the one command; every subcommand runs its module's own main."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from unitta.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_subcommand_with_one_line(capsys) -> None:
    assert main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("sweep", "tune", "data", "models", "methods", "recommend", "report", "compare"):
        (line,) = [x for x in lines if x.split()[:1] == [name]]
        assert len(line.split()) > 2  # a description follows the name
    assert set(COMMANDS) <= {x.split()[0] for x in lines if x.startswith("  ")}


def test_installed_as_the_unitta_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["unitta"] == "unitta.__main__:main"


def test_an_unknown_command_is_one_line_and_exit_2(capsys) -> None:
    assert main(["swep"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'sweep'?" in err[0]


def test_subcommands_are_the_modules_mains(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "datasets": ["fmnist-c"],
                "methods": ["test"],
                "settings": ["i111"],
                "n_per_domain": 20,
                "S": 2,
            }
        )
    )
    assert main(["sweep", str(cfg), "--output", str(tmp_path / "out"), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("s: 1 cells, 0 already done")
    assert main(["methods", "list"]) == 0 and "unitta" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_subcommand_answers_help(name: str, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out
