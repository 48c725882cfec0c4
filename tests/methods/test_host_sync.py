"""unitta/contract/host_sync.py: which operations count as host synchronisations, and where they were asked for."""

from __future__ import annotations

import torch

from unitta.contract.host_sync import HostSyncRecorder


def _ops(fn) -> list[str]:
    with HostSyncRecorder() as syncs:
        fn()
    return sorted(what for what, _ in syncs.counts)


def test_host_reads_and_data_dependent_shapes_are_recorded_once_each() -> None:
    x = torch.randn(16, 4)
    assert _ops(lambda: x.sum().item()) == ["Tensor.item"]  # not also its aten._local_scalar_dense
    assert _ops(lambda: x.cpu()) == ["Tensor.cpu"]
    assert _ops(lambda: x.tolist()) == ["Tensor.tolist"]
    assert _ops(lambda: 1 if x.max() > 0 else 0) == ["a tensor read as a Python bool/number (aten._local_scalar_dense)"]
    assert _ops(lambda: torch.nonzero(x)) == ["aten.nonzero"]
    assert _ops(lambda: x[x > 0]) == ["aten.index with a boolean mask"]


def test_mask_arithmetic_and_optimiser_steps_are_not_syncs() -> None:
    w = torch.nn.Parameter(torch.randn(4))
    opt = torch.optim.Adam([w], lr=1e-3)

    def step() -> None:
        x = torch.randn(16, 4)
        keep = (x.softmax(1).max(1).values > 0.3).float()  # a mask as a weight, the documented alternative
        loss = ((x @ w) * keep).sum() / keep.sum().clamp_min(1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()  # Adam reads its step count on the host: torch's design, not the method's

    assert _ops(step) == []


def test_the_record_names_the_calling_line() -> None:
    x = torch.randn(3)
    with HostSyncRecorder() as syncs:
        x.sum().item()
    ((what, where),) = syncs.counts
    assert what == "Tensor.item" and where.startswith("test_host_sync.py:")
    assert syncs.summary() == f"Tensor.item at {where} (x1)"


def test_tensors_made_from_host_data_are_counted() -> None:
    import numpy as np

    x = torch.randn(3)
    with HostSyncRecorder() as syncs:
        torch.tensor([1.0, 2.0])
        torch.as_tensor(np.zeros(2))
        torch.from_numpy(np.ones(2)).to(x.device)
        torch.as_tensor(x)  # already a tensor: no host data
        torch.full((2,), 0.5)  # a fill, no copy of host data
    assert sorted(what for what, _ in syncs.host_data) == [
        "torch.as_tensor of host data", "torch.from_numpy of host data", "torch.tensor of host data"
    ]
    assert torch.from_numpy is not syncs._recorded_from_numpy  # restored on exit


def test_staged_bookkeeping_is_a_copy_of_the_callers_line_not_host_data() -> None:
    from unitta.methods.parts.device import staged

    with HostSyncRecorder() as syncs:
        table = staged([[3, 1, 2], [0, 1, 1]], torch.long, "cpu")
        empty = staged([], torch.float64, "cpu")
    assert torch.equal(table, torch.tensor([[3, 1, 2], [0, 1, 1]])) and empty.shape == (0,)
    assert not syncs.host_data and not syncs.counts
    assert [(what, where.split(":")[0]) for what, where in syncs.copies.elements()] == [
        ("device.staged (pinned, non-blocking)", "test_host_sync.py")
    ] * 2


def test_source_batches_on_the_device_equal_the_host_gather() -> None:
    import numpy as np
    from torch.utils.data import TensorDataset

    from unitta.data.source import ArraySource, take_batch
    from unitta.methods.parts.source_batches import SourceBatches

    rng = np.random.default_rng(0)
    arrays = ArraySource(rng.integers(0, 256, (10, 4, 4, 3), dtype=np.uint8), rng.integers(0, 5, 10))
    tensors = TensorDataset(torch.rand(10, 3, 4, 4), torch.arange(10))
    for dataset in (arrays, tensors):
        batches = SourceBatches(dataset, 4, torch.Generator().manual_seed(1), torch.device("cpu"))
        order = torch.randperm(10, generator=torch.Generator().manual_seed(1))
        for start in (0, 4, 8):  # the last batch partial
            images, labels = next(batches)
            expected = take_batch(dataset, order[start : start + 4])
            assert torch.equal(images, expected[0]) and torch.equal(labels, expected[1])
        with HostSyncRecorder() as syncs:
            next(batches)  # a new pass: its order moves once; no host data
        assert not syncs.host_data and not syncs.counts
