"""Read back what the file-based trackers wrote: a W&B offline run file, a TensorBoard event folder."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of records with a 7-byte header each


def _records(data: bytes):
    pos, pending = 7, b""  # after the file header (':W&B', version)
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # whole record
            yield chunk
        elif kind == 2:  # first part
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:  # last part
            yield pending + chunk


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_wandb_run(path: Path) -> dict[str, Any]:
    """The run id, group, config, summary and history of a W&B offline run file (``run-<id>.wandb``)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"config": {}, "summary": {}, "history": []}
    for raw in _records(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["id"], out["group"] = record.run.run_id, record.run.run_group
            out["config"].update({_key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            out["config"].update({_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "summary":
            out["summary"].update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
    return out


def read_tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of the scalars in a TensorBoard event folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def read_tensorboard_hparams(folder: Path) -> tuple[dict[str, Any], set[str]]:
    """(hyper-parameter -> typed value, the declared metric names) of a TensorBoard event folder's HParams."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(folder))
    acc.Reload()
    values: dict[str, Any] = {}
    metrics: set[str] = set()
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            for name, value in data.session_start_info.hparams.items():
                kind = value.WhichOneof("kind")
                values[name] = getattr(value, kind)
        if data.HasField("experiment"):
            metrics |= {m.name.tag for m in data.experiment.metric_infos}
    return values, metrics
