"""A folder that a test session builds once, even when pytest-xdist runs the session in several workers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(folder)`` once per test run; every worker gets the same folder, which its tests only read.

    Under pytest-xdist the workers' temporary roots share a parent (``PYTEST_XDIST_WORKER`` is set): the first
    worker to ask builds there under a file lock, and the others wait for it and reuse the result. A build that
    raised leaves no folder, so the next worker to ask builds it again (and fails the same way, with its own
    traceback). Without xdist this is ``build(tmp_path_factory.mktemp(name))``.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
