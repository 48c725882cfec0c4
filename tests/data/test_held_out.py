"""The four held-out validation corruptions (speckle_noise, gaussian_blur, spatter, saturate): generated for
Fashion-MNIST-C like the 15, read from the files CIFAR-10-C / ImageNet-C ship, checked like the rest."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.data.test_loaders import _write_imagenet_c
from unitta.data import CORRUPTIONS, HELD_OUT_CORRUPTIONS, load_dataset
from unitta.data.__main__ import main as data_main
from unitta.data.arrays import balanced_subset
from unitta.data.check import check_dataset
from unitta.data.corruptions import corrupt
from unitta.data.fmnist_c import padded_test_set
from unitta.data.records import RECORDS

N = 500  # images per held-out domain for the error check (50 per class)

# Source error (%) of the embedded ResNet-20 at severity 5 on the full held-out Fashion-MNIST-C (10,000 images per
# corruption): `python bench/model_table.py --held-out` (docs/models.md).
FULL_SET_ERROR = {"speckle_noise": 11.0, "gaussian_blur": 20.6, "spatter": 15.8, "saturate": 8.6}


def test_the_held_out_names_are_hendrycks_four_and_disjoint_from_the_15():
    assert HELD_OUT_CORRUPTIONS == ("speckle_noise", "gaussian_blur", "spatter", "saturate")
    assert not set(HELD_OUT_CORRUPTIONS) & set(CORRUPTIONS)


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("fmnist")
    return root, load_dataset("fmnist-c", data_dir=root, corruptions=HELD_OUT_CORRUPTIONS, n_per_domain=N)


def test_fmnist_c_generates_and_caches_the_held_out_domains(held_out, capsys):
    root, dataset = held_out
    assert dataset.domain_names == [f"{c}_5" for c in HELD_OUT_CORRUPTIONS]
    assert len(dataset) == 4 * N
    assert (np.bincount(dataset.labels[:N], minlength=10) == N // 10).all()
    again = load_dataset("fmnist-c", data_dir=root, corruptions=["spatter"], n_per_domain=N)
    assert "preparing" not in capsys.readouterr().err  # cached: read, not regenerated
    assert torch.equal(again.get_batch(np.arange(N)), dataset.get_batch(np.arange(2 * N, 3 * N)))
    assert check_dataset("fmnist-c", root, corruptions=list(HELD_OUT_CORRUPTIONS), n_per_domain=N) == []


def test_held_out_domains_differ_from_clean_and_from_the_15(tmp_path):
    n = 20  # the first 2 images of each class, in the same order in every domain
    dataset = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=CORRUPTIONS + HELD_OUT_CORRUPTIONS, n_per_domain=n)
    images, labels = padded_test_set()
    clean = torch.as_tensor(images[balanced_subset(labels, n, 10)]).permute(0, 3, 1, 2).float() / 255
    domains = [dataset.get_batch(np.arange(d * n, (d + 1) * n)) for d in range(dataset.num_domains)]
    assert torch.equal(torch.as_tensor(dataset.labels[:n]), torch.as_tensor(labels[balanced_subset(labels, n, 10)]))
    for d, name in enumerate(dataset.domain_names[len(CORRUPTIONS):], start=len(CORRUPTIONS)):
        assert (domains[d] - clean).abs().mean() > 1 / 255, f"{name} equals the clean images"
        for e, other in enumerate(dataset.domain_names):
            if e != d:
                assert (domains[d] - domains[e]).abs().mean() > 1 / 255, f"{name} equals {other}"


def test_the_source_error_on_each_held_out_corruption_is_in_its_band(held_out, one_thread):
    """Error on 500 images per corruption (50 per class) within 3 binomial standard errors of the full-set
    figure; Gaussian blur and spatter (full set: 12.4 and 7.6 points above clean) above the same images' clean
    error, more than 3 standard errors of a difference of two error rates."""
    from unitta.models import load_model

    _, dataset = held_out
    model, _ = load_model("fmnist-c")
    images, labels = padded_test_set()
    keep = balanced_subset(labels, N, 10)
    clean = torch.as_tensor(images[keep]).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        predicted = torch.cat([model(dataset.get_batch(np.arange(s, s + 250))).argmax(1)
                               for s in range(0, len(dataset), 250)])
        clean_error = 100 * (model(clean).argmax(1) != torch.as_tensor(labels[keep])).float().mean().item()
    wrong = predicted != torch.as_tensor(dataset.labels)
    for d, name in enumerate(HELD_OUT_CORRUPTIONS):
        error = 100 * wrong[d * N : (d + 1) * N].float().mean().item()
        p = FULL_SET_ERROR[name] / 100
        tolerance = 100 * 3 * math.sqrt(p * (1 - p) / N)
        assert abs(error - FULL_SET_ERROR[name]) <= tolerance, (name, error, FULL_SET_ERROR[name], tolerance)
        if name in ("gaussian_blur", "spatter"):
            q = clean_error / 100
            assert error - clean_error > 100 * 3 * math.sqrt((p * (1 - p) + q * (1 - q)) / N), (name, error, clean_error)


def test_load_dataset_rejects_a_name_that_is_neither():
    with pytest.raises(ValueError, match="speckle'.*held-out ones \\(speckle_noise, gaussian_blur") as info:
        load_dataset("fmnist-c", corruptions=["speckle"], n_per_domain=10)
    assert "unknown: speckle" in str(info.value) and "\n" not in str(info.value)


def test_the_held_out_corruptions_behave_as_defined(held_out):
    images, _ = padded_test_set()
    x = images[:40]
    # speckle noise is multiplicative: black pixels (the zero padding) stay black
    assert (corrupt(x, "speckle_noise", 5)[:, :2] == 0).all()
    # Gaussian blur: scikit-image's gaussian (nearest edges, truncate 4), as the reference calls it
    from skimage.filters import gaussian

    expected = (np.clip(gaussian(x[0] / 255.0, sigma=1.0, channel_axis=-1), 0, 1) * 255).astype(np.uint8)
    assert np.abs(corrupt(x[:1], "gaussian_blur", 5)[0].astype(int) - expected).max() <= 1
    # saturate only scales the saturation at severities 1-3: grey images are unchanged; 4-5 add colour
    assert (corrupt(x, "saturate", 2) == x).all()
    tinted = corrupt(x, "saturate", 5)
    assert (tinted[..., 0] >= tinted[..., 1]).all() and (tinted[..., 0] > tinted[..., 1]).any()
    # per-image randomness: a subset equals the same rows of the full batch, and the seed matters
    assert (corrupt(x[5:9], "spatter", 3, image_ids=np.arange(5, 9)) == corrupt(x, "spatter", 3)[5:9]).all()
    assert (corrupt(x, "spatter", 5, seed=1) != corrupt(x, "spatter", 5, seed=0)).any()


# ---------------------------------------------------------------------- the datasets that ship them
def _sparse_cifar_c(root, corruptions):
    folder = root / "CIFAR-10-C"
    folder.mkdir(parents=True)
    np.save(folder / "labels.npy", np.tile(np.repeat(np.arange(10, dtype=np.uint8), 1000), 5))
    for i, name in enumerate(corruptions):
        data = np.lib.format.open_memmap(folder / f"{name}.npy", "w+", np.uint8, (50_000, 32, 32, 3))
        data[40_000:50_000, 0, 0, 0] = i + 1  # severity 5 rows carry the file's number
        data.flush()
        del data
    return folder


def test_cifar10_c_reads_the_held_out_files_and_checks_them(tmp_path, capsys):
    folder = _sparse_cifar_c(tmp_path, HELD_OUT_CORRUPTIONS)
    dataset = load_dataset("cifar10-c", data_dir=tmp_path, corruptions=HELD_OUT_CORRUPTIONS, n_per_domain=10)
    assert dataset.domain_names == [f"{c}_5" for c in HELD_OUT_CORRUPTIONS]
    marks = (dataset.get_batch(np.arange(0, 40, 10))[:, 0, 0, 0] * 255).round().int().tolist()
    assert marks == [1, 2, 3, 4]
    assert check_dataset("cifar10-c", tmp_path, corruptions=list(HELD_OUT_CORRUPTIONS)) == []
    assert data_main(["check", "cifar10-c", "--dir", str(tmp_path), "--corruptions", "held_out"]) == 0
    (folder / "spatter.npy").unlink()
    problems = check_dataset("cifar10-c", tmp_path, corruptions=list(HELD_OUT_CORRUPTIONS))
    assert len(problems) == 1 and "spatter.npy: missing" in problems[0] and "fetch cifar10-c" in problems[0]
    with pytest.raises(FileNotFoundError, match="spatter.npy not found.*held-out corruptions"):
        load_dataset("cifar10-c", data_dir=tmp_path, corruptions=["spatter"], n_per_domain=10)
    problem = RECORDS["cifar10-c"].data_problem(tmp_path, 5, tmp_path, corruptions=HELD_OUT_CORRUPTIONS)
    assert "spatter.npy" in problem
    assert RECORDS["cifar10-c"].data_problem(tmp_path, 5, tmp_path, corruptions=("saturate",)) is None


def test_imagenet_c_reads_the_extra_folders_and_names_extra_tar_when_missing(tmp_path):
    _write_imagenet_c(tmp_path, ["speckle_noise", "saturate"], [5], ["n01", "n02"], per_class=2)
    dataset = load_dataset("imagenet-c", data_dir=tmp_path, corruptions=["speckle_noise", "saturate"])
    assert dataset.domain_names == ["speckle_noise_5", "saturate_5"] and len(dataset) == 8
    problems = check_dataset("imagenet-c", tmp_path, corruptions=["spatter"])
    assert len(problems) == 1 and "spatter/5: missing" in problems[0] and "extra.tar" in problems[0]
    problem = RECORDS["imagenet-c"].data_problem(tmp_path, 5, tmp_path, corruptions=HELD_OUT_CORRUPTIONS)
    assert "extra.tar" in problem


def test_cli_prepares_and_checks_the_held_out_corruptions(tmp_path, capsys):
    common = ["--n-per-domain", "10", "--data-dir", str(tmp_path)]
    assert data_main(["prepare", "fmnist-c", *common, "--corruptions", "held_out"]) == 0
    assert data_main(["check", "fmnist-c", *common, "--corruptions", "held_out"]) == 0
    assert data_main(["check", "fmnist-c", *common, "--corruptions", "spatter,saturate"]) == 0
    assert data_main(["check", "fmnist-c", *common]) == 1  # the 15 are not prepared in this cache
    assert "no motion_blur" in capsys.readouterr().err
    assert data_main(["prepare", "fmnist-c", *common, "--corruptions", "speckle"]) == 2
    assert "unknown speckle" in capsys.readouterr().err
