"""The source probe: the source model, not adapting, on up to ``SOURCE_PROBE_IMAGES`` stream positions spread evenly
over the stream (every domain of it, whatever its order): the evidence ``chance_warning`` reads
(``unitta.evaluate.chance``; docs/results.md ``source_probe_error``).

The cells of one stream differ in their method only, and their probes are the same forwards: on the CPU, where a
probe costs as much as a short stream's own forwards, a process computes a probe's predictions once and keeps them
under the digest of everything they depend on (the source model's class and weights, the probe's images in their
batches, the precision, the thread count), so that a cell of another method on the same stream, in the same worker,
reuses them; a cell whose model or images differ in one byte does not. On a GPU the forwards are cheap beside the
digest of the weights, and the probe is computed each time.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from unitta.evaluate.adapt import device_batch
from unitta.evaluate.chance import SourceProbe, probe_of

__all__ = ["SOURCE_PROBE_IMAGES", "probe_source"]

SOURCE_PROBE_IMAGES = 512  # the source model's error on this many stream images: chance_warning's evidence
KEPT_PROBES = 64  # predictions kept per process (at most 512 integers each), the least recently used dropped first

_kept: OrderedDict[bytes, np.ndarray] = OrderedDict()


def probe_source(model, dataset, stream, device, num_classes: int, batch_size: int, precision: str) -> SourceProbe:
    """The source ``model`` (eval mode, no gradient) on the probe positions of ``stream``; a few forwards before
    the stream that change no state."""
    import torch

    from unitta.methods.parts.backend import backend_mode

    n = len(stream.indices)
    positions = np.unique(np.linspace(0, n - 1, min(SOURCE_PROBE_IMAGES, n)).astype(np.int64))
    labels = np.asarray(dataset.labels[stream.indices[positions]], dtype=np.int64)
    batches = [device_batch(dataset, stream.indices[positions[start:start + batch_size]], device)
               for start in range(0, len(positions), batch_size)]
    key = _digest(model, batches, precision) if device.type == "cpu" else None
    if key is not None and key in _kept:
        _kept.move_to_end(key)
        return probe_of(_kept[key], labels, num_classes)
    with torch.no_grad(), backend_mode(precision, device):
        predictions = torch.cat([model(x).argmax(dim=1) for x in batches]).cpu().numpy()
    if key is not None:
        _kept[key] = predictions
        while len(_kept) > KEPT_PROBES:
            _kept.popitem(last=False)
    return probe_of(predictions, labels, num_classes)


def _digest(model, batches: list, precision: str) -> bytes:
    """What the probe's predictions depend on, hashed: the model's class, every parameter and buffer (name,
    dtype, shape, bytes), the images batch by batch, the precision and torch's thread count (a CPU convolution's
    rounding may depend on it)."""
    import torch

    h = hashlib.blake2b(digest_size=32)
    h.update(f"{type(model).__module__}.{type(model).__qualname__}|{precision}|{torch.get_num_threads()}".encode())
    for name, tensor in model.state_dict().items():
        h.update(f"|{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        h.update(_bytes(tensor))
    for x in batches:
        h.update(f"|batch|{x.dtype}|{tuple(x.shape)}".encode())
        h.update(_bytes(x))
    return h.digest()


def _bytes(tensor) -> memoryview:
    """The tensor's values as bytes (a view of its memory when contiguous)."""
    import torch

    return memoryview(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy())
