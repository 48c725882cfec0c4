"""The 15 corruptions: contract, determinism, strength ordering, and agreement with direct ports.

The direct ports below follow make_cifar_c.py image by image (spec/offline_data.md 2.3) and draw
the same random numbers, so they check the batch-vectorised code in unitta.data.corruptions.
"""

import numpy as np
import pytest
import skimage
from scipy import ndimage

from unitta.data import corruptions as C
from unitta.data import image_ops
from unitta.data.records import CORRUPTIONS

RANDOM = {"gaussian_noise", "shot_noise", "impulse_noise", "glass_blur", "motion_blur", "snow", "frost", "fog",
          "elastic_transform"}


def _rng(name: str, severity: int, image_id: int, seed: int = 0) -> np.random.Generator:
    return np.random.default_rng((seed, CORRUPTIONS.index(name), severity, image_id))


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_shape_dtype_and_the_image_changes(fmnist_small, name):
    x = fmnist_small[0][:20]
    out = C.corrupt(x, name, 5)
    assert out.shape == x.shape and out.dtype == np.uint8
    # every corruption moves pixels by more than rounding would (smallest, jpeg: ~6 levels on average)
    assert np.abs(out.astype(int) - x).mean() > 2.0


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_deterministic_and_per_image(fmnist_small, name):
    x = fmnist_small[0][:12]
    full = C.corrupt(x, name, 3, seed=7)
    np.testing.assert_array_equal(full, C.corrupt(x, name, 3, seed=7))
    # an image's result depends on its id, not on the batch around it
    part = C.corrupt(x[4:9], name, 3, seed=7, image_ids=np.arange(4, 9))
    np.testing.assert_array_equal(part, full[4:9])
    if name in RANDOM:
        assert not np.array_equal(full, C.corrupt(x, name, 3, seed=8))


def test_strength_grows_with_severity(fmnist_small):
    x = fmnist_small[0]
    for name in CORRUPTIONS:
        change = [np.abs(C.corrupt(x, name, s).astype(int) - x).mean() for s in C.SEVERITIES]
        if name == "elastic_transform":
            # CIFAR-10-C's own table: severity 1 is the strongest affine jitter (32 * 0.08 px) with no
            # elastic field, severity 5 the weakest jitter (32 * 0.03) plus the field: change falls
            assert change[0] > change[-1], change
            continue
        assert change[-1] > 1.2 * change[0], (name, change)
        # non-decreasing, up to near-ties in the table itself (glass 1-3 and 4-5, motion 3-4, and
        # frost 3-4 where the lower image weight of severity 4 saturates fewer pixels: -6 %)
        assert all(b > 0.9 * a for a, b in zip(change, change[1:])), (name, change)


def test_bad_arguments(fmnist_small):
    x = fmnist_small[0][:2]
    with pytest.raises(ValueError, match="corruption='blur'"):
        C.corrupt(x, "blur", 5)
    with pytest.raises(ValueError, match="severity=6"):
        C.corrupt(x, "fog", 6)
    with pytest.raises(ValueError, match="uint8"):
        C.corrupt(x.astype(np.float32), "fog", 5)


# ---------------------------------------------------------------------------- direct ports


def test_brightness_matches_skimage_hsv(fmnist_small):
    rng = np.random.default_rng(0)
    x = np.concatenate([fmnist_small[0][:5], rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)])  # + colour
    for severity in (1, 5):
        c = C.PARAMS["brightness"][severity - 1]
        expected = []
        for img in x:
            hsv = skimage.color.rgb2hsv(img / 255.0)
            hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
            expected.append((np.clip(skimage.color.hsv2rgb(hsv), 0, 1) * 255).astype(np.uint8))
        diff = np.abs(C.corrupt(x, "brightness", severity).astype(int) - np.stack(expected))
        assert diff.max() <= 1  # truncation of values that differ in the last float bit


def test_defocus_matches_full_kernel(fmnist_small):
    import cv2

    x = fmnist_small[0][:6]
    for severity in (1, 5):
        radius, alias = C.PARAMS["defocus_blur"][severity - 1]
        grid = np.arange(-8, 9)
        xx, yy = np.meshgrid(grid, grid)
        disk = (xx**2 + yy**2 <= radius**2).astype(np.float32)
        kernel = cv2.GaussianBlur(disk / disk.sum(), ksize=(3, 3), sigmaX=alias)
        expected = []
        for img in x:
            out = np.dstack([cv2.filter2D(img[..., k] / 255.0, -1, kernel) for k in range(3)])
            expected.append((np.clip(out, 0, 1) * 255).astype(np.uint8))
        assert np.abs(C.corrupt(x, "defocus_blur", severity).astype(int) - np.stack(expected)).max() <= 1


def _clipped_zoom(img: np.ndarray, factor: float) -> np.ndarray:
    h = img.shape[0]
    ch = int(np.ceil(h / factor))
    top = (h - ch) // 2
    zoomed = ndimage.zoom(img[top : top + ch, top : top + ch], (factor, factor, 1), order=1)
    trim = (zoomed.shape[0] - h) // 2
    return zoomed[trim : trim + h, trim : trim + h]


def test_zoom_blur_matches_per_image_zoom(fmnist_small):
    x = fmnist_small[0][:4]
    expected = []
    for img in x:
        img = (img / 255.0).astype(np.float32)
        factors = C.PARAMS["zoom_blur"][4]
        total = img + sum(_clipped_zoom(img, float(f)) for f in factors)
        expected.append((np.clip(total / (len(factors) + 1), 0, 1) * 255).astype(np.uint8))
    assert np.abs(C.corrupt(x, "zoom_blur", 5).astype(int) - np.stack(expected)).max() <= 1


def test_glass_blur_matches_sequential_loop(fmnist_small):
    x = fmnist_small[0][:4]
    sigma, delta, iterations = C.PARAMS["glass_blur"][4]
    expected = []
    for i, img in enumerate(x):
        offsets = _rng("glass_blur", 5, i).integers(-delta, delta, size=(iterations, 32 - 2 * delta, 32 - 2 * delta, 2))
        y = (skimage.filters.gaussian(img / 255.0, sigma=sigma, channel_axis=-1) * 255).astype(np.uint8)
        for it in range(iterations):
            for a, h in enumerate(range(32 - delta, delta, -1)):
                for b, w in enumerate(range(32 - delta, delta, -1)):
                    dx, dy = offsets[it, a, b]
                    y[h, w], y[h + dy, w + dx] = y[h + dy, w + dx], y[h, w]  # the reference's statement
        out = skimage.filters.gaussian(y / 255.0, sigma=sigma, channel_axis=-1)
        expected.append((np.clip(out, 0, 1) * 255).astype(np.uint8))
    assert np.abs(C.corrupt(x, "glass_blur", 5).astype(int) - np.stack(expected)).max() <= 1


def test_motion_blur_kernel_matches_imagecorruptions(fmnist_small):
    from imagecorruptions.corruptions import _motion_blur

    x = fmnist_small[0][:3].astype(np.float32)
    angles = np.array([-40.0, 3.0, 44.0])
    ours = image_ops.line_blur(x, 9, 2.5, angles)
    theirs = np.stack([_motion_blur(img, 9, 2.5, a) for img, a in zip(x, angles)])
    np.testing.assert_allclose(ours, theirs, atol=1e-3)


def test_elastic_matches_per_image_port(fmnist_small):
    import cv2

    x = fmnist_small[0][:4]
    alpha, sigma, jitter = C.PARAMS["elastic_transform"][4]
    expected = []
    for i, img in enumerate(x):
        rng = _rng("elastic_transform", 5, i)
        img = img.astype(np.float32) / 255
        centre, side = np.float32([32, 32]) // 2, 32 // 3
        pts1 = np.float32([centre + side, [centre[0] + side, centre[1] - side], centre - side])
        pts2 = pts1 + rng.uniform(-jitter, jitter, size=pts1.shape).astype(np.float32)
        img = cv2.warpAffine(img, cv2.getAffineTransform(pts1, pts2), (32, 32), borderMode=cv2.BORDER_REFLECT_101)
        fields = rng.uniform(-1, 1, size=(2, 32, 32))
        dx = (skimage.filters.gaussian(fields[0], sigma, mode="reflect", truncate=3) * alpha).astype(np.float32)
        dy = (skimage.filters.gaussian(fields[1], sigma, mode="reflect", truncate=3) * alpha).astype(np.float32)
        xs, ys, zs = np.meshgrid(np.arange(32), np.arange(32), np.arange(3))
        coords = (ys + dy[..., None]).ravel(), (xs + dx[..., None]).ravel(), zs.ravel()
        out = ndimage.map_coordinates(img, coords, order=1, mode="reflect").reshape(img.shape)
        expected.append((np.clip(out, 0, 1) * 255).astype(np.uint8))
    assert np.abs(C.corrupt(x, "elastic_transform", 5).astype(int) - np.stack(expected)).max() <= 1


def test_fog_plasma_matches_two_dimensional_construction():
    # the batch plasma equals the single-map diamond-square construction fed the same uniforms
    rng = np.random.default_rng(3)
    u = rng.uniform(-1, 1, (2, image_ops.plasma_draws(32)))
    batch = image_ops.plasma_fractal(u, 32, 1.75)
    for k in range(2):
        grid, step, wibble, used = np.zeros((32, 32)), 32, 100.0, 0

        def noisy(total, wibble, k=k):
            nonlocal used
            noise = u[k, used : used + total.size].reshape(total.shape)
            used += total.size
            return total / 4 + wibble * wibble * noise

        while step >= 2:
            half = step // 2
            corner = grid[0::step, 0::step]
            total = corner + np.roll(corner, -1, axis=0)
            total += np.roll(total, -1, axis=1)
            grid[half::step, half::step] = noisy(total, wibble)
            centre = grid[half::step, half::step]
            total = centre + np.roll(centre, 1, axis=0) + corner + np.roll(corner, -1, axis=1)
            grid[0::step, half::step] = noisy(total, wibble)
            total = centre + np.roll(centre, 1, axis=1) + corner + np.roll(corner, -1, axis=0)
            grid[half::step, 0::step] = noisy(total, wibble)
            step //= 2
            wibble /= 1.75
        grid -= grid.min()
        np.testing.assert_allclose(batch[k], grid / grid.max(), atol=1e-12)
    assert used == u.shape[1]
