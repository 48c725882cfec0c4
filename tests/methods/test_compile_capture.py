"""Whether ``torch.compile`` captures a method's adaptation step whole (issue 53: ready for CUDA graphs on a GPU),
counted with ``torch._dynamo`` on the CPU (the ``eager`` backend: what is captured, not how fast it runs).

``method.forward`` (the whole step: predict, loss, backward, optimiser) is compiled and called on batches of the
same shape; ``counters["graph_break"]`` counts the breaks while it is traced, ``counters["frames"]`` the frames
traced again later (a recompile). BN's step is one graph with no break, traced again once (its second call: the
first sees the state of a fresh method) and then never. TENT's is not whole: dynamo breaks at ``Tensor.backward``
and at the optimiser (``zero_grad``, the fused Adam kernel marked ``torch.compiler.disable``, the step's own
``graph_break``), eager there; no break or recompile after the warm-up. Whole-step capture of a gradient method
needs compiled autograd and a compiled optimiser step (not done; docs/benchmarks.md "Device paths")."""

from __future__ import annotations

import pytest
import torch

from unitta.methods import get_method

dynamo = pytest.importorskip("torch._dynamo")


def _traced(name: str, model, info, calls: int = 4) -> list[tuple[int, int]]:
    """(graph breaks, frames traced) at each of ``calls`` calls of the compiled step."""
    from torch._dynamo.utils import counters

    method = get_method(name, model, info)
    x = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    method(x)
    dynamo.reset()
    step = torch.compile(method.forward, backend="eager")
    seen = []
    for _ in range(calls):
        counters.clear()
        step(x)
        seen.append((sum(counters["graph_break"].values()), counters["frames"]["total"]))
    dynamo.reset()
    return seen


def test_bn_step_is_one_graph_without_breaks(embedded_model):
    seen = _traced("bn", *embedded_model)
    assert [breaks for breaks, _ in seen] == [0, 0, 0, 0]
    assert [frames for _, frames in seen] == [1, 1, 0, 0]  # warm-up: two traces, then the graph is reused


def test_tent_step_breaks_at_backward_and_the_optimiser_only_while_warming_up(embedded_model):
    seen = _traced("tent", *embedded_model)
    breaks, frames = seen[0]
    assert 1 <= breaks <= 8 and frames >= 2, seen  # 7 on torch 2.14: backward 2, zero_grad 2, fused Adam 2, step 1
    assert seen[1:] == [(0, 0)] * 3, seen  # after the warm-up: no new break, no recompile
