"""The natural-shift records (docs/own_data.md): ``unitta data list`` names the seven, a sweep over one without its
files stops in ``--dry-run`` with one line naming the missing folder and how to get it, and a small ImageNet-R tree
runs a TEST cell whose model keeps only the folder's classes of its 1000 outputs (the output mask)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from unitta.cell import Cell
from unitta.data.__main__ import main as data_main
from unitta.data.natural import imagenet_wnids, output_mask
from unitta.data.records import NATURAL_SHIFT
from unitta.evaluate import evaluate
from unitta.sweep import main as sweep_main

pytestmark = pytest.mark.usefixtures("one_thread")
SEVEN = ("imagenet-r", "imagenet-a", "imagenet-sketch", "imagenet-v2", "imagenet-d109", "domainnet126", "cifar10.1")


def test_data_list_names_the_seven(capsys):
    assert set(NATURAL_SHIFT) == set(SEVEN)
    assert data_main(["list"]) == 0
    out = capsys.readouterr().out
    for name in SEVEN:
        assert f"\n{name}" in out


def test_dry_run_without_files_names_the_folder(tmp_path, capsys):
    config = tmp_path / "r.yaml"
    config.write_text(f"datasets: [imagenet-r]\ndata_dir: {tmp_path / 'none'}\nmethods: [test]\nsettings: [i111]\n"
                      f"output: {tmp_path / 'out'}\n")
    assert sweep_main([str(config), "--dry-run"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "imagenet-r" in line]
    assert len(lines) == 1
    assert f"{tmp_path / 'none' / 'imagenet-r'} not found" in lines[0]
    assert "https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar" in lines[0]
    assert not (tmp_path / "out").exists()


def _tree(root, name, wnids, rng):
    for wnid in wnids:
        (root / name / wnid).mkdir(parents=True)
        for j in range(2):
            Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(root / name / wnid / f"{j}.jpg")


def test_a_single_domain_set_needs_a_mixture(tmp_path):
    from unitta.run.checks import problems

    _tree(tmp_path, "imagenet-r", ["n01498041", "n01531178"], np.random.default_rng(0))
    (found,) = problems([Cell(dataset="imagenet-r", data_dir=str(tmp_path))])
    assert "one domain (imagenet-r)" in found and "datasets_as_domains" in found


def test_mixture_of_imagenet_r_and_a_with_output_mask(tmp_path):
    shared = ["n01498041", "n01531178", "n01534433"]  # in both ImageNet-R's and ImageNet-A's 200 (timm's lists)
    rng = np.random.default_rng(0)
    _tree(tmp_path, "imagenet-r", [*shared, "n01443537"], rng)  # n01443537: ImageNet-R only, left out
    _tree(tmp_path, "imagenet-a", shared, rng)
    outputs = output_mask("imagenet-r", shared)
    assert [imagenet_wnids()[k] for k in outputs] == shared
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None)
    torch.save(net.state_dict(), tmp_path / "r18.pth")
    cell = Cell(dataset="mixture", datasets_as_domains=("imagenet-r", "imagenet-a"), data_dir=str(tmp_path),
                model="torchvision:resnet18", checkpoint=str(tmp_path / "r18.pth"), method="test", sampler="sorted",
                setting="1111", batch_size=12)
    from unitta.run.checks import problems

    assert problems([cell]) == []
    row = evaluate(cell)
    from unitta.evaluate.inputs import load_cell_dataset
    from unitta.models.catalog import IMAGENET_MEAN, IMAGENET_STD

    data = load_cell_dataset(cell)
    assert data.domain_names == ["imagenet-r", "imagenet-a"] and data.meta["classes"] == shared
    x = data.get_batch(np.arange(len(data)))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        predicted = net.eval()((x - mean) / std)[:, outputs].argmax(1).numpy()
    assert row["n_samples"] == 12
    assert row["n_correct"] == int((predicted == data.labels).sum())


def test_a_wnid_outside_the_mask_is_refused(tmp_path):
    with pytest.raises(ValueError, match="n99999999.*not one of the 200 wnids"):
        output_mask("imagenet-a", ["n99999999"])


def test_fetch_cifar101_from_a_mirror_then_check(tmp_path, monkeypatch, capsys):
    import io

    from tests.local_http import Served, serve

    def npy(array) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array)
        return buffer.getvalue()

    rng = np.random.default_rng(0)
    files = {"/d/cifar10.1_v6_data.npy": npy(rng.integers(0, 256, (2000, 32, 32, 3), dtype=np.uint8)),
             "/d/cifar10.1_v6_labels.npy": npy(np.repeat(np.arange(10), 200))}
    with serve(Served(files=dict(files), drop_after={"/d/cifar10.1_v6_data.npy": 100_000})) as served:
        monkeypatch.setenv("UNITTA_CIFAR101_URL", f"{served.base}/d/")
        assert data_main(["fetch", "cifar10.1", "--dir", str(tmp_path), "--quiet"]) == 0
    folder = tmp_path / "CIFAR-10.1"
    assert (folder / "cifar10.1_v6_data.npy").read_bytes() == files["/d/cifar10.1_v6_data.npy"]
    assert "cifar10.1_v6_labels.npy" in (folder / "MD5SUMS").read_text()
    assert data_main(["check", "cifar10.1", "--dir", str(tmp_path)]) == 0
    from unitta.data import load_dataset

    data = load_dataset("cifar10.1", data_dir=tmp_path, n_per_domain=20)
    assert data.domain_names == ["cifar10.1"] and len(data) == 20


def test_data_check_compares_a_natural_set_with_its_release(tmp_path, capsys):
    _tree(tmp_path, "imagenet-a", ["n01498041", "n01531178"], np.random.default_rng(0))
    assert data_main(["check", "imagenet-a", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "2 class folders, the release has 200" in err and "4 images, the release has 7,500" in err
