"""The Fashion-MNIST-C cache on shared volumes: checksums, read-only use, file modes, older caches."""

import json
import os
import stat

import numpy as np
import pytest

from tests.local_http import run_unprivileged
from unitta.data import load_dataset, prepare_fmnist_c
from unitta.data.fmnist_c import CacheError


def test_a_zeroed_file_is_an_error_naming_it_and_the_rebuild(tmp_path):
    first = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    path = tmp_path / "FashionMNIST-C-n10" / "fog.npy"
    header = len(path.read_bytes()) - first.images.nbytes
    with open(path, "r+b") as handle:  # same shape and size, pixels zeroed
        handle.seek(header)
        handle.write(bytes(first.images.nbytes))
    with pytest.raises(CacheError, match=f"{path}: contents differ from the sha256") as err:
        load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    assert f"prepare fmnist-c --data-dir {tmp_path}" in str(err.value)
    path.unlink()  # the fix the message suggests for one file: it is rebuilt
    again = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    np.testing.assert_array_equal(again.images, first.images)


def test_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o002)
    try:
        folder = prepare_fmnist_c(tmp_path, corruptions=["fog"], n_per_domain=10, progress=False)
    finally:
        os.umask(old)
    for name in ("fog.npy", "labels.npy", "meta.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o664, name


def test_a_cache_built_before_checksums_gets_them_on_first_use(tmp_path):
    folder = prepare_fmnist_c(tmp_path, corruptions=["fog"], n_per_domain=10, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    sums = meta.pop("sha256")
    (folder / "meta.json").write_text(json.dumps(meta))
    load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    assert json.loads((folder / "meta.json").read_text())["sha256"] == sums


READ_ONLY_SCRIPT = """
import sys
from unitta.data import load_dataset
from unitta.data.fmnist_c import CacheError
ds = load_dataset("fmnist-c", data_dir=sys.argv[1], corruptions=["fog"], n_per_domain=10)
print("loaded", len(ds))
try:
    load_dataset("fmnist-c", data_dir=sys.argv[1], corruptions=["snow"], n_per_domain=10)
except CacheError as err:
    print("refused", err)
"""


def test_a_read_only_cache_is_usable_and_refuses_to_grow_in_one_line(tmp_path):
    folder = prepare_fmnist_c(tmp_path, corruptions=["fog"], n_per_domain=10, progress=False)
    (folder / ".lock").unlink()  # copied without the lock file, as rsync of a cache may do
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    for path in (tmp_path, folder, *folder.iterdir()):
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        result = run_unprivileged(["-c", READ_ONLY_SCRIPT, str(tmp_path)], {})
        if result is None:
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "loaded 10"
        assert lines[1].startswith(f"refused cannot write the Fashion-MNIST-C cache {folder} (Permission denied)")
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    finally:
        for path in (tmp_path, folder, *folder.iterdir()):
            path.chmod(path.stat().st_mode | 0o200)
