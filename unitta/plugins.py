"""Methods from outside the package: the ``plugins:`` key of sweep and tune configs (docs/adding_a_method.md).

A plugin is a module that registers TTA methods with ``@register_method`` when imported. A config names it
in one of three ways::

    plugins:
      - my_pkg.my_tta          # a dotted module name, importable from where the command runs (or installed)
      - methods/my_method.py   # a single-file module, relative to the config file's directory
      - methods/my_pkg/        # a package directory (with __init__.py), relative likewise

The driver imports every plugin before it checks the config's method names (``load``), so a name clash with
a built-in method, an import error or a bad ``Config`` is one line and exit code 2 before any cell runs.
Ray workers import them too: ``runtime_env`` ships the files and package directories with Ray's
``py_modules`` (so ``ray job submit`` on a remote cluster works), and each task imports the plugins by
module name (``import_on_worker``) before it builds a cell's method. A file ``my_method.py`` is imported
as the top-level module ``my_method`` everywhere, the name under which Ray's ``py_modules`` makes it
importable on the workers. Installed packages declare their methods in the ``unitta.methods`` entry-point
group instead (``unitta.methods.parts.registry``); they must be installed on every node.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from unitta.models.code_files import import_file
from unitta.schema import ConfigError

__all__ = ["Plugin", "resolve", "load", "model_builders", "module_name", "import_on_worker", "runtime_env"]


@dataclass(frozen=True)
class Plugin:
    """One resolved ``plugins:`` entry.

    spec: the entry, file and directory paths made absolute. module: the name it is imported under in
    every process. ship: the file or package directory Ray's ``py_modules`` sends to the workers (None for
    a module installed in site-packages, which every node must have).
    """

    spec: str
    module: str
    ship: Path | None


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def module_name(spec: str) -> str:
    """The module name a plugin entry is imported under: a file's stem, a directory's name, or the dotted name."""
    if _is_path(spec):
        path = Path(spec.rstrip("/\\"))
        return path.stem if path.suffix == ".py" else path.name
    return spec


def _installed(location: Path) -> bool:
    """Whether ``location`` lies in an installation directory (site-packages, the standard library)."""
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    return any(location.is_relative_to(Path(root).resolve()) for root in roots if root)


def resolve(spec: str, base_dir: str | Path | None = None, where: str = "plugins") -> Plugin:
    """The ``Plugin`` of one entry (nothing imported); a path that cannot be a plugin is a ``ConfigError``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{where}: expected a module name or a path to a .py file or package directory, got {spec!r}")
    if not _is_path(spec):
        if not all(part.isidentifier() for part in spec.split(".")):
            raise ConfigError(f"{where}: {spec!r} is neither a dotted module name nor a path (a .py file or a dir/)")
        return Plugin(spec, spec, None)
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or Path.cwd()) / path
    path = path.resolve()
    name = module_name(str(path))
    if path.suffix == ".py":
        if not path.is_file():
            raise ConfigError(f"{where}: no such file {path} (paths are relative to the config file's directory)")
    elif not (path / "__init__.py").is_file():
        raise ConfigError(f"{where}: {path} is neither a .py file nor a package directory with an __init__.py")
    if not name.isidentifier():
        raise ConfigError(f"{where}: {path.name!r} is not a valid Python module name (letters, digits, '_'); rename it")
    return Plugin(str(path), name, path)


def _check_name_free(plugin: Plugin, where: str) -> None:
    """A file or directory plugin must not shadow another module: it is imported under its bare name."""
    loaded = sys.modules.get(plugin.module)
    if loaded is not None:
        if _origin(loaded) == plugin.ship:
            return
        raise ConfigError(
            f"{where}: {plugin.spec} would be imported as {plugin.module!r}, the name of the already imported module "
            f"{_origin(loaded) or plugin.module}; rename the plugin"
        )
    try:
        found = importlib.util.find_spec(plugin.module)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin not in (None, "built-in", "frozen"):
        other = Path(found.origin).resolve()
        other = other.parent if other.name == "__init__.py" else other
        if other != plugin.ship:
            raise ConfigError(
                f"{where}: {plugin.spec} would be imported as {plugin.module!r}, which is already the name of {other}; "
                "rename the plugin"
            )


def _origin(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return path.parent if path.name == "__init__.py" else path


def _import(plugin: Plugin) -> ModuleType:
    """A dotted name through ``import``; a file or package directory by its content (``unitta.models.code_files``):
    an edited plugin is executed again and registers its methods anew."""
    if plugin.ship is None:
        return importlib.import_module(plugin.module)
    return import_file(plugin.module, plugin.ship)


def _ship_installed_or_local(plugin: Plugin, module: ModuleType) -> Plugin:
    """A dotted-name plugin outside site-packages (e.g. next to the config): ship its top-level package."""
    top = sys.modules.get(plugin.module.split(".")[0])
    location = _origin(top) if top is not None else None
    if location is None or top.__name__ == "unitta" or _installed(location):
        return plugin
    return Plugin(plugin.spec, plugin.module, location)


_PACKAGE_DIR = Path(__file__).resolve().parent


def _one_line(exc: BaseException) -> str:
    """'Type: message (at file:line)', the line being the last one in the plugin's own code."""
    text = f"{type(exc).__name__}: {exc}"
    where = None
    tb = exc.__traceback__
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if not file.startswith("<") and not Path(file).resolve().is_relative_to(_PACKAGE_DIR):
            where = f"{Path(file).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where and not isinstance(exc, SyntaxError):  # a SyntaxError's message names the file and line itself
        text += f" (at {where})"
    return " ".join(text.split())


def load(specs: Sequence[str], base_dir: str | Path | None = None, source: str | None = "<config>") -> list[Plugin]:
    """Import the plugins (built-in methods first, so a clashing name is refused) and check what they register.

    ``base_dir``: the directory relative paths start from (the config file's; default the current directory).
    Every problem is one ``ConfigError`` line naming the entry: a missing file, an import error (with the
    exception and where it was raised), a method name taken by a built-in or another plugin, a ``Config``
    that is not a frozen dataclass or whose defaults fail its own checks, a class that is not a ``TTAMethod``,
    or a plugin that registers no method. Loading the same plugin again is a no-op. ``source`` (the config file)
    starts each message, which then names the entry as ``plugins[i] (spec)``; None: ``plugin <spec>``.
    """
    from unitta.methods.parts.registry import build_config, list_methods, methods_of
    from unitta.methods.parts.tta_method import TTAMethod

    list_methods()  # the built-ins (and entry points) register first: a plugin cannot take their names
    if isinstance(specs, str) or not isinstance(specs, Sequence):
        raise ConfigError(f"{source or 'plugins'}: expected a list of modules or paths, got {specs!r}")
    loaded = []
    for i, spec in enumerate(specs):
        where = f"{source}: plugins[{i}] ({spec})" if source else f"plugin {spec}"
        plugin = resolve(spec, base_dir, where)
        if plugin.ship is not None:
            _check_name_free(plugin, where)
        try:
            module = _import(plugin)
        except ConfigError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of user code is one line
            raise ConfigError(f"{where}: cannot import it: {_one_line(exc)}") from None
        if plugin.ship is None:
            plugin = _ship_installed_or_local(plugin, module)
        names = methods_of(plugin.module)
        if not names:
            raise ConfigError(
                f"{where}: registers no method (decorate a TTAMethod subclass with @register_method('name'))"
            )
        from unitta.methods.parts.registry import method_class

        for name in names:
            cls = method_class(name)
            if not (isinstance(cls, type) and issubclass(cls, TTAMethod)):
                raise ConfigError(f"{where}: method {name!r}: {cls!r} is not a subclass of unitta.methods.TTAMethod")
            if cls.forward is TTAMethod.forward:
                raise ConfigError(f"{where}: method {name!r}: {cls.__name__} does not define forward(x)")
            try:
                build_config(cls)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}: method {name!r}: bad Config: {_one_line(exc)}") from None
        loaded.append(plugin)
    return loaded


def import_on_worker(specs: Sequence[str]) -> None:
    """Import the plugins of ``specs`` by module name, in a Ray task before it builds a method.

    The files and directories arrive through ``runtime_env`` (``py_modules``), which puts them on the worker's
    import path; modules already imported (a reused worker, ``--local``) are not imported again.
    """
    from unitta.methods.parts.registry import list_methods

    list_methods()
    for spec in specs:
        importlib.import_module(module_name(spec))


def model_builders(models: dict[str, str] | None) -> list[Plugin]:
    """The builder files of ``models`` values ``/abs/path/my_models.py:build`` (docs/own_data.md): shipped to the
    workers like plugin files, where ``unitta.models.custom`` imports them by module name if the path is absent."""
    found = []
    for spec in (models or {}).values():
        head = spec.rpartition(":")[0] if isinstance(spec, str) else ""
        if head.endswith(".py") and Path(head).is_file():
            found.append(Plugin(spec, Path(head).stem, Path(head)))
    return found


def runtime_env(plugins: Sequence[Plugin]) -> dict | None:
    """Ray's ``runtime_env`` that ships the plugins' files and package directories to every worker, or None."""
    ship = sorted({str(p.ship) for p in plugins if p.ship is not None})
    return {"py_modules": ship} if ship else None
