"""`python -m unitta.models train fmnist` end to end on a subset."""

import pytest
import torch

from unitta.models.__main__ import main
from unitta.models.resnet import resnet20
from unitta.models.train import TrainConfig
from unitta.models.vit import vit_tiny


def test_cli_trains_and_writes_a_float32_state_dict(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "sub" / "r20.pt"
    assert main(["train", "fmnist", "--epochs", "1", "--limit", "256", "--threads", "1", "--out", str(out)]) == 0
    assert "clean Fashion-MNIST test error" in capsys.readouterr().out
    state = torch.load(out, weights_only=True)
    assert all(v.dtype in (torch.float32, torch.int64) for v in state.values())
    model = resnet20()
    model.load_state_dict(state)  # strict: exactly the ResNet-20's keys
    assert list(tmp_path.joinpath("sub").iterdir()) == [out]  # no temporary file left behind


def test_cli_trains_the_vit_with_its_recipe(tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "vit.pt"
    args = ["train", "fmnist", "--arch", "vit_tiny", "--epochs", "1", "--limit", "256", "--threads", "1"]
    assert main(args + ["--out", str(out)]) == 0
    assert "clean Fashion-MNIST test error" in capsys.readouterr().out
    vit_tiny().load_state_dict(torch.load(out, weights_only=True))  # strict: exactly the ViT's keys
    cfg = TrainConfig(arch="vit_tiny")
    assert (cfg.epochs, cfg.max_lr, cfg.weight_decay) == (30, 2e-3, 0.05)  # the recipe of docs/models.md
    assert (TrainConfig().epochs, TrainConfig().max_lr) == (3, 0.2)  # the ResNet-20's, unchanged


def test_same_seed_same_weights(tmp_path):
    torch.set_num_threads(1)
    args = ["train", "fmnist", "--epochs", "1", "--limit", "128", "--threads", "1", "--out"]
    main(args + [str(tmp_path / "a.pt")])
    main(args + [str(tmp_path / "b.pt")])
    a, b = torch.load(tmp_path / "a.pt"), torch.load(tmp_path / "b.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "kwargs",
    [{"epochs": 0}, {"batch_size": 1}, {"max_lr": 0.0}, {"shift": 9}, {"threads": 0}, {"limit": 10}, {"arch": "vit"}],
)
def test_bad_config(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TrainConfig(**kwargs)


def test_cli_rejects_bad_values(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "fmnist", "--epochs", "0"])
    assert exit_info.value.code == 2 and "epochs=0" in capsys.readouterr().err
