"""``bench/vs_reference.py``'s bad input: without a checkout of the reference benchmark it says so in one line on
stderr and exits 2, printing nothing else (the benchmark itself needs the reference outside the repository and is
not a test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "vs_reference.py"


@pytest.fixture(scope="module")
def bench():
    yield load_bench_script("vs_reference")
    sys.modules.pop("bench_vs_reference", None)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "--ref is required"),
        (["--ref", "/nonexistent/test-time-adaptation"], "no such folder"),
        (["--ref", str(SCRIPT.parent)], "not a mariodoebler/test-time-adaptation checkout (missing classification/"),
    ],
)
def test_a_missing_or_wrong_reference_is_one_line_and_exit_2(bench, args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(args)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and expected in err, err


def test_an_unknown_method_is_named(bench, capsys, tmp_path):
    for required in bench.reference_md.REQUIRED:  # a folder with the files a checkout is recognised by
        (tmp_path / required).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / required).write_text("")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--ref", str(tmp_path), "--methods", "cotta", "nosuchmethod"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "'nosuchmethod'" in err and len(err.strip().splitlines()) == 1
