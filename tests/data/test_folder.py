"""Image folders as datasets (docs/own_data.md): a folder written from Fashion-MNIST-C images (3 corruptions as
domains, 10 class folders, 3 images each) runs TEST and TENT cells with the embedded ResNet-20, and TEST's error
over the folder equals the model's error on the same PNG files computed directly; problems are one line naming
the path; the folder's digest is in the cell identity."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from unitta.cell import Cell
from unitta.data.export import export_fmnist_c
from unitta.data.folder import FolderProblem, index_folder
from unitta.evaluate import evaluate, run_cell

pytestmark = pytest.mark.usefixtures("one_thread")
CORRUPTIONS = ["fog", "snow", "contrast"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root, written = export_fmnist_c(tmp_path_factory.mktemp("own") / "images", CORRUPTIONS, n_per_domain=30)
    assert written == 90
    return root


def test_default_cell_ids_unchanged():
    # computed on the code before image folders, custom models and their Cell fields existed
    assert Cell().cell_id() == "fmnist-c__test__i111__b30060e13390447c"
    assert Cell(dataset="cifar10-c", method="tent", setting="nui1").cell_id() == "cifar10-c__tent__nui1__03d20a8d63b57a4a"


def test_index_reads_domains_and_classes(folder):
    index = index_folder(folder)
    assert index.domain_names == sorted(CORRUPTIONS)
    assert len(index.classes) == 10 and index.classes[0] == "0_tshirt_top"
    assert (index.counts == 3).all() and not index.problems


def test_test_error_equals_direct_error(folder, embedded_model):
    # the sorted order shows every image once, so the stream's error is the error over the folder
    row = evaluate(Cell(dataset="folder", data_dir=str(folder), method="test", sampler="sorted", setting="1111"))
    model, _ = embedded_model
    paths = sorted(folder.glob("*/*/*.png"))
    classes = sorted({p.parent.name for p in paths})
    x = torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths])).permute(0, 3, 1, 2)
    labels = torch.tensor([classes.index(p.parent.name) for p in paths])
    with torch.no_grad():
        wrong = int((model(x.float() / 255).argmax(1) != labels).sum())
    assert row["n_samples"] == len(paths) == 90
    assert row["n_samples"] - row["n_correct"] == wrong
    cached = Cell(dataset="folder", data_dir=str(folder), method="test", sampler="sorted", setting="1111",
                  cache_images=True)
    assert cached.cell_id() == row["cell_id"]  # where the pixels wait is placement
    assert evaluate(cached)["n_correct"] == row["n_correct"]


def test_tent_runs_on_the_folder(folder):
    row = run_cell(Cell(dataset="folder", data_dir=str(folder), method="tent", setting="i111", batch_size=16))
    assert row["status"] == "ok", row["error_text"]
    assert row["n_samples"] >= 90 and 0 <= row["error"] <= 100
    assert [d["name"] for d in row["per_domain"]] == sorted(CORRUPTIONS)
    assert [c["name"] for c in row["per_class"]] == index_folder(folder).classes  # the class folders' names


def test_identity_follows_the_folder(folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    cell = Cell(dataset="folder", data_dir=str(folder))
    assert Cell(dataset="folder", data_dir=str(copy)).cell_id() == cell.cell_id()  # a copy: same names and sizes
    next(copy.glob("fog/*/*.png")).unlink()
    assert Cell(dataset="folder", data_dir=str(copy)).cell_id() != cell.cell_id()
    assert Cell(dataset="folder", data_dir=str(folder), domains=("fog", "snow")).cell_id() != cell.cell_id()


def test_problems_name_the_path(folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    shutil.rmtree(broken / "snow" / "3_dress")
    (broken / "fog" / "1_trouser" / "00001.png").write_bytes(b"not a png")
    index = index_folder(broken)
    assert len(index.problems) == 1 and "snow/3_dress: missing" in index.problems[0]
    with pytest.raises(FolderProblem, match="snow/3_dress: missing"):
        evaluate(Cell(dataset="folder", data_dir=str(broken)))
    from unitta.data.__main__ import main

    assert main(["check", "folder", "--dir", str(broken)]) == 1
    from unitta.data.listing import check_folder_dataset

    problems = check_folder_dataset("folder", broken)
    assert len(problems) == 2 and "unreadable image" in problems[1] and "00001.png" in problems[1]
    from unitta.run.checks import problems as preflight

    found = preflight([Cell(dataset="folder", data_dir=str(broken))])
    assert len(found) == 1 and "snow/3_dress: missing" in found[0]
    too_many = preflight([Cell(dataset="folder", data_dir=str(folder), n_per_domain=50)])
    assert too_many and "n_per_domain: 50" in too_many[0]


def test_corruptions_on_a_folder_are_refused(folder):
    """A folder's domains are its sub-folders: ``corruptions:`` would be recorded but not used, so it is refused in
    one line naming ``domains:`` (a sweep's config check, exit 2)."""
    from unitta.sweep.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="domains:") as err:
        parse_config({"name": "x", "datasets": ["folder"], "data_dir": str(folder), "sampler": "sorted",
                      "methods": ["test"], "corruptions": ["snow", "brightness"]})
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="domains:"):
        Cell(dataset="folder", data_dir=str(folder), corruptions=("snow",))


def _high_bit_depth_folder(root: Path, fmnist_small) -> Path:
    """fog/snow x two classes, two images each: 16-bit grey PNGs (values x 257) and 16-bit colour PNGs."""
    import cv2

    images, labels = fmnist_small
    for domain in ("fog", "snow"):
        for k in (0, 1):
            folder = root / domain / f"class_{k}"
            folder.mkdir(parents=True)
            for j, i in enumerate(np.flatnonzero(labels == k)[:2]):
                grey = images[i, :, :, 0].astype(np.uint16) * 257
                Image.fromarray(grey).save(folder / f"{j}.png")  # mode I;16
                cv2.imwrite(str(folder / f"{j}_rgb.png"), np.stack([grey] * 3, -1))  # 16-bit RGB
    return root


def test_sixteen_bit_images_are_scaled_and_checked(tmp_path, fmnist_small, capsys):
    """16-bit PNGs decode as their 8-bit images (they decoded as white: 99.9 % of pixels 255), and ``data check``
    reports the decoded range."""
    from unitta.data.__main__ import main as data_main
    from unitta.data.imagenet_files import decode_image

    images, labels = fmnist_small
    root = _high_bit_depth_folder(tmp_path / "deep", fmnist_small)
    first = np.flatnonzero(labels == 0)[0]
    expected = np.repeat(images[first, :, :, :1], 3, axis=2)
    for name in ("0.png", "0_rgb.png"):
        decoded = decode_image(str(root / "fog" / "class_0" / name), 32)
        assert np.array_equal(decoded, expected), name
    assert data_main(["check", "folder", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    used = np.concatenate([np.flatnonzero(labels == k)[:2] for k in (0, 1)])
    assert f"decoded to 0..{int(images[used].max())} of 0..255" in out and "I;16" in out, out


def test_a_misspelt_zoo_model_for_a_folder_lists_the_models_it_can_take(folder):
    from unitta.sweep.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as err:
        parse_config({"name": "x", "datasets": ["folder"], "data_dir": str(folder), "sampler": "sorted",
                      "methods": ["test"], "models": {"folder": "resnet2O"}})
    text = str(err.value)
    assert "did you mean 'resnet20'" in text and "known: resnet20" in text and "timm:NAME" in text, text


def test_rounds_over_a_folder_are_bounded_before_the_first_cell(folder):
    """A folder's counts are on disk: the preflight applies the 10,000,000-position cap to rounds x its round."""
    from unitta.run.checks import problems

    cell = Cell(dataset="folder", data_dir=str(folder), sampler="sorted", setting="1111", rounds=1_000_000)
    (found,) = [p for p in problems([cell]) if "rounds" in p]
    assert "rounds=1000000 x 90 positions a round" in found and "use rounds <= 111111" in found
    assert not [p for p in problems([Cell(dataset="folder", data_dir=str(folder), sampler="sorted", setting="1111",
                                          rounds=3)]) if "rounds" in p]


def test_a_missing_class_folder_is_named_in_english(folder):
    problems = index_folder(folder, classes=["nope"]).problems
    assert any(p.startswith("nope: no such class folder in") for p in problems), problems


def test_the_ccc_sampler_on_a_folder_is_refused_with_the_config(folder):
    """Issue 52 weak item: ``sampler: ccc`` walks the embedded set's own corruptions; on a folder it failed in every
    cell, now it is one line with the config (exit 2 before any cell)."""
    from unitta.schema import ConfigError
    from unitta.sweep.config import parse_config

    with pytest.raises(ConfigError, match="sampler=ccc: runs on the embedded fmnist-c only"):
        parse_config({"name": "x", "datasets": ["folder"], "data_dir": str(folder), "sampler": "ccc",
                      "methods": ["test"], "settings": ["i111"]})


def test_a_single_domain_folder_is_the_same_problem_for_data_check_and_the_sweep(folder, tmp_path):
    """Issue 52 weak item: ``data check`` said ok for a one-domain folder that the sweep refuses, and the sweep
    suggested ``datasets_as_domains: [folder, ...]``, which a mixture refuses (its members are natural-shift sets)."""
    from unitta.data.__main__ import main
    from unitta.data.listing import check_folder_dataset
    from unitta.run.checks import problems as preflight

    one = tmp_path / "one"
    shutil.copytree(folder / "fog", one / "fog")
    [checked] = check_folder_dataset("folder", one)
    [found] = preflight([Cell(dataset="folder", data_dir=str(one), sampler="sorted", setting="1111")])
    assert checked in found and "at least two" in found and "datasets_as_domains" not in found, found
    assert main(["check", "folder", "--dir", str(one)]) == 1
