"""The backend settings cells and ``bench/gpu.py`` share (``unitta.methods.parts.backend``): what each precision
and the ``UNITTA_CUDNN_BENCHMARK`` switch set, that every flag comes back on exit, and the switch's bad values.
The torch.backends flags are process globals, so they are checked without a GPU."""

from __future__ import annotations

import pytest
import torch

from unitta.methods.parts.backend import CUDNN_BENCHMARK_ENV, Backend, backend_mode, cudnn_benchmark, environment

CUDA = torch.device("cuda")  # a device object only: no GPU is needed to set the flags


def _flags() -> tuple[bool, bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark


@pytest.fixture
def odd_flags(monkeypatch):
    """Flags unlike PyTorch's defaults, so that 'kept' and 'restored' are told apart from 'reset to default'."""
    monkeypatch.delenv(CUDNN_BENCHMARK_ENV, raising=False)
    before = _flags()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = (
        True, False, True)  # fmt: skip
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before


@pytest.mark.parametrize(
    ("precision", "env", "inside"),
    [
        ("fp32", None, (True, False, False)),  # fp32 keeps the TF32 flags; cuDNN's benchmark off by default
        ("tf32", None, (True, True, False)),
        ("fp32", "1", (True, False, True)),
        ("tf32", "0", (True, True, False)),
    ],
)
def test_each_mode_sets_its_flags_and_restores_them(odd_flags, monkeypatch, precision, env, inside):
    if env is not None:
        monkeypatch.setenv(CUDNN_BENCHMARK_ENV, env)
    with backend_mode(precision, CUDA) as backend:
        assert _flags() == inside
        assert backend == Backend.of(precision)
    assert _flags() == (True, False, True)


def test_an_explicit_benchmark_wins_over_the_environment(odd_flags, monkeypatch):
    monkeypatch.setenv(CUDNN_BENCHMARK_ENV, "1")
    with backend_mode("fp32", CUDA, benchmark=False):
        assert torch.backends.cudnn.benchmark is False
    assert environment() == {CUDNN_BENCHMARK_ENV: "1"}


def test_the_cpu_keeps_every_flag_and_bf16_autocasts(odd_flags):
    with backend_mode("bf16", torch.device("cpu")):
        assert _flags() == (True, False, True)
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_a_bad_switch_value_is_one_line(monkeypatch):
    monkeypatch.setenv(CUDNN_BENCHMARK_ENV, "on")
    with pytest.raises(ValueError, match=r"^UNITTA_CUDNN_BENCHMARK='on': expected 0 or 1"):
        cudnn_benchmark()
    monkeypatch.delenv(CUDNN_BENCHMARK_ENV)
    assert cudnn_benchmark() is False and environment() == {}
