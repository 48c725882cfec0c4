"""The tables of numbers in docs/ that a script makes, made by this script from named results folders.

    python bench/docs_tables.py                 # regenerate every table whose results folder is here
    python bench/docs_tables.py selection_quick # one table
    python bench/docs_tables.py --check         # exit 1 if a table differs from what its results give

A generated table sits in its doc between ``<!-- docs_tables: NAME -->`` and ``<!-- /docs_tables -->``; the
registry below says which results folder(s) and which analysis function make it, and which command makes the
results. Nothing else in the block is kept: edit the analysis function, not the doc. A table whose results
folder is missing is left as it is, with the command that makes it printed (exit 0; ``--check`` says
'not checked'). The prose around a table states what it read from the table; rerun the command and reread it
when the numbers move (docs/analysis.md, 'Docs from runs').
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the repository root importable
    sys.path.insert(0, str(ROOT))

from analysis import long_horizon, selection  # noqa: E402

__all__ = ["DocTable", "FLIPS", "TABLES", "differences", "render", "replace_block", "tolerance_pp", "main"]


@dataclass(frozen=True)
class DocTable:
    """One generated table: where it sits, what it reads, what makes it."""

    name: str
    doc: str                      # the doc that holds it, relative to the repository root
    results: tuple[str, ...]      # the results folders it reads, relative to the root (or --results-root)
    command: str                  # the command(s) that write those folders
    make: Callable[[list[Path]], str]  # results folders -> the Markdown table


def _selection_errors(dirs: list[Path]) -> str:
    return selection.error_table(selection.load_selection(dirs))


def _selection_chosen(dirs: list[Path]) -> str:
    return selection.chosen_table(selection.load_selection(dirs))


def _long_horizon_rounds(dirs: list[Path]) -> str:
    return long_horizon.summary_table(long_horizon.stream_tables(long_horizon.load_dirs([str(d) for d in dirs])))


TABLES = {t.name: t for t in (
    DocTable("selection_quick", "docs/selection.md", ("results/select_quick",),
             "unitta select sweeps/select_quick.yaml --local", _selection_errors),
    DocTable("selection_quick_chosen", "docs/selection.md", ("results/select_quick",),
             "unitta select sweeps/select_quick.yaml --local", _selection_chosen),
    DocTable("long_horizon_reduced", "docs/long_horizon.md",
             ("results/long_horizon_reduced",),  # both sweeps write there
             "python -m unitta.sweep sweeps/long_horizon_reduced.yaml && "
             "python -m unitta.sweep sweeps/long_horizon_reduced_ccc.yaml", _long_horizon_rounds),
)}

# How far a number may move on another machine: a handful of predictions flipped by a different CPU's float
# rounding (another BLAS, another vector width), in the smallest cell the table reads (docs/analysis.md, "Docs from
# runs"): FLIPS / n_samples of that cell, in percentage points.
FLIPS = 3
_NUMBER = re.compile(r"(-?\d+\.\d+)")


def tolerance_pp(dirs: list[Path]) -> float:
    """Percentage points a table's numbers may differ by on another machine: ``FLIPS`` predictions of the smallest
    stream among the rows the table reads."""
    from unitta.results import load_results

    sizes = [n for d in dirs for n in load_results(d)["n_samples"].drop_nulls().to_list() if n]
    return 100.0 * FLIPS / min(sizes) if sizes else 0.0


def differences(old: str, new: str, tolerance: float) -> list[str]:
    """Where two renderings of a table differ beyond ``tolerance`` (numbers with a decimal point) or at all (the
    text around them; runs of spaces and best-value markers are not compared: column widths and a tie's bold move
    with the digits)."""
    def parts(text: str) -> list[str]:
        return _NUMBER.split(re.sub(r"\s+", " ", text.replace("**", "")))

    a, b = parts(old), parts(new)
    if len(a) != len(b):
        return [f"the tables differ in shape ({(len(a) - 1) // 2} vs {(len(b) - 1) // 2} numbers)"]
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if i % 2 == 0 and x != y:
            out.append(f"text {x.strip()[:40]!r} vs {y.strip()[:40]!r}")
        elif i % 2 == 1 and abs(float(x) - float(y)) > tolerance + 1e-9:
            out.append(f"{x} vs {y} (more than {tolerance:.2f} apart)")
    return out


_BLOCK = re.compile(r"(<!-- docs_tables: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /docs_tables -->)", re.S)


def blocks(text: str) -> list[str]:
    """The table names of a doc's generated blocks, in order."""
    return [m.group("name") for m in _BLOCK.finditer(text)]


def block_of(text: str, name: str) -> str:
    """The body of the block of ``name``."""
    return next(m.group("body") for m in _BLOCK.finditer(text) if m.group("name") == name)


def replace_block(text: str, name: str, table: str) -> str:
    """``text`` with the block of ``name`` holding ``table``; ValueError if the doc has no such block."""
    found = [m for m in _BLOCK.finditer(text) if m.group("name") == name]
    if len(found) != 1:
        raise ValueError(f"{len(found)} blocks '<!-- docs_tables: {name} -->' (expected one)")
    m = found[0]
    return text[:m.start("body")] + table.rstrip("\n") + "\n" + text[m.end("body"):]


def render(table: DocTable, results_root: Path = ROOT) -> str | None:
    """The table from its results folders, None when one is missing."""
    dirs = [results_root / r for r in table.results]
    if not all(d.is_dir() for d in dirs):
        return None
    return table.make(dirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate (or --check) the docs' tables from results folders.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"tables (default: all): {', '.join(TABLES)}")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs beyond another machine's float rounding "
                             f"({FLIPS} predictions of the smallest cell)")
    parser.add_argument("--results-root", type=Path, default=ROOT,
                        help="where the results folders are (default: the repository root)")
    parser.add_argument("--docs-root", type=Path, default=ROOT, help="where docs/ is (default: the repository root)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in TABLES]
    if unknown:
        print(f"docs_tables: unknown table(s) {', '.join(unknown)}; known: {', '.join(TABLES)}", file=sys.stderr)
        return 2
    stale = 0
    for name in args.names or list(TABLES):
        table = TABLES[name]
        new = render(table, args.results_root)
        if new is None:
            print(f"{name}: not {'checked' if args.check else 'made'}: {', '.join(table.results)} missing "
                  f"(run: {table.command})")
            continue
        doc = args.docs_root / table.doc
        text = doc.read_text()
        updated = replace_block(text, name, new)
        if updated == text:
            print(f"{name}: {table.doc} up to date")
        elif args.check:
            tolerance = tolerance_pp([args.results_root / r for r in table.results])
            off = differences(block_of(text, name), new, tolerance)
            if not off:
                print(f"{name}: {table.doc} agrees within {tolerance:.2f} points ({FLIPS} predictions of the smallest "
                      "cell: another machine's float rounding)")
                continue
            stale += 1
            print(f"{name}: {table.doc} differs from {', '.join(table.results)} beyond {tolerance:.2f} points: "
                  f"{'; '.join(off[:3])} (run: python bench/docs_tables.py {name})")
        else:
            doc.write_text(updated)
            print(f"{name}: {table.doc} updated from {', '.join(table.results)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
