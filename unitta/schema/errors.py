"""A pydantic validation error as one line naming the key and what it takes (docs/results.md: every config mistake
is one line and exit code 2)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ["one_line"]

_TYPE_ERRORS = ("_type", "literal_error", "_parsing")


def _is_tag(part: Any) -> bool:
    """pydantic's union-branch / validator markers in an error location, e.g. 'list[float]'."""
    return isinstance(part, str) and ("[" in part or "(" in part or part.startswith("function-"))


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _is_tag(part) or part == "YamlRange":
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _field(err: dict) -> tuple:
    out = []
    for part in err["loc"]:
        if _is_tag(part) or part == "YamlRange":
            break
        out.append(part)
    return tuple(out)


def one_line(exc: ValidationError) -> str:
    """The first real problem of a pydantic error as '<key>: <problem>' (+ how many more)."""
    errors = exc.errors(include_url=False)
    # A union field reports one error per branch: when one branch has a real problem (unknown key,
    # bad value), the other branches' "wrong type" complaints are noise.
    real = {_field(e) for e in errors if not e["type"].endswith(_TYPE_ERRORS)}
    kept = [
        e for e in errors
        if not (e["type"].endswith(_TYPE_ERRORS) and any(_field(e)[: len(r)] == r for r in real if r))
    ] or errors
    err = kept[0]
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if err["type"] == "missing":
        msg = "missing (required)"
    elif err["type"] not in ("value_error", "assertion_error"):
        msg = f"{msg} (got {err.get('input')!r})"
    loc = _loc(tuple(err["loc"]))
    more = len(kept) - 1
    tail = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    head = f"{loc}: " if loc else ""
    return f"{head}{msg}{tail}".replace("\n", " ")
