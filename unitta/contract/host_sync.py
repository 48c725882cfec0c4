"""Record the operations that make the host wait for the device, on any device, CPU included.

``torch.cuda.set_sync_debug_mode`` sees host synchronisations only on a GPU. ``HostSyncRecorder`` sees the
operations that synchronise there while running anywhere:

* at the Python level (``torch.overrides``' ``TorchFunctionMode``) the reads into host memory,
  ``Tensor.item`` / ``tolist`` / ``numpy`` / ``cpu`` (not ``.to(device)``, whose target on a CPU run is the
  tensor's own device);
* at the ATen level (a ``TorchDispatchMode``) the operators that read a device value
  (``aten._local_scalar_dense``: ``bool(t)``, ``float(t)``, ``if t > 0:``) or whose output size depends on
  the data (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing).

Each record names the operation and the first frame outside torch and this module: the line of the method's
code that asked for it. Reads made inside ``torch.optim`` (step counts kept in host memory by design) and by
``unitta.methods.parts.device.host_values`` (draws of a CPU generator, host memory on every device) are not
recorded. On a CPU run this counts what a GPU would wait for only on the branches a GPU takes: run it under
``UNITTA_DEVICE_PATHS=cuda`` (``unitta.methods.parts.device``).

``host_data`` counts every tensor made from host data (``torch.tensor``, ``torch.as_tensor`` / ``torch.asarray``
of Python or NumPy values, ``torch.from_numpy``), wherever it then goes: on a GPU each is a host-to-device copy
(blocking unless pinned) or host bookkeeping next to device work; a steady batch should make none (constants
once per cell on the device, bookkeeping on the device).
``device.staged`` (host bookkeeping through pinned memory, one non-blocking copy) counts as a copy, not as host
data. ``copies`` counts, the same way, the host-to-device copies a CUDA run would make: tensors built from Python
values (``torch.tensor``, ``torch.as_tensor``) or drawn from a host generator (a CPU generator that
``device_generator`` did not make) that are then moved with ``.to(...)`` / ``.cuda()``, or built with a
``device=`` argument. docs/adding_a_method.md ("No host synchronisation in forward") says why these cost GPU time.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from unitta.methods.parts import device as _device

__all__ = ["HostSyncRecorder"]

# Tensor methods that copy device memory to the host.
_HOST_READS = {"item", "tolist", "numpy", "cpu"}
# ATen operators that read a device value on the host, or whose output size depends on the data.
_SYNC_OPS = {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "nonzero_static"}
_TORCH_DIR = str(Path(torch.__file__).parent)
_OPTIM_DIR = str(Path(torch.__file__).parent / "optim")
_HOST_MEMORY_FILES = (_device.__file__,)  # reads made there are of host tensors by construction
# functions that make a tensor in host memory (from Python values, or drawn with a ``generator=``)
_HOST_MADE = {"tensor", "as_tensor"}
_DRAWS = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "rand_like", "randn_like"}
_MOVES = {"to", "cuda"}
# functions that make a tensor from host data (Python numbers, lists, NumPy arrays): a host-to-device copy each
# on a GPU, blocking unless the source is pinned
_FROM_HOST_DATA = {"tensor", "as_tensor", "asarray"}


def _caller(through_host_memory: bool = False) -> str | None:
    """'file.py:line' of the innermost frame outside torch and this module (the code that asked); None when
    the read comes from ``torch.optim``, whose optimisers keep their step counts in host memory by design, or
    from ``parts/device.py`` (host tensors by construction) unless ``through_host_memory``: then its caller."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path in _HOST_MEMORY_FILES and through_host_memory:
            frame = frame.f_back
            continue
        if path.startswith(_OPTIM_DIR) or path in _HOST_MEMORY_FILES:
            return None
        if not path.startswith(_TORCH_DIR) and path != __file__:
            return f"{Path(path).name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _Functions(TorchFunctionMode):
    def __init__(self, recorder: HostSyncRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _MOVES and args and id(args[0]) in self._recorder.host_made:
            self._recorder.record_copy(f"Tensor.{name} of a host tensor")
        if name == "empty" and "pin_memory" in kwargs:  # ``device.staged``: the copy of the method's line
            self._recorder.record_copy("device.staged (pinned, non-blocking)", through_host_memory=True)
        if name in _FROM_HOST_DATA and _made_from_host_data(name, args, kwargs):
            self._recorder.record_host_data(f"torch.{name} of host data")
        if name not in _HOST_READS:
            out = func(*args, **kwargs)
            if (name in _HOST_MADE or (name in _DRAWS and _host_generator(kwargs))) and isinstance(out, torch.Tensor):
                if kwargs.get("device") is not None and name in _HOST_MADE:
                    self._recorder.record_copy(f"torch.{name}(..., device=)")
                else:
                    self._recorder.remember_host(out)
            return out
        self._recorder.record(f"Tensor.{name}")
        self._recorder.inside += 1  # the operators this read runs are the same synchronisation
        try:
            return func(*args, **kwargs)
        finally:
            self._recorder.inside -= 1


class _Operators(TorchDispatchMode):
    def __init__(self, recorder: HostSyncRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__
        if self._recorder.inside:
            pass
        elif op == "_local_scalar_dense":
            self._recorder.record("a tensor read as a Python bool/number (aten._local_scalar_dense)")
        elif op in _SYNC_OPS:
            self._recorder.record(f"aten.{op}")
        elif op in ("index", "index_put", "index_put_") and _bool_index(args):
            self._recorder.record(f"aten.{op} with a boolean mask")
        return func(*args, **kwargs)


def _made_from_host_data(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether ``torch.<name>(data, ...)`` reads host data: not for ``as_tensor``/``asarray`` of a tensor."""
    if name in ("tensor", "from_numpy"):
        return True
    data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
    return not isinstance(data, torch.Tensor)


def _host_generator(kwargs: dict) -> bool:
    generator = kwargs.get("generator")
    return isinstance(generator, torch.Generator) and not _device.is_device_generator(generator)


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices or ())


class HostSyncRecorder:
    """A context manager that counts host synchronisations by (operation, calling line)::

    with HostSyncRecorder() as syncs:
        method(x)
    syncs.counts  # Counter({("Tensor.item", "my_method.py:42"): 1})
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.copies: Counter[tuple[str, str]] = Counter()
        self.host_data: Counter[tuple[str, str]] = Counter()
        self.host_made: dict[int, weakref.ref] = {}  # id -> the host tensor (ids of dead tensors are dropped)
        self.inside = 0
        self._modes = (_Functions(self), _Operators(self))

    def record(self, what: str) -> None:
        where = _caller()
        if where is not None:
            self.counts[(what, where)] += 1

    def record_copy(self, what: str, through_host_memory: bool = False) -> None:
        where = _caller(through_host_memory)
        if where is not None:
            self.copies[(what, where)] += 1

    def record_host_data(self, what: str) -> None:
        where = _caller()
        if where is not None:
            self.host_data[(what, where)] += 1

    def remember_host(self, t: torch.Tensor) -> None:
        key = id(t)
        self.host_made[key] = weakref.ref(t, lambda _, key=key: self.host_made.pop(key, None))

    def __enter__(self) -> HostSyncRecorder:
        for mode in self._modes:
            mode.__enter__()
        # ``torch.from_numpy`` takes no tensor and bypasses the function mode: wrapped while recording
        self._from_numpy = torch.from_numpy
        torch.from_numpy = self._recorded_from_numpy
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.from_numpy = self._from_numpy
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    def _recorded_from_numpy(self, array: Any) -> torch.Tensor:
        self.record_host_data("torch.from_numpy of host data")
        return self._from_numpy(array)

    def summary(self, limit: int = 3) -> str:
        """e.g. 'Tensor.item at my_method.py:42 (x3), aten.nonzero at my_method.py:50 (x3)'."""
        items = self.counts.most_common()
        text = ", ".join(f"{what} at {where} (x{n})" for (what, where), n in items[:limit])
        return text + (f" and {len(items) - limit} more" if len(items) > limit else "")
