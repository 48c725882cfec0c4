"""A sweep's output directory: where it is, its manifest, and how a finished cell is recorded.

Layout (docs/results.md): ``cells/<cell_id>.parquet`` (one row per finished cell), ``logs/<cell_id>.log``,
``results.parquet`` (consolidated), ``sweep.yaml`` and ``manifest.json`` (the config and the runs' provenance).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from unitta.evaluate import git_commit, now, ray_version
from unitta.results import write_cell_result

__all__ = ["fresh_output_dir", "write_manifest", "record"]


def fresh_output_dir(out_dir: Path) -> Path:
    """``out_dir`` if it is absent or empty, else a new sibling '<out_dir>-<UTC timestamp>' (never deletes)."""
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return out_dir
    stamp = now().strftime("%Y%m%d-%H%M%S")
    candidate = out_dir.with_name(f"{out_dir.name}-{stamp}")
    n = 2
    while candidate.exists():
        candidate = out_dir.with_name(f"{out_dir.name}-{stamp}-{n}")
        n += 1
    return candidate


def write_manifest(out_dir: Path, cfg, n_cells: int, mode: str, argv: list[str] | None) -> None:
    import yaml

    from unitta import __version__

    (out_dir / "sweep.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"runs": []}
    manifest.update(name=cfg.name, config_hash=cfg.config_hash(), n_cells=n_cells)
    manifest["runs"].append(
        {
            "started_at": now().isoformat(),
            "mode": mode,
            "git_commit": git_commit(),
            "unitta_version": __version__,
            "ray_version": ray_version(),
            "hostname": socket.gethostname(),
            "argv": argv,
            "config_hash": cfg.config_hash(),
        }
    )
    tmp = manifest_path.with_name(".manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, manifest_path)


def record(out_dir: Path, row: dict[str, Any], log: str) -> None:
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{row['cell_id']}.log").write_text(log)
    write_cell_result(out_dir, row)  # last: a cell counts as done only once its row is on disk
