"""A user's Python code imported by its content: builder files (``unitta.models.builders``) and plugin files and
package directories (``unitta.plugins``).

A cell's identity hashes the builder file on disk (``builder_identity``), so the code that runs must be that file's
code, not a module imported earlier in the same process under the same name: ``import`` would return the cached
``sys.modules`` entry. Here a module is kept by (its file, the SHA-256 of its bytes): the same content is the same
module (its classes stay the same objects); an edited file is executed afresh; two files of one name in two folders
are two modules. ``sys.modules[name]`` is the module last returned, because pickle finds classes by module name.
No torch here.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["import_file", "import_named"]

_by_content: dict[tuple[str, str], ModuleType] = {}  # (resolved path, SHA-256 of its code) -> the module
_named: dict[str, str] = {}  # a module imported by name -> the SHA-256 of its file when it was last executed


def _package_digest(directory: Path) -> str:
    """The SHA-256 of a package directory's Python files (their paths inside it and their bytes)."""
    sha = hashlib.sha256()
    for file in sorted(directory.rglob("*.py")):
        sha.update(str(file.relative_to(directory)).encode() + b"\0" + file.read_bytes() + b"\0")
    return sha.hexdigest()


def import_file(name: str, path: Path) -> ModuleType:
    """The module ``name`` of the ``.py`` file or package directory ``path``, by content (see the module
    docstring). Whatever executing it raises propagates; ``sys.modules`` is then as it was."""
    path = path.resolve()
    package = path.is_dir()
    code = None if package else path.read_bytes()
    key = (str(path), _package_digest(path) if package else hashlib.sha256(code).hexdigest())
    module = _by_content.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py" if package else path,
            submodule_search_locations=[str(path)] if package else None)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        saved = {k: m for k, m in sys.modules.items() if k == name or k.startswith(name + ".")}
        for k in saved:  # a package's submodules too: the fresh package imports its own
            del sys.modules[k]
        sys.modules[name] = module  # registered first, as ``import`` does: pickled classes resolve by name
        try:
            if package:
                spec.loader.exec_module(module)
            else:  # the bytes just hashed, not the file read again
                exec(compile(code, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102
        except BaseException:
            for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[k]
            sys.modules.update(saved)
            raise
        _by_content[key] = module
    sys.modules[name] = module
    return module


def import_named(name: str) -> ModuleType:
    """``importlib.import_module(name)``, executed again when its file changed since this function last did."""
    module = importlib.import_module(name)
    file = getattr(module, "__file__", None)
    if not file or not Path(file).is_file():
        return module
    digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    if _named.setdefault(name, digest) != digest:
        module = importlib.reload(module)
        _named[name] = digest
    return module
