"""The import graph of unitta/ and analysis/ (read with ``ast``) against the layer order of docs: streams/data ->
models -> methods -> cell/evaluate -> run -> sweep/tune/recommend -> analysis. Downward imports only (imports
inside functions count too), no import circle, and command-line entry points (``__main__.py`` modules)
import the library, never the reverse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module may import its own layer and the ones below
LAYERS: list[tuple[str, ...]] = [
    (
        "unitta.streams",
        "unitta.data",
        "unitta.nn",
        "unitta.paper",
        "unitta.realtime",
        "unitta.metrics",
        "unitta.files",
        "unitta.profile_names",
        "unitta.labels",
    ),
    ("unitta.models",),
    ("unitta.methods",),
    (
        "unitta.cell",
        "unitta.adapt",
        "unitta.evaluate",
        "unitta.schema",
        "unitta.cell_spec",
        "unitta.results",
        "unitta.membership",
        "unitta.plugins",
    ),
    ("unitta.run",),
    (
        "unitta.config",
        "unitta.tune_config",
        "unitta.sweep",
        "unitta.tune",
        "unitta.tune_plan",
        "unitta.recommend",
        "unitta.recommend_inputs",
    ),
    ("analysis",),
]
ENTRY_POINTS = ("unitta.__main__",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = [*ROOT.glob("unitta/**/*.py"), *ROOT.glob("analysis/**/*.py")]
    return {_module_name(p): p for p in files}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that ``import name`` loads (the longest known prefix), or None for a third party."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            ours = _resolve(target, modules)
            if ours and ours != name and not (path.name == "__init__.py" and ours.startswith(name + ".")):
                found.add(ours)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _entry_point(name: str) -> bool:
    return name in ENTRY_POINTS or name.endswith(".__main__")


def _rank(name: str) -> int:
    for rank, layer in enumerate(LAYERS):
        if any(name == top or name.startswith(top + ".") for top in layer):
            return rank
    raise AssertionError(f"{name} is in no layer of LAYERS: add it where it belongs")


def test_every_import_runs_downwards() -> None:
    upward = []
    for name, targets in _graph().items():
        if name in ("unitta", "analysis"):
            continue
        for target in targets:
            if target in ("unitta", "analysis"):
                continue
            if _entry_point(target):
                upward.append(f"{name} -> {target} (an entry point)")
            elif not _entry_point(name) and _rank(target) > _rank(name):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that run upwards:\n" + "\n".join(sorted(upward))


def test_no_import_circle() -> None:
    graph = _graph()
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.rpartition(".")[0] == node or node.startswith(nxt + "."):
                continue  # a package and its own submodules
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_import_unitta_cell_does_not_import_torch() -> None:
    code = "import sys, unitta.cell; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
