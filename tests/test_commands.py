"""Every command as a user types it: each ``unitta <verb> --help`` and each ``python -m unitta.<tool> --help``
exits 0 with a usage text, and the offline ``data fetch`` / ``models fetch`` end in one line, no traceback.

The help texts run in one fresh interpreter (``unitta.__main__.main`` for the verbs, ``runpy`` -- what
``python -m`` runs -- for the tools), so the dozen commands share one import of torch and Ray; the
fetches run as their own ``python -m`` processes with every proxy pointing at a closed local port, so that
they are offline whether or not the machine has a network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unitta.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
# every package with a __main__.py is a tool: python -m unitta.<tool>
TOOLS = sorted(
    ".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "unitta").rglob("__main__.py") if p.parent.name != "unitta"
)

_HELP_RUNNER = r"""
import contextlib, io, json, runpy, sys
from unitta.__main__ import main

def run(call):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = call()
    except SystemExit as exc:
        code = exc.code
    return {"code": 0 if code is None else code, "text": out.getvalue()}

def as_module(tool):
    sys.argv = [tool, "--help"]
    runpy.run_module(tool, run_name="__main__", alter_sys=True)

results = {"unitta --help": run(lambda: main(["--help"]))}
for verb in sys.argv[1].split(","):
    results[f"unitta {verb} --help"] = run(lambda: main([verb, "--help"]))
for tool in sys.argv[2].split(","):
    results[f"python -m {tool} --help"] = run(lambda: as_module(tool))
print(json.dumps(results))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNITTA_") and "proxy" not in k.lower()}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def test_every_command_has_a_help_that_exits_0() -> None:
    assert {"unitta.sweep", "unitta.tune", "unitta.data", "unitta.models", "unitta.contract", "unitta.methods"} <= set(TOOLS)
    out = subprocess.run(
        [sys.executable, "-c", _HELP_RUNNER, ",".join(COMMANDS), ",".join(TOOLS)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(results) == 1 + len(COMMANDS) + len(TOOLS)
    failed = {cmd: r for cmd, r in results.items() if r["code"] != 0 or "usage" not in r["text"].lower()}
    assert not failed, "\n".join(f"{cmd}: exit {r['code']}: {r['text'][-300:]}" for cmd, r in failed.items())


def test_python_m_unitta_methods_is_the_methods_command(capsys, monkeypatch) -> None:
    """``python -m unitta.methods list`` (README: ``python -m unitta.<tool>`` keeps working) prints what
    ``unitta methods list`` prints (in-process: ``runpy`` runs what ``python -m`` runs)."""
    import runpy

    from unitta.__main__ import main

    assert main(["methods", "list"]) == 0
    expected = capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["unitta.methods", "list"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("unitta.methods", run_name="__main__", alter_sys=True)
    assert stop.value.code in (0, None)
    assert capsys.readouterr().out == expected
    assert "tent" in expected and "unitta" in expected


@pytest.mark.parametrize(
    "command",
    [["unitta.data", "fetch", "cifar10-c"], ["unitta.models", "fetch", "cifar10-c"]],
    ids=["data-fetch", "models-fetch"],
)
def test_an_offline_fetch_fails_in_one_line(command: list[str], tmp_path: Path) -> None:
    closed = "http://127.0.0.1:9"  # the discard port: connection refused at once
    env = _env(http_proxy=closed, https_proxy=closed, HTTP_PROXY=closed, HTTPS_PROXY=closed, NO_PROXY="", no_proxy="")
    target = tmp_path / "dir"
    out = subprocess.run(
        [sys.executable, "-m", *command, "--dir", str(target)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode != 0
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert "on a machine with internet" in lines[0]  # says how to do it by hand
    assert not [p for p in target.rglob("*") if p.is_file()], "an offline fetch leaves no file behind"
