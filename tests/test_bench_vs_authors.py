"""``bench/vs_authors.py``'s bad input: without a checkout of LINs-lab/ttab, with a folder that is not one, or with a
method it does not compare, it says so in one line on stderr and exits 2, printing nothing else (the benchmark itself
needs the authors' code outside the repository and is not a test); ``reference_authors.definitions`` compiles only
the named definitions of a file."""

from __future__ import annotations

import sys

import pytest

from tests.bench_scripts import BENCH, load_bench_script


@pytest.fixture(scope="module")
def bench():
    yield load_bench_script("vs_authors")
    for name in ("bench_vs_authors", "bench_reference_authors", "bench_vs_reference", "bench_reference_md"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "--ttab is required"),
        (["--ttab", "/nonexistent/ttab"], "no such folder"),
        (["--ttab", str(BENCH)], "not a LINs-lab/ttab checkout (missing ttab/model_adaptation/shot.py)"),
    ],
)
def test_a_missing_or_wrong_checkout_is_one_line_and_exit_2(bench, args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(args)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and expected in err, err


def test_an_unknown_method_is_named(bench, capsys, tmp_path):
    for required in bench.authors.TTAB_REQUIRED:  # a folder with the files a checkout is recognised by
        (tmp_path / required).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / required).write_text("")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--ttab", str(tmp_path), "--methods", "t3a", "tent"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "'tent'" in err and len(err.strip().splitlines()) == 1


def test_definitions_compiles_only_the_named_ones(bench, tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import not_installed_anywhere\n\ndef wanted(x):\n    return helper(x) + 1\n\n"
                      "def other():\n    raise RuntimeError\n")
    ns = bench.authors.definitions(source, ("wanted",), {"helper": lambda x: 2 * x})
    assert ns["wanted"](3) == 7 and "other" not in ns
    with pytest.raises(ValueError, match="defines no missing"):
        bench.authors.definitions(source, ("missing",), {})
