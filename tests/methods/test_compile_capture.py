"""Whether ``torch.compile`` captures a method's adaptation step whole (ready for CUDA graphs on a GPU), counted with
``torch._dynamo`` on the CPU (the ``eager`` backend: what is captured, not how fast it runs; docs/benchmarks.md
"Compiled steps").

BN: ``method.forward`` compiled is one graph with no break, traced twice (the first call sees a fresh method) and
then reused. The ``whole_step`` methods (TENT, RPL, COME, SHOT, Conjugate PL, ETA): ``method.compile()`` compiles
forward, loss, backward and the optimiser's update as one graph with ``fullgraph=True`` (``parts/whole_step.py``),
never traced again after the first batch nor after ``reset()``, and its predictions equal the eager step's to float
rounding over a stream of Fashion-MNIST-C batches (TENT with Adam and SGD; ETA with steps skipped where nothing is
kept).
"""

from __future__ import annotations

import pytest
import torch

from tests.methods.reference_model import TinyReferenceNet
from unitta.methods import get_method
from unitta.methods.parts.registry import list_methods, method_class
from unitta.models.info import ModelInfo

dynamo = pytest.importorskip("torch._dynamo")
pytestmark = pytest.mark.usefixtures("one_thread")

WHOLE_STEP_METHODS = [name for name in list_methods() if method_class(name).whole_step]


def _counts() -> tuple[int, int]:
    """(graph breaks, graphs compiled) since ``counters.clear()``."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


def test_bn_step_is_one_graph_without_breaks(embedded_model):
    from torch._dynamo.utils import counters

    method = get_method("bn", *embedded_model)
    x = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    method(x)
    dynamo.reset()
    step = torch.compile(method.forward, backend="eager")
    seen = []
    for _ in range(4):
        counters.clear()
        step(x)
        seen.append((sum(counters["graph_break"].values()), counters["frames"]["total"]))
    dynamo.reset()
    assert [breaks for breaks, _ in seen] == [0, 0, 0, 0]
    assert [frames for _, frames in seen] == [1, 1, 0, 0]  # warm-up: two traces, then the graph is reused


def test_the_whole_step_methods_are_the_self_training_ones():
    assert set(WHOLE_STEP_METHODS) == {"tent", "rpl", "come", "shot", "conjugate_pl", "eta"}


@pytest.mark.parametrize("name", WHOLE_STEP_METHODS)
def test_whole_step_is_one_graph_without_breaks_or_recompiles(name):
    from torch._dynamo.utils import counters

    dynamo.reset()
    torch.manual_seed(0)  # a small random BN network: what is captured does not depend on the weights, tracing is quick
    info = ModelInfo("tiny", "cifar10", "fc", ("bn1", "bn2", "bn3"), "bn2", 5, 16)
    method = get_method(name, TinyReferenceNet().eval(), info)
    method.compile(backend="eager")  # fullgraph=True: a graph break would raise
    x = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    seen = []
    for call in range(4):
        if call == 2:  # a reset builds a new model and optimiser: the same graph serves them
            method.reset()
            method.compile(backend="eager")
        counters.clear()
        method(x)
        seen.append(_counts())
    dynamo.reset()
    assert seen == [(0, 1), (0, 0), (0, 0), (0, 0)], seen
    assert (method.cost.forwards, method.cost.backwards) == (2, 2)  # the reset cleared the first two


def _stream(name, model, info, images, compiled: bool, eager_after: int | None = None, **overrides):
    """Logits of ``name`` over ``images`` in batches of 16 (compiled step or eager), and the method."""
    method = get_method(name, model, info, **overrides)
    if compiled:
        method.compile(backend="eager")
    outputs = []
    for i, start in enumerate(range(0, len(images), 16)):
        if i == eager_after:
            method._whole_step = None  # the eager step from here on, on the state the compiled step left
        outputs.append(method(images[start : start + 16]))
    return torch.cat(outputs), method


CASES = {
    "tent-adam": ("tent", {}),
    "tent-sgd": ("tent", {"optimizer": "sgd", "lr": 1e-2}),
    # E_0 = 0.004 ln 10: 2 of the 8 batches keep no sample, so their step is skipped (masked in the graph)
    "eta-skips": ("eta", {"e_factor": 0.004}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_step_predicts_as_the_eager_step(case, embedded_model, fmnist_c_images):
    name, overrides = CASES[case]
    dynamo.reset()
    eager, eager_method = _stream(name, *embedded_model, fmnist_c_images, compiled=False, **overrides)
    compiled, compiled_method = _stream(name, *embedded_model, fmnist_c_images, compiled=True, **overrides)
    assert len(eager) == 128  # 8 batches
    # float32 rounding of Adam's update (fused kernel vs multi-tensor arithmetic) compounds over 8 steps: 1e-6-ish
    assert (compiled - eager).abs().max() < 1e-4
    gap = eager.topk(2, dim=1).values.diff(dim=1).abs().squeeze(1)
    differ = compiled.argmax(dim=1) != eager.argmax(dim=1)
    assert bool((gap[differ] < 1e-4).all())  # argmax identical except ties
    eager_state, compiled_state = eager_method.optimizer.state, compiled_method.optimizer.state
    if case == "tent-adam":  # Adam's state (step, moments) is torch's: the eager step continues on what the graph left
        mixed, _ = _stream(name, *embedded_model, fmnist_c_images, compiled=True, eager_after=4)
        assert (mixed - eager).abs().max() < 1e-4
    if case == "eta-skips":
        assert eager_method.extra_metrics() == compiled_method.extra_metrics()
        assert eager_method.cost.backwards == 6 and compiled_method.cost.backwards == 8  # the graph's runs every batch
    params = zip(eager_method.optimizer.param_groups[0]["params"], compiled_method.optimizer.param_groups[0]["params"])
    for p, q in params:
        assert torch.allclose(p, q, atol=1e-5)
        for key, value in eager_state[p].items():
            assert torch.allclose(value.float(), compiled_state[q][key].float(), atol=1e-5), key
    dynamo.reset()
