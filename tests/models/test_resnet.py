"""The embedded CIFAR-style ResNet-20 and the training helpers (docs/models.md)."""

import numpy as np
import pytest
import torch
from torch import nn

from unitta.models.resnet import CifarResNet, resnet20
from unitta.models.train import augment, build_resnet, pad_to_32, to_input
from unitta.nn.batchnorm import named_batchnorms


def test_resnet20_size_and_layout():
    model = resnet20()
    # 272k parameters (docs/models.md)
    assert sum(p.numel() for p in model.parameters()) == 272_474
    names = [name for name, _ in named_batchnorms(model)]
    # stem BN + 9 blocks x 2 BNs + the 2 projection shortcuts of stages 2 and 3
    assert len(names) == 1 + 9 * 2 + 2
    assert names[0] == "bn1" and "layer2.0.bn1" in names and "layer3.0.shortcut.1" in names
    assert isinstance(model.fc, nn.Linear) and model.fc.out_features == 10
    assert model.layer2[0].bn1.num_features == 32


def test_forward_shape_and_normalisation_inside():
    model = build_resnet(20, seed=0).eval()
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    out = model(x)
    assert out.shape == (3, 10) and torch.isfinite(out).all()
    # the normalisation buffers travel with the state_dict
    assert {"norm.mean", "norm.std"} <= set(model.state_dict())


def test_build_resnet_is_seeded_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = build_resnet(8, seed=1), build_resnet(8, seed=1), build_resnet(8, seed=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a.conv1.weight, b.conv1.weight)
    assert not torch.equal(a.conv1.weight, c.conv1.weight)


@pytest.mark.parametrize("kwargs", [{"depth": 21}, {"depth": 2}, {"num_classes": 1}, {"width": 0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        CifarResNet(**kwargs)


def test_pad_and_input_conversion():
    images = np.full((2, 28, 28), 255, dtype=np.uint8)
    padded = pad_to_32(images)
    assert padded.shape == (2, 32, 32) and padded[:, :2].max() == 0 and padded[:, 2:30, 2:30].min() == 255
    x = to_input(padded)
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32 and float(x.max()) == 1.0
    with pytest.raises(ValueError, match="images.shape"):
        pad_to_32(np.zeros((2, 32, 32), dtype=np.uint8))


def test_augment_is_a_shift_or_flipped_shift():
    gen = torch.Generator().manual_seed(0)
    batch = torch.randint(1, 256, (64, 32, 32), generator=gen, dtype=torch.int32).to(torch.uint8)
    out = augment(batch, 2, torch.Generator().manual_seed(5))
    assert torch.equal(out, augment(batch, 2, torch.Generator().manual_seed(5)))
    padded = torch.nn.functional.pad(batch, (2, 2, 2, 2))
    flips = 0
    for i in range(len(batch)):
        matches = [
            (dy, dx, flip)
            for dy in range(5)
            for dx in range(5)
            for flip in (False, True)
            if torch.equal(out[i], (lambda w: w.flip(-1) if flip else w)(padded[i, dy : dy + 32, dx : dx + 32]))
        ]
        assert len(matches) == 1, f"image {i}: {matches}"
        flips += matches[0][2]
    # flip probability 1/2: 64 images, 4 standard deviations = 16
    assert abs(flips - 32) <= 16
