"""The import graph of unitta/ and analysis/ (read with ``ast``) against the layer order of docs/layout.md.

Every module is in exactly one layer (its longest listed package prefix; a package's ``__main__`` is in its
package's layer, and only the commands of ``COMMANDS``, ``unitta/__main__.py`` and ``unitta/methods/__main__.py``,
are the command layer on top), with no other exemption: no import runs up a layer (imports inside functions count too), the packages of one layer do not
import each other, no import circle, and nothing imports a command-line module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module may import its own package, and the layers below its own
LAYERS: list[tuple[str, ...]] = [
    # ``unitta``: the root __init__ only
    ("unitta", "unitta.files", "unitta.nn", "unitta.profile_names", "unitta.durations", "unitta.search_dimensions",
     "unitta.switches"),
    ("unitta.data",),
    ("unitta.streams",),
    ("unitta.paper", "unitta.models"),
    ("unitta.methods",),
    ("unitta.schema",),
    ("unitta.plugins",),
    ("unitta.cell",),
    ("unitta.results",),
    ("unitta.evaluate",),
    ("unitta.track",),
    ("unitta.run", "unitta.search"),
    ("unitta.sweep", "unitta.tune", "unitta.select", "unitta.recommend", "unitta.contract"),
    ("unitta.slurm",),
    ("analysis",),
]
# the command-line entry points on the top layer, above LAYERS: the ``unitta`` command, and ``python -m
# unitta.methods``, the README's ``python -m unitta.<tool>`` spelling of ``unitta methods`` (it runs the contract
# checker of a higher layer than the methods its package holds; nothing imports either)
COMMANDS = ("unitta.__main__", "unitta.methods.__main__")
DOC = ROOT / "docs" / "layout.md"


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
    return name == "unitta.__main__" or name.endswith(".__main__")


def _home(name: str) -> str:
    """The LAYERS entry ``name`` belongs to: the longest listed package prefix (``unitta`` holds only itself; a
    package's ``__main__`` is its package's, a command of COMMANDS the top layer's)."""
    if name in COMMANDS:
        return "__main__"
    entries = [top for layer in LAYERS for top in layer]
    found = [top for top in entries if name == top or (top != "unitta" and name.startswith(top + "."))]
    assert found, f"{name} is in no layer of LAYERS: add it where it belongs (and to docs/layout.md)"
    return max(found, key=len)


def _rank(name: str) -> int:
    home = _home(name)
    if home == "__main__":
        return len(LAYERS)
    return next(rank for rank, layer in enumerate(LAYERS) if home in layer)


def _not_downwards(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that runs up a layer, sideways into a sibling package, or into a command."""
    upward = []
    for name, targets in graph.items():
        for target in targets:
            if _entry_point(target):
                upward.append(f"{name} -> {target} (a command-line module)")
            elif _rank(target) > _rank(name):
                upward.append(f"{name} -> {target}")
            elif _rank(target) == _rank(name) and _home(target) != _home(name) and name not in COMMANDS:
                upward.append(f"{name} -> {target} (a sibling package of the same layer)")
    return sorted(upward)


def test_every_import_runs_downwards() -> None:
    """No import runs up a layer, a package's ``__main__`` included."""
    upward = _not_downwards(_graph())
    assert not upward, "imports that do not run downwards:\n" + "\n".join(upward)


def test_a_package_command_is_in_its_package_layer() -> None:
    """``python -m unitta.<tool>`` runs its own package's command: a package's ``__main__`` that imports a higher
    layer counts as an upward import; the commands on top (``unitta``, ``python -m unitta.methods``) may load any
    layer."""
    graph = {"unitta.data.__main__": {"unitta.contract.command"}, "unitta.__main__": {"unitta.schema"},
             "unitta.methods.__main__": {"unitta.contract.command"}}
    assert _not_downwards(graph) == ["unitta.data.__main__ -> unitta.contract.command"]


def test_layers_are_the_documented_ones() -> None:
    """docs/layout.md lists the same layers, in the same order, as LAYERS (its table's first column)."""
    rows = re.findall(r"^\| *(\d+) *\| *([^|]+?) *\|", DOC.read_text(), flags=re.M)
    documented = [tuple(re.findall(r"`([\w.]+)`", packages)) for _, packages in rows]
    assert documented == [*LAYERS, ("__main__",)]


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


# ---------------------------------------------------------------------- one name per thing (docs/layout.md)
# Packages whose __init__ is a documented public API (docs/unitta.md): other packages may import from it.
PUBLIC_FACADES = ("unitta.data", "unitta.models", "unitta.methods", "unitta.streams", "unitta.nn", "unitta.paper")


def _defined(path: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), not those it imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _from_imports(modules: dict[str, Path]):
    """(importing module, imported module, name) for every ``from unitta... import name`` of ours."""
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in modules:
                for alias in node.names:
                    yield name, node.module, alias.name


def test_names_are_imported_from_their_home() -> None:
    """No re-export: a name comes from the module that defines it (a public API package's __init__ excepted,
    for importers outside that package)."""
    modules = _modules()
    defined = {name: _defined(path) for name, path in modules.items()}
    found = sorted(
        f"{importer} imports {name} from {module}, which does not define it"
        for importer, module, name in _from_imports(modules)
        if name not in defined[module]
        and f"{module}.{name}" not in modules
        and not (module in PUBLIC_FACADES and not importer.startswith(module + "."))
    )
    assert not found, "\n".join(found)


def test_no_private_name_is_used_by_another_module() -> None:
    modules = _modules()
    found = [
        f"{importer} imports {module}.{name}"
        for importer, module, name in _from_imports(modules)
        if name.startswith("_") and not name.startswith("__") and f"{module}.{name}" not in modules
        and importer != module
    ]
    for importer, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases = {
            alias.asname or alias.name: f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and not node.level and node.module
            for alias in node.names
            if f"{node.module}.{alias.name}" in modules
        }
        found += [
            f"{importer} uses {aliases[node.value.id]}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
            and node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != importer
        ]
    assert not found, "\n".join(sorted(found))


def test_no_public_name_is_defined_twice() -> None:
    """One name per thing: a public top-level name of unitta/ is defined in one module (``main``, each command's
    entry, excepted; command-line modules are not a library)."""
    homes: dict[str, list[str]] = {}
    for name, path in _modules().items():
        if name.startswith("unitta") and not _entry_point(name):
            for defined in _defined(path):
                if not defined.startswith("_") and defined != "main":
                    homes.setdefault(defined, []).append(name)
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert not twice, "\n".join(f"{name}: {', '.join(sorted(where))}" for name, where in sorted(twice.items()))
