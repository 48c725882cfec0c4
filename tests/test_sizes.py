"""The size limits of issue 21 on ``unitta/``, read with ``ast``: no module over 400 lines and no function
(or method, nested ones included) over 80 lines, so that modules keep one concept and functions stay short."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    return sorted((ROOT / "unitta").rglob("*.py"))


def test_the_limits_see_the_package():
    paths = _sources()
    assert len(paths) > 50 and any(p.parts[-2:] == ("evaluate", "__init__.py") for p in paths)


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split along a seam into modules of one concept): {long}"


def test_no_function_over_80_lines():
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = size
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split into named helpers): {long}"
