"""``python -m unitta.data check``: layout, shapes, sizes, label counts and checksums, one line per problem."""

import numpy as np
import pytest

from unitta.data import CORRUPTIONS, prepare_fmnist_c
from unitta.data.__main__ import main
from unitta.data.check import check_dataset
from unitta.data.fetch import write_md5sums

SHAPE = (50_000, 32, 32, 3)  # CIFAR-10-C: 5 severities x 10,000 images


def _cifar10_c(root, corruptions=CORRUPTIONS):
    """A full-shape CIFAR-10-C layout; the image files are sparse (zeros), so it costs no disk or time."""
    folder = root / "CIFAR-10-C"
    folder.mkdir(parents=True)
    labels = np.tile(np.random.default_rng(0).permutation(np.repeat(np.arange(10, dtype=np.uint8), 1000)), 5)
    np.save(folder / "labels.npy", labels)
    for corruption in corruptions:
        np.lib.format.open_memmap(folder / f"{corruption}.npy", mode="w+", dtype=np.uint8, shape=SHAPE).flush()
    return folder


def test_a_complete_layout_passes_and_the_cli_exits_0(tmp_path, capsys):
    _cifar10_c(tmp_path)
    assert check_dataset("cifar10-c", tmp_path) == []
    assert main(["check", "cifar10-c", "--dir", str(tmp_path)]) == 0
    assert "ok" in capsys.readouterr().out


def test_each_problem_is_one_line_naming_the_file_and_the_fix(tmp_path, capsys):
    folder = _cifar10_c(tmp_path)
    (folder / "snow.npy").unlink()
    with open(folder / "fog.npy", "r+b") as handle:  # a truncated copy
        handle.truncate(1_000_000)
    np.save(folder / "frost.npy", np.zeros((10_000, 32, 32, 3), np.uint8))  # one severity only
    labels = np.load(folder / "labels.npy")
    labels[20_000] = (labels[20_000] + 1) % 10  # severity 3 loses a balanced class count
    np.save(folder / "labels.npy", labels)
    problems = check_dataset("cifar10-c", tmp_path)
    assert len(problems) == 4
    text = "\n".join(problems)
    assert f"{folder / 'snow.npy'}: missing" in text
    assert f"{folder / 'fog.npy'}: 1,000,000 bytes, expected 153,600,128 (truncated" in text
    assert f"{folder / 'frost.npy'}: uint8 (10000, 32, 32, 3), expected uint8 (50000, 32, 32, 3)" in text
    assert "rows 20000:30000 (severity 3) hold" in text
    assert all("python -m unitta.data fetch cifar10-c" in p and "\n" not in p for p in problems)
    assert main(["check", "cifar10-c", "--dir", str(tmp_path)]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 4


def test_missing_folder_says_to_fetch(tmp_path):
    assert check_dataset("cifar100-c", tmp_path) == [
        f"{tmp_path / 'CIFAR-100-C'}: missing; run `python -m unitta.data fetch cifar100-c --dir {tmp_path}`"
    ]


def test_md5_compares_with_the_fetch_manifest(tmp_path):
    folder = _cifar10_c(tmp_path, corruptions=["fog"])
    assert check_dataset("cifar10-c", tmp_path, md5=True, corruptions=["fog"]) == [
        f"{folder / 'MD5SUMS'}: missing, so checksums cannot be checked (the folder was not made by "
        "`python -m unitta.data fetch`); refetch it, or check without --md5"
    ]
    write_md5sums(folder)
    assert check_dataset("cifar10-c", tmp_path, md5=True, corruptions=["fog"]) == []
    with open(folder / "fog.npy", "r+b") as handle:  # same size, one byte changed
        handle.seek(5_000_000)
        handle.write(b"\x01")
    problems = check_dataset("cifar10-c", tmp_path, md5=True, corruptions=["fog"])
    assert problems == [
        f"{folder / 'fog.npy'}: md5 differs from {folder / 'MD5SUMS'} (damaged or modified); run `python -m "
        f"unitta.data fetch cifar10-c --dir {tmp_path}` (after deleting {folder})"
    ]
    assert check_dataset("cifar10-c", tmp_path, corruptions=["fog"]) == []  # shapes alone cannot see it


def test_fmnist_c_cache_and_its_sha256(tmp_path):
    folder = prepare_fmnist_c(tmp_path, n_per_domain=10, progress=False)
    assert check_dataset("fmnist-c", tmp_path, md5=True, n_per_domain=10) == []
    path = folder / "fog.npy"
    data = bytearray(path.read_bytes())
    data[128:] = bytes(len(data) - 128)  # zero the pixels, keep the header
    path.write_bytes(bytes(data))
    for md5 in (False, True):  # the stored sums are checked by default: the loader would refuse this file
        problems = check_dataset("fmnist-c", tmp_path, md5=md5, n_per_domain=10)
        assert len(problems) == 1 and problems[0].startswith(f"{path}: sha256 differs"), problems


def test_fmnist_c_check_cli_fails_a_damaged_cache_without_md5(tmp_path, capsys):
    folder = prepare_fmnist_c(tmp_path, n_per_domain=10, progress=False)
    assert main(["check", "fmnist-c", "--dir", str(tmp_path), "--n-per-domain", "10"]) == 0
    assert "ok (sha256 checked)" in capsys.readouterr().out
    path = folder / "fog.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one byte: same size and header
    path.write_bytes(bytes(data))
    assert main(["check", "fmnist-c", "--dir", str(tmp_path), "--n-per-domain", "10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{path}: sha256 differs"), err


def test_imagenet_c_counts_class_folders(tmp_path):
    assert check_dataset("imagenet-c", tmp_path)[0].startswith(f"{tmp_path / 'ImageNet-C'}: missing")
    for severity in range(1, 6):
        for wnid in ("n01440764", "n01443537"):
            (tmp_path / "ImageNet-C" / "fog" / str(severity) / wnid).mkdir(parents=True)
    problems = check_dataset("imagenet-c", tmp_path, corruptions=["fog"])
    assert problems == [
        f"{tmp_path / 'ImageNet-C' / 'fog' / '5'}: 2 class folders, expected the same 1000 wnids in every domain; "
        f"see `python -m unitta.data fetch imagenet-c --dir {tmp_path}` for how to install it"
    ]
    assert len(check_dataset("imagenet-c", tmp_path, corruptions=["fog"], severities=[1, 2, 3, 4, 5])) == 5
    with pytest.raises(ValueError, match="--md5: ImageNet-C has no checksum manifest"):
        check_dataset("imagenet-c", tmp_path, md5=True)


def test_unknown_corruption_is_a_usage_error(tmp_path, capsys):
    assert main(["check", "cifar10-c", "--dir", str(tmp_path), "--corruptions", "fogg"]) == 2
    assert "unknown fogg" in capsys.readouterr().err
