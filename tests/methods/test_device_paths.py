"""The CUDA paths on any machine (``unitta/methods/parts/device.py``, docs/benchmarks.md "Device paths"): static
shapes and at most one host synchronisation per steady batch, counted on a CPU run of the CUDA branches; the
masked batch statistics (``norm/row_mask.py``) that keep the shapes static; LAME's one-read fixed point."""

from __future__ import annotations

import pytest
import torch

from tests.bench_scripts import load_bench_script
from unitta.data import load_source
from unitta.methods import get_method, method_class
from unitta.methods.lame import fixed_point
from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.norm.robust_bn_layer import RobustBN
from unitta.methods.norm.row_mask import masked_rows
from unitta.methods.norm.unmixtns_layer import UnMixTNS2d
from unitta.methods.parts.device import DevicePaths


@pytest.fixture(scope="module")
def opcount():
    return load_bench_script("opcount")


@pytest.fixture(scope="module")
def stream(opcount):
    """The embedded ResNet-20 and 8 batches of 16 of a real non-i.i.d. Fashion-MNIST-C stream (200 per domain):
    the kept rows of ROID and DeYO and RoTTA's memory change from batch to batch (bench/opcount.py counts every
    method over 4 + 20 batches of 64)."""
    return opcount.stream_batches(8, 16, "nui1", n_per_domain=200)


def test_the_switch_sends_a_cpu_run_down_the_cuda_branches(monkeypatch, embedded_model):
    x = torch.zeros(2)
    auto, cuda = DevicePaths("auto"), DevicePaths("cuda")
    assert not auto.cuda(x) and not auto.cuda("cpu") and auto.cuda(torch.device("cuda"))
    assert cuda.cuda(x) and cuda.cuda(torch.Generator())
    with pytest.raises(ValueError, match="'gpu' is not one of"):
        DevicePaths("gpu")
    # a method reads UNITTA_DEVICE_PATHS once, when it is built, and hands its paths to the layers it builds
    monkeypatch.setenv("UNITTA_DEVICE_PATHS", "cuda")
    method = get_method("unmixtns", *embedded_model)
    monkeypatch.delenv("UNITTA_DEVICE_PATHS")
    assert method.device_paths == cuda and DevicePaths.from_environment() == auto
    assert {layer.paths for layer in method.layers.values()} == {cuda}
    monkeypatch.setenv("UNITTA_DEVICE_PATHS", "gpu")
    with pytest.raises(ValueError, match="UNITTA_DEVICE_PATHS='gpu' is not one of"):
        DevicePaths.from_environment()


@pytest.mark.parametrize("method", ["rotta", "note", "gtta", "roid", "lame", "deyo", "t3a"])  # CMF: ROID's (opcount)
def test_cuda_paths_keep_shapes_static_with_at_most_one_sync_and_no_host_data(opcount, stream, method, monkeypatch):
    model, info, batches = stream
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("UNITTA_DEVICE_PATHS", "cuda")  # read by the method steady_counts builds
    try:
        source = load_source("fmnist-c") if method_class(method).needs_source else None  # GTTA's replay
        # RoTTA's first update: 64; shapes and syncs without the profiler (it took 4-25x the batches' time)
        r = opcount.steady_counts(method, model, info, batches, warmup=4, source=source, count_ops=False)
    finally:
        torch.set_num_threads(threads)
    assert r["steady_batches"] == 4
    assert r["new_shapes"] == 0, r
    assert r["syncs"] <= 1, r["sync_sites"]
    assert r["host_data"] == 0, r["host_data_sites"]  # the memories' bookkeeping staged, GTTA's source on the device


def test_convolution_shapes_without_the_profiler_are_the_profilers(opcount, stream):
    """``steady_counts(count_ops=False)`` finds new shapes with a dispatch mode instead of the profiler: same set."""
    from torch.profiler import ProfilerActivity, profile

    model, info, batches = stream
    shapes = []
    for recording in (opcount.ConvShapes(), profile(activities=[ProfilerActivity.CPU], record_shapes=True)):
        method = get_method("roid", model, info)  # masked statistics: its shapes must not follow the kept rows
        with recording:
            method(batches[0][:9])
        shapes.append(recording.shapes if isinstance(recording, opcount.ConvShapes) else opcount._conv_shapes(recording))
    # ResNet-20's 8 distinct convolutions at B = 9 and the 2 of ROID's augmentation's blur
    assert shapes[0] == shapes[1] and sum(x[0] == 9 for x, _ in shapes[0]) == 8 and len(shapes[0]) == 10


def _bn(channels: int = 4, seed: int = 0) -> torch.nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels, generator=g))
        bn.running_var.copy_(0.5 + torch.rand(channels, generator=g))
        bn.weight.copy_(1.0 + 0.1 * torch.randn(channels, generator=g))
        bn.bias.copy_(0.1 * torch.randn(channels, generator=g))
    return bn


@pytest.mark.parametrize("kind", ["batch_stats", "robust_bn", "unmixtns"])
def test_masked_rows_give_the_kept_rows_a_forward_of_their_own(kind):
    """Kept rows: the values (and the updated statistics) of a forward of the kept rows alone."""

    def layer() -> torch.nn.Module:
        if kind == "batch_stats":
            return BatchStatsNorm(_bn())
        if kind == "robust_bn":
            return RobustBN(_bn(), 0.05).train()
        return UnMixTNS2d(_bn(), 8, 16, torch.Generator().manual_seed(1))

    x = torch.randn(10, 4, 5, 5, generator=torch.Generator().manual_seed(2)) * 2 + 1
    keep = torch.tensor([True, False, True, True, False, False, True, True, False, True])
    alone, masked = layer(), layer()
    expected = alone(x[keep])
    with masked_rows(masked, keep):
        got = masked(x)
    torch.testing.assert_close(got[keep], expected, rtol=1e-5, atol=1e-5)
    for (name, a), (_, b) in zip(alone.named_buffers(), masked.named_buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert masked.row_mask is None  # the mask applies inside the block only


def test_one_kept_row_of_a_batchnorm1d_falls_back_as_a_forward_of_that_row():
    """A (B, C) input with one kept row has one value per channel: a forward of that row alone normalises with the
    source statistics (``BatchStatsNorm``; PyTorch's train-mode BatchNorm refuses it), and so does the masked one."""
    bn = torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0]))
        bn.running_var.copy_(torch.tensor([2.0, 0.5, 1.0, 3.0]))
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    for kept in ([2], [1, 4]):
        keep = torch.zeros(6, dtype=torch.bool)
        keep[kept] = True
        layer = BatchStatsNorm(bn)
        expected = layer(x[keep])
        with masked_rows(layer, keep):
            got = layer(x)
        torch.testing.assert_close(got[keep], expected, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(expected).all()


@pytest.mark.parametrize("device_steps", [0, 2, 5, 40, 100])
def test_lame_fixed_point_is_the_same_however_many_steps_run_before_the_read(device_steps):
    g = torch.Generator().manual_seed(5)
    probs = torch.softmax(torch.randn(24, 5, generator=g), dim=1)  # converges at step 23 of 100
    kernel = (torch.rand(24, 24, generator=g) < 0.2).float()
    host, host_steps = fixed_point(-torch.log(probs + 1e-10), kernel, 100)
    y, steps = fixed_point(-torch.log(probs + 1e-10), kernel, 100, device_steps)
    assert steps == host_steps == 23
    assert torch.equal(y, host)


def test_the_padded_memory_batch_is_the_batch_then_masked_copies():
    from unitta.methods.parts.memory import CSTUMemory

    memory = CSTUMemory(8, 4)
    memory.add_batch(torch.arange(5.0).view(5, 1), [0, 1, 2, 3, 1], [0.1, 0.2, 0.3, 0.4, 0.5])
    x, ages = memory.batch()
    padded, padded_ages, stored = memory.padded_batch()
    assert padded.shape == (8, 1) and stored.tolist() == [True] * 5 + [False] * 3
    assert torch.equal(padded[:5], x) and torch.equal(padded_ages[:5], ages)
    assert torch.equal(padded[5:], x[:1].expand(3, 1)) and torch.equal(padded_ages[5:], torch.zeros(3))


def test_robust_bn_hand_written_backward_with_a_row_mask_equals_autograd():
    from unitta.methods.norm.fast_paths import fast_paths_set

    x = torch.randn(6, 4, 3, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    g = torch.randn(6, 4, 3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    keep = torch.tensor([True, True, False, True, False, True])
    grads = []
    for fast in (True, False):
        layer = RobustBN(_bn().double(), 0.3).train()
        xi = x.clone().requires_grad_(True)
        with fast_paths_set(fast), masked_rows(layer, keep):
            (layer(xi) * g).sum().backward()
        grads.append((xi.grad, layer.weight.grad, layer.bias.grad, layer.running_mean.clone()))
    for fast, plain in zip(*grads):
        torch.testing.assert_close(fast, plain)


def test_masked_mean_var_is_the_reference_formula_in_float64():
    """One weighted pass per layer (``RowWeights`` made once per mask): the kept rows' mean and biased variance
    of the definition, to float64 rounding, for 4-D and 2-D inputs, with no kept row giving zeros."""
    from unitta.methods.norm.row_mask import RowWeights, masked_mean_var

    g = torch.Generator().manual_seed(6)
    keep = torch.tensor([True, False, True, True, False, True, False])
    for shape in ((7, 3, 4, 5), (7, 3)):
        x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 2
        weights = RowWeights(keep)
        mean, var = masked_mean_var(x, keep, weights)
        kept = x[keep].transpose(0, 1).reshape(x.shape[1], -1)  # (C, kept values)
        reference_mean = kept.sum(1) / kept.shape[1]
        reference_var = ((kept - reference_mean[:, None]) ** 2).sum(1) / kept.shape[1]  # biased: / N, not N - 1
        torch.testing.assert_close(mean, reference_mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(var, reference_var, rtol=1e-12, atol=1e-12)
        assert weights.of(x) is weights.of(x.clone())  # made once per mask, dtype and shape kind
    nothing = masked_mean_var(x, torch.zeros(7, dtype=torch.bool))
    assert all(torch.equal(t, torch.zeros(3, dtype=torch.float64)) for t in nothing)


def test_masked_batch_stats_hand_written_backward_equals_autograd():
    """ROID's masked forward (``BatchStatsNorm`` with a row mask) through Robust BN's Function with a = 1: values,
    gradients and the untouched source statistics as autograd through the plain formula, in float64."""
    from unitta.methods.norm.fast_paths import fast_paths_set

    x = torch.randn(6, 4, 3, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 2 + 1
    g = torch.randn(6, 4, 3, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    keep = torch.tensor([True, False, True, True, False, True])
    results = []
    for fast in (True, False):
        layer = BatchStatsNorm(_bn().double())
        xi = x.clone().requires_grad_(True)
        with fast_paths_set(fast), masked_rows(layer, keep):
            out = layer(xi)
            (out * g).sum().backward()
        results.append((out.detach(), xi.grad, layer.weight.grad, layer.bias.grad, layer.source_mean.clone()))
    for fast, plain in zip(*results):
        torch.testing.assert_close(fast, plain, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(results[0][-1], _bn().double().running_mean)
