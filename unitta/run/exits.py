"""What ``python -m unitta.sweep`` and ``python -m unitta.tune`` share as programs: exit codes and signals.

Exit codes (docs/results.md, "Exit codes"): 0 every cell ok; 1 some cells failed (their rows say why;
rerun to retry them); 2 a usage, config or cluster problem found before anything ran (one line on
stderr, nothing written); 3 the driver crashed (a bug: traceback on stderr); 130 interrupted (Ctrl-C);
143 terminated (SIGTERM, e.g. a stopped Ray job). After 1, 130 and 143 the same command resumes.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable

__all__ = ["EXIT_OK", "EXIT_FAILED_CELLS", "EXIT_USAGE", "EXIT_CRASHED", "EXIT_INTERRUPTED", "EXIT_TERMINATED",
           "Terminated", "run_cli"]

EXIT_OK, EXIT_FAILED_CELLS, EXIT_USAGE, EXIT_CRASHED = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same clean-up runs (``finally`` blocks, Ray tasks cancelled)."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def run_cli(body: Callable[[], int], resume_hint: str, usage_errors: tuple[type[BaseException], ...]) -> int:
    """Run a CLI's ``body`` and map what escapes it to an exit code with one line on stderr.

    usage_errors: exception types whose message is the whole story (config, cluster): exit 2.
    """
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return body()
    except usage_errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print(f"terminated: {resume_hint}", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"interrupted: {resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"crashed (a bug: please report the traceback above); {resume_hint}", file=sys.stderr)
        return EXIT_CRASHED
    finally:
        signal.signal(signal.SIGTERM, previous)
