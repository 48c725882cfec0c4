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

__all__ = ["DocTable", "TABLES", "render", "replace_block", "main"]


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

_BLOCK = re.compile(r"(<!-- docs_tables: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /docs_tables -->)", re.S)


def blocks(text: str) -> list[str]:
    """The table names of a doc's generated blocks, in order."""
    return [m.group("name") for m in _BLOCK.finditer(text)]


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
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
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
            stale += 1
            print(f"{name}: {table.doc} differs from {', '.join(table.results)} (run: python bench/docs_tables.py "
                  f"{name})")
        else:
            doc.write_text(updated)
            print(f"{name}: {table.doc} updated from {', '.join(table.results)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
