"""TTAug: the mean logits over an image and its views by hand, the model never changes, both device paths agree."""

from __future__ import annotations

import copy

import pytest
import torch

from unitta.methods import get_method
from unitta.methods.norm.alpha_bn import convert_to_alpha_bn

pytestmark = pytest.mark.usefixtures("one_thread")

V = 3  # views per image: enough to average, short for the suite


def test_the_scores_are_the_mean_logits_of_each_images_views(embedded_model, fmnist_c_images):
    model, info = embedded_model
    x = fmnist_c_images[:6]
    ttaug = get_method("ttaug", model, info, n_augmentations=V)
    views = ttaug.views(x)
    assert views.shape == (6, V + 1, *x.shape[1:])
    assert torch.equal(views[:, 0], x)  # md's list starts with the image itself
    assert not torch.equal(views[:, 1], x)
    scores = ttaug.views_scores(views)
    # by hand: md's AlphaBatchNorm(alpha 0.1) over one image's V + 1 views, logits averaged (not probabilities)
    by_hand = copy.deepcopy(model).eval()
    convert_to_alpha_bn(by_hand, 0.1)
    with torch.no_grad():
        expected = torch.stack([by_hand(image_views).mean(dim=0) for image_views in views])
        source = model(x)
    torch.testing.assert_close(scores, expected)
    assert not torch.allclose(scores, source)


def test_the_model_never_changes_and_nothing_carries_over(embedded_model, fmnist_c_images):
    model, info = embedded_model
    ttaug = get_method("ttaug", model, info, n_augmentations=V)
    state = {k: v.clone() for k, v in ttaug.model.state_dict().items()}
    views = ttaug.views(fmnist_c_images[:4])
    first = ttaug.views_scores(views)
    forwards = ttaug.cost.forwards
    for i in range(3):
        ttaug(fmnist_c_images[8 * i : 8 * (i + 1)])
    assert ttaug.cost.forwards - forwards == 24 and ttaug.cost.backwards == 0  # one (V + 1)-view forward per image
    assert all(torch.equal(v, state[k]) for k, v in ttaug.model.state_dict().items())
    torch.testing.assert_close(ttaug.views_scores(views), first, rtol=0, atol=0)


def test_the_gpu_path_gives_the_cpu_scores_and_batching_does_not_matter(embedded_model, fmnist_c_images, monkeypatch):
    model, info = embedded_model
    x = fmnist_c_images[:8]
    cpu = get_method("ttaug", model, info, n_augmentations=V)
    whole = cpu(x)
    monkeypatch.setenv("UNITTA_DEVICE_PATHS", "cuda")  # vmapped over the images, each with its own BN statistics
    vmapped = get_method("ttaug", model, info, n_augmentations=V)(x)
    monkeypatch.delenv("UNITTA_DEVICE_PATHS")
    torch.testing.assert_close(vmapped, whole, rtol=1e-4, atol=1e-5)
    cut = get_method("ttaug", model, info, n_augmentations=V)
    torch.testing.assert_close(torch.cat([cut(x[:3]), cut(x[3:])]), whole, rtol=0, atol=0)


def test_presets(embedded_model):
    model, info = embedded_model
    ttaug = get_method("ttaug", model, info, dataset="imagenet-c")
    assert (ttaug.cfg.n_augmentations, ttaug.cfg.bn_alpha, ttaug.cfg.preaugment) == (32, 0.1, "resized_crop")
    with pytest.raises(ValueError, match="n_augmentations=0 must be >= 1"):
        get_method("ttaug", model, info, n_augmentations=0)


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("ttaug", n_augmentations=V)
