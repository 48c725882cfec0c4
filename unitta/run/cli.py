"""The command-line flags every run command shares (``unitta sweep``, ``unitta tune``, ``unitta select``) and how
they run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from unitta.run import exits, ray_cluster
from unitta.run.executor import USAGE_ERRORS, RunOptions
from unitta.schema.overrides import OVERRIDES_HELP
from unitta.switches import switch_problems
from unitta.track.destinations import TRACK_FLAG_HELP

__all__ = ["USAGE_ERRORS", "add_run_arguments", "run_parser", "run_options", "run_command"]


def run_parser(prog: str, description: str, examples: list[str], config_help: str,
               failed: str = "some cells failed") -> argparse.ArgumentParser:
    """A run command's parser: its config argument, the shared flags, its examples and the exit codes
    (``unitta.run.exits``) in the epilog."""
    p = _IntermixedParser(
        prog=prog,
        description=description,
        epilog="examples:\n" + "".join(f"  {example}\n" for example in examples)
        + f"exit codes: 0 ok, 1 {failed}, 2 config/cluster problem, 3 crashed, 130/143 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help=config_help)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)
    add_run_arguments(p)
    return p


class _IntermixedParser(argparse.ArgumentParser):
    """Flags and ``key=value`` overrides in any order (``CONFIG a=1 --local b=2``)."""

    def parse_args(self, args=None, namespace=None):
        return self.parse_intermixed_args(args, namespace)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """--output, --local, --fresh, the Ray flags, --no-progress, --dry-run, --no-preflight, --track."""
    p.add_argument("--output", help="output directory (overrides the config's 'output')")
    p.add_argument("--local", action="store_true", help="run the cells in this process, one after another (no Ray)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over in a new directory '<output>-<timestamp>' when the output already has results",
    )
    ray_cluster.add_ray_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and list the cells, then run the checks (not with --no-preflight); run nothing")
    p.add_argument(
        "--no-preflight", action="store_true", help="skip the data/checkpoint/feasibility checks before the first cell"
    )
    p.add_argument("--track", action="append", metavar="TRACKER=VALUE", help=TRACK_FLAG_HELP)


def run_options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        local=args.local,
        fresh=args.fresh,
        address=args.address,
        num_cpus=args.num_cpus,
        wait_for_resources=args.wait_for_resources,
        progress=not args.no_progress,
        argv=sys.argv,
        track=args.track,
    )


def run_command(body: Callable[[], int]) -> int:
    """``body`` under the shared exit codes (``unitta.run.exits``); ``USAGE_ERRORS`` exit 2."""
    hint = "finished cells are saved; rerun the same command to resume"
    problems = switch_problems()  # ``python -m unitta.sweep`` too: the environment switches before anything runs
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return exits.EXIT_USAGE
    return exits.run_cli(body, hint, USAGE_ERRORS)
