"""What ``python -m unitta.sweep`` and ``python -m unitta.tune`` share as programs: exit codes and signals.

Exit codes (docs/results.md, "Exit codes"): 0 every cell ok; 1 some cells failed (their rows say why;
rerun to retry them); 2 a usage, config or cluster problem found before anything ran (one line on
stderr, nothing written); 3 the driver crashed (a bug: traceback on stderr); 4 an operating-system error
(disk full, read-only folder, name too long, a file in the way: one line naming the path and the errno's
meaning; the cells finished before it are saved); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM, e.g. a
stopped Ray job). After 1, 4, 130 and 143 the same command resumes.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable

from unitta.files import os_error_text

__all__ = ["EXIT_OK", "EXIT_FAILED_CELLS", "EXIT_USAGE", "EXIT_CRASHED", "EXIT_OS_ERROR", "EXIT_INTERRUPTED",
           "EXIT_TERMINATED",
           "Terminated", "run_cli", "take_back_sigterm"]

EXIT_OK, EXIT_FAILED_CELLS, EXIT_USAGE, EXIT_CRASHED, EXIT_OS_ERROR = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same clean-up runs (``finally`` blocks, Ray tasks cancelled)."""


_sigterm_seen = False  # Ray's C code turns an exception raised by a signal handler into a plain KeyboardInterrupt
_running = 0  # run_cli calls in progress: only a CLI (not a library caller of run_sweep) owns SIGTERM


def _on_sigterm(signum, frame) -> None:
    """The first SIGTERM stops the run; more (``ray job stop`` may repeat it) must not break its clean-up."""
    global _sigterm_seen
    _sigterm_seen = True
    signal.signal(signal.SIGTERM, _during_cleanup)
    raise Terminated()


def _during_cleanup(signum, frame) -> None:
    """A SIGTERM while the first one's clean-up runs: it is already stopping (SIGKILL ends it at once)."""


def take_back_sigterm() -> None:
    """Make SIGTERM ours again after ``ray.init``, inside ``run_cli`` only.

    ``ray.init`` installs Ray's own SIGTERM handler in the driver (it prints a C++ stack dump and aborts,
    exit 134); ours raises ``Terminated`` so that the driver cancels its tasks, keeps what finished and
    exits 143 with one line (docs/results.md, "Exit codes"), as without Ray.
    """
    if _running:
        signal.signal(signal.SIGTERM, _on_sigterm)


def run_cli(body: Callable[[], int], resume_hint: str, usage_errors: tuple[type[BaseException], ...]) -> int:
    """Run a CLI's ``body`` and map what escapes it to an exit code with one line on stderr.

    usage_errors: exception types whose message is the whole story (config, cluster): exit 2.
    """
    global _running, _sigterm_seen
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_seen = False
    _running += 1
    try:
        return body()
    except usage_errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # disk full, read-only, name too long, a file in the way: not a bug
        print(f"error: {os_error_text(exc)}; {resume_hint}", file=sys.stderr)
        return EXIT_OS_ERROR
    except KeyboardInterrupt:
        if _sigterm_seen:  # Terminated, or what Ray's ray.wait made of it
            print(f"terminated: {resume_hint}", file=sys.stderr)
            return EXIT_TERMINATED
        print(f"interrupted: {resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"crashed (a bug: please report the traceback above); {resume_hint}", file=sys.stderr)
        return EXIT_CRASHED
    finally:
        _running -= 1
        signal.signal(signal.SIGTERM, previous)
