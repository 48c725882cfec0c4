"""``unitta``: the one command (``[project.scripts]``; ``python -m unitta`` too), one subcommand per tool.

    unitta sweep CONFIG.yaml [--local] [--dry-run] ...      = python -m unitta.sweep
    unitta tune CONFIG.yaml [--local] [--dry-run] ...       = python -m unitta.tune
    unitta select CONFIG.yaml [--local] [--dry-run] ...     = python -m unitta.select
    unitta data fetch|check|prepare|show|list|export-folder = python -m unitta.data
    unitta models fetch|train ...                           = python -m unitta.models
    unitta methods check|list|space ...                     = python -m unitta.contract
    unitta streams ...                                      = python -m unitta.streams
    unitta recommend --classes FILE ...                     = python -m unitta.recommend
    unitta track RESULTS --mlflow URI|--wandb MODE|...      = python -m unitta.track
    unitta report|compare|heatmaps RESULTS ...              = python analysis/{report,compare_paper,heatmaps}.py

(``report``, ``compare`` and ``heatmaps`` are the ``analysis`` package's, installed beside ``unitta``.)

Each subcommand is the module's own ``main``, given the rest of the command line; its ``--help`` says more.
Modules load only when their subcommand runs, so ``unitta --help`` is instant.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

# subcommand -> (module whose main(argv) runs it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": ("unitta.sweep", "run a sweep config's grid of cells (local or Ray), results as Parquet"),
    "tune": ("unitta.tune", "search stream factors / the BDN layer (grid or Optuna) with the sweep's executor"),
    "select": ("unitta.select.run", "choose hyper-parameters without test labels: default/oracle/holdout/unsupervised"),
    "data": ("unitta.data.__main__", "datasets: fetch, check, prepare, show, list, export-folder"),
    "models": ("unitta.models.__main__", "models: fetch a paper checkpoint, train the embedded ResNet-20"),
    "methods": ("unitta.contract.command", "methods: check the contract, list methods, print a search space"),
    "streams": ("unitta.streams.__main__", "inspect a benchmark stream of a setting (summary, plot) without images"),
    "recommend": ("unitta.recommend", "estimate a stream's factors from its labels and recommend methods"),
    "track": ("unitta.track.command", "log a results folder's cells to MLflow, Weights & Biases or TensorBoard"),
    "report": ("analysis.report", "one self-contained HTML page of a sweep's results"),
    "compare": ("analysis.compare_paper", "compare result folders with the paper's tables"),
    "heatmaps": ("analysis.heatmaps", "tables, heatmaps and rankings of result folders"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: unitta COMMAND [ARGS...]   (unitta COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        from unitta import __version__

        print(f"unitta {__version__}")
        return 0
    if args[0] not in COMMANDS:
        from unitta.schema import hint

        print(
            f"unitta: unknown command {args[0]!r}{hint(args[0], COMMANDS)}; commands: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    from unitta.switches import switch_problems

    problems = switch_problems()  # before the modules that read them are imported (one raises at import)
    if problems:
        print("\n".join(f"unitta: {p}" for p in problems), file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
