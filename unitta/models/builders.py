"""A user's model builder, ``my_models.py:build`` or ``my_pkg.models:build`` (docs/own_data.md, "Your model").

Its identity is what it computes with, not where it lies: the file's name and the SHA-256 of its content
(``builder_identity``). A copied or moved project keeps every cell id; an edit of the builder's code gives new
ones (a resumed sweep never reuses a row of the old model). Importing it and calling it turn whatever the user's
code does wrong (it does not parse, raises, calls ``sys.exit``, takes other arguments, returns no module) into
one ``ValueError`` line naming the file, so a config check says it before the first cell. No torch here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from unitta.models.code_files import import_file, import_named
from unitta.models.digest import checkpoint_digest

__all__ = ["KINDS", "builder_identity", "builder_source", "call_builder", "check_builder_exit", "is_builder",
           "module_input_size"]

KINDS = ("torchvision", "timm")  # any other '<module>:<function>' is a builder


def is_builder(spec: str | None) -> TypeGuard[str]:
    """Whether ``spec`` names a user's builder function (not a zoo name, not ``torchvision:`` / ``timm:``)."""
    return isinstance(spec, str) and ":" in spec and spec.rpartition(":")[0] not in KINDS


def _module_name(head: str) -> str:
    return Path(head).stem if head.endswith(".py") else head


def builder_source(spec: str) -> Path | None:
    """The file that holds the builder's code: the ``.py`` path, or where Python finds the module (a shipped file
    on a Ray worker's import path, an installed package); None when there is none."""
    head = spec.rpartition(":")[0]
    if head.endswith(".py") and Path(head).is_file():
        return Path(head)
    try:
        found = importlib.util.find_spec(_module_name(head))
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and Path(origin).is_file() else None


def builder_identity(spec: str) -> tuple[str, str | None]:
    """(the builder's portable name, ``my_models.py:build``; the SHA-256 of its file, None when there is none)."""
    head, _, function = spec.rpartition(":")
    name = f"{Path(head).name}:{function}" if head.endswith(".py") else spec
    source = builder_source(spec)
    return name, None if source is None else checkpoint_digest(source)


def _where(err: BaseException, path: str) -> str:
    """' (my_models.py, line 3)': the deepest frame of the user's file in ``err``'s traceback."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).name == Path(path).name]
    return f" ({Path(path).name}, line {frames[-1].lineno})" if frames else ""


def _import(spec: str) -> Any:
    """The builder's module, by content (``unitta.models.code_files``): an edited file runs its new code."""
    head, _, function = spec.rpartition(":")
    name = _module_name(head)
    path = Path(head)
    try:
        if head.endswith(".py") and path.is_file():
            return import_file(name, path)
        return import_named(name)
    except SyntaxError as err:
        at = f"line {err.lineno}: " if err.lineno is not None else ""  # null bytes: no line (not a text file?)
        raise ValueError(f"model={spec}: {Path(err.filename or head).name} does not parse: {at}{err.msg}") from None
    except ImportError as err:
        if head.endswith(".py") and getattr(err, "name", None) == name:  # the file itself, neither here nor shipped
            raise ValueError(f"model={spec}: no such file {head} (a builder's path is relative to the config file's "
                             "directory)") from None
        raise ValueError(f"model={spec}: cannot import {name!r} ({err}){_where(err, head)}".replace("\n", " ")) \
            from None
    except SystemExit as err:
        raise ValueError(f"model={spec}: importing {Path(head).name} calls sys.exit({err.code}); a builder file "
                         "must only define functions") from None
    except Exception as err:  # noqa: BLE001 - whatever the user's file does wrong is reported as the file's error
        raise ValueError(f"model={spec}: importing {Path(head).name} raised {type(err).__name__}: {err}"
                         f"{_where(err, head)}".replace("\n", " ")) from None


def module_input_size(spec: str) -> Any:
    """The builder file's module-level ``input_size`` (docs/own_data.md, "Your model"), or None."""
    return getattr(_import(spec), "input_size", None)


def call_builder(spec: str, num_classes: int) -> Any:
    """``function(num_classes=num_classes)`` of the builder ``spec``; its failures as one ``ValueError`` line."""
    head, _, function = spec.rpartition(":")
    build: Callable | None = getattr(_import(spec), function, None)
    if not callable(build):
        raise ValueError(f"model={spec}: {Path(head).name} has no function {function!r}")
    try:
        return build(num_classes=num_classes)
    except SystemExit as err:
        raise ValueError(f"model={spec}: {function}(num_classes) calls sys.exit({err.code}); return the model "
                         "instead") from None
    except TypeError as err:
        if err.__traceback__ is not None and err.__traceback__.tb_next is None:  # the call itself: its signature
            raise ValueError(f"model={spec}: a builder is {function}(num_classes) -> nn.Module; calling it "
                             f"gave: {err}") from None
        raise ValueError(f"model={spec}: {function}(num_classes={num_classes}) raised TypeError: {err}"
                         f"{_where(err, head)}".replace("\n", " ")) from None
    except Exception as err:  # noqa: BLE001 - the user's code: its error, one line, named as theirs
        raise ValueError(f"model={spec}: {function}(num_classes={num_classes}) raised {type(err).__name__}: {err}"
                         f"{_where(err, head)}".replace("\n", " ")) from None


_OK = "unitta-builder-returned"  # the child's last stdout line once the builder returned
_CHILD = f"""
import sys
from unitta.models.builders import call_builder
try:
    call_builder(sys.argv[1], 10)
except ValueError as err:
    print(err, file=sys.stderr)
    sys.exit(2)
print({_OK!r}, flush=True)
"""
_checked: set[tuple[str, str | None]] = set()
CHILD_TIMEOUT_S = 600  # importing torch and building a large model on a loaded machine: minutes at most


def check_builder_exit(spec: str) -> None:
    """Call the builder once in a child Python whose exit is read, before the driver calls it: code that ends the
    process (``os._exit``, a crash in native code, being killed) would end the driver, silently with ``os._exit(0)``.
    Its own failures are the same one ``ValueError`` line as ``call_builder``'s. Once per file content."""
    key = (spec, builder_identity(spec)[1])
    if key in _checked:
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    head, _, function = spec.rpartition(":")
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True, env=env,
                              timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ValueError(f"model={spec}: {function}(num_classes) did not return in {CHILD_TIMEOUT_S} s") from None
    if done.returncode == 2 and done.stderr.strip():
        raise ValueError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0 or not done.stdout.rstrip().endswith(_OK):
        how = (f"was killed by signal {-done.returncode}" if done.returncode < 0
               else f"ended the process (exit code {done.returncode})")
        raise ValueError(f"model={spec}: {function}(num_classes) in {Path(head).name} {how} instead of returning; "
                         "a builder must return the model, never exit (docs/own_data.md)")
    _checked.add(key)
