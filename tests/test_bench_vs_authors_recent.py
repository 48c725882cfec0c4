"""``bench/vs_authors_recent.py``'s bad input: a missing or wrong checkout of the authors' code, or an unknown method,
is one line on stderr and exit 2, printing nothing else (the comparison itself needs the authors' repositories
outside this one and is not a test)."""

from __future__ import annotations

import sys

import pytest

from tests.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench():
    yield load_bench_script("vs_authors_recent")
    sys.modules.pop("bench_vs_authors_recent", None)
    sys.modules.pop("bench_vs_reference", None)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--methods", "tea"], "--tea is required"),
        (["--methods", "come", "--come", "/nonexistent/COME"], "not the expected checkout (missing tent_come.py)"),
        (["--methods", "ttaug"], "--md is required"),
        (["--methods", "tea", "shot"], "'shot' is not compared here"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(bench, args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(args)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and expected in err, err
