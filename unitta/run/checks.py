"""What the sweep and tune commands do before any cell runs: preflight and the dry-run listing.

The preflight is the cells' input checks (``unitta.evaluate.input_checks.input_problems``) and where they run:
a CUDA device needs a GPU of the run's resources (docs/results.md, "Before the first cell")."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from unitta.cell import Cell
from unitta.evaluate.input_checks import input_problems
from unitta.results import done_cells
from unitta.results.output_checks import is_writable, not_writable
from unitta.schema import ConfigError

__all__ = ["preflight", "problems", "list_cells"]


def _device_problem(device: str, num_gpus: float, local: bool) -> str | None:
    if device.startswith("cuda"):
        if num_gpus <= 0 and not local:
            return (f"device: {device!r} but resources.num_gpus is 0: Ray would place the cells on workers "
                    "without a GPU; set resources.num_gpus (e.g. 1) or device: auto")
        if local:
            import torch

            if not torch.cuda.is_available():
                return f"device: {device!r} but this machine has no CUDA GPU; use device: auto or cpu"
    return None


def problems(cells: Iterable[Cell], num_gpus: float = 0.0, local: bool = False, feasibility: bool = True) -> list[str]:
    """One line per problem that would make cells fail, each named once (empty: all clear): their inputs'
    (``input_problems``), then their devices'.

    feasibility: check each cell's factors against the stream sampler (off for a search's points).
    """
    cells = list(cells)
    devices = dict.fromkeys(cell.device for cell in cells)
    found = input_problems(cells, feasibility=feasibility)
    return found + [why for device in devices if (why := _device_problem(device, num_gpus, local))]


def preflight(cells: Iterable[Cell], num_gpus: float, local: bool, feasibility: bool = True) -> None:
    """Raise ``ConfigError`` listing (one line each) every problem knowable before the first cell.

    feasibility: also ask the stream sampler whether each cell's factors are feasible (a search leaves
    it off: its infeasible points are results, not mistakes).
    """
    found = problems(cells, num_gpus=num_gpus, local=local, feasibility=feasibility)
    if found:
        raise ConfigError(f"{len(found)} problem(s) found before running:\n" + "\n".join(f"  {p}" for p in found))


def list_cells(title: str, cells: list[Cell], out: Path, resources, note: str = "") -> None:
    """Print the cells a run would run (and which are already done in ``out``) without running any; an ``out``
    that cannot be written while cells are left to run is the run's ``OutputError``, after the list."""
    finished = done_cells(out) if out.is_dir() else set()
    todo = [c for c in cells if c.cell_id() not in finished]
    print(
        f"{title}: {len(cells)} cells, {len(cells) - len(todo)} already done in {out}, {len(todo)} to run "
        f"({resources.num_cpus:g} CPU, {resources.num_gpus:g} GPU each){note}"
    )
    for cell in cells:
        state = "done" if cell.cell_id() in finished else "todo"
        factors = ",".join(f"{k}={v:g}" for k, v in sorted(cell.factors.items())) or "-"
        layer = f" layer={cell.method_kwargs['layer']}" if "layer" in cell.method_kwargs else ""
        layer += "".join(f" {k}={v}" for k, v in sorted(cell.method_kwargs.items()) if k != "layer")
        layer += f" corruptions={','.join(cell.corruptions)}" if cell.corruptions else ""
        sampler = "" if cell.sampler == "official" else f" sampler={cell.sampler}"
        sampler += "" if cell.delta is None else f" delta={cell.delta:g}"
        print(
            f"  {state}  {cell.dataset:<11} {cell.method:<14} {cell.setting}{sampler}  seed={cell.seed} "
            f"batch={cell.batch_size} factors={factors}{layer}  {cell.cell_id()}"
        )
    if todo and not is_writable(out):
        sys.stdout.flush()
        raise not_writable(out, len(todo), len(cells))
