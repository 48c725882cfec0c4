"""python -m unitta.recommend: the paper's table, result directories (seeds, Tune points), the CLI's errors."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from unitta.paper import load_paper_table
from unitta.paper.stream_lengths import PAPER_STREAM_LENGTHS
from unitta.recommend import main, recommend
from unitta.recommend.inputs import benchmark_table
from unitta.streams import estimate_factors, make_stream, synthetic_labels
from unitta.streams.settings import default_factors

LABELS, DOMAINS = synthetic_labels("cifar10")


def _stream(code: str, seed: int = 0, length: int = 20_000, **kw):
    return make_stream(LABELS, DOMAINS, code, dataset="cifar10", sampler="exact", length=length, seed=seed, **kw)


@pytest.mark.parametrize("code", ["nui1", "i111", "n1nu", "iuiu"])
def test_paper_ranking_at_the_estimated_setting(code: str) -> None:
    s = _stream(code)
    table, source = benchmark_table(paper="cifar10-c")
    rec = recommend(estimate_factors(s.classes, s.domains), table, source)
    assert [p["setting"] for p in rec.points] == [code]
    paper = load_paper_table("cifar10-c").filter(pl.col("setting") == code).sort(["error", "method"])
    assert [m["method"] for m in rec.methods] == paper["method"].to_list()
    assert [m["error"] for m in rec.methods] == pytest.approx(paper["error"].to_list())
    # one run on a stream of known length: the binomial standard error
    best = rec.methods[0]
    n = PAPER_STREAM_LENGTHS["cifar10-c"][code]
    assert best["se"] == pytest.approx(100 * math.sqrt(best["error"] / 100 * (1 - best["error"] / 100) / n))


@pytest.mark.parametrize("code", ["nui1", "iuiu"])
def test_paper_stream_lengths_are_the_official_samplers(code: str) -> None:
    s = make_stream(LABELS, DOMAINS, code, dataset="cifar10", sampler="official")
    assert len(s) == PAPER_STREAM_LENGTHS["cifar10-c"][code]


def test_class_only_averages_over_the_six_domain_settings() -> None:
    s = _stream("n1n1")  # class (n,1)
    rec = recommend(estimate_factors(s.classes), *benchmark_table(paper="cifar100-c"))
    assert sorted(p["setting"] for p in rec.points) == sorted(f"n1{d}" for d in ("i1", "iu", "n1", "nu", "11", "1u"))
    paper = load_paper_table("cifar100-c").filter(pl.col("setting").str.starts_with("n1"))
    full = paper.group_by("method").agg(pl.col("error").mean(), pl.len()).filter(pl.col("len") == 6)
    expected = dict(zip(full["method"], full["error"]))
    assert {m["method"]: m["error"] for m in rec.methods} == pytest.approx(expected)  # LAME lacks n11u: left out


def _results_dir(tmp_path, rows: list[dict]) -> str:
    base = {"dataset": "fmnist-c", "status": "ok", "n_samples": 10_000}
    pl.DataFrame([{**base, **r} for r in rows]).write_parquet(tmp_path / "results.parquet")
    return str(tmp_path)


def test_results_dir_seeds_and_nearest_tune_point(tmp_path) -> None:
    n1i1 = default_factors("n1i1")
    tune = {**n1i1, "class_alpha": 0.8}  # a Tune point off the default factors
    rows = [
        {"method": "a", "setting": "n1i1", **n1i1, "error": 20.0, "seed": 0},
        {"method": "a", "setting": "n1i1", **n1i1, "error": 22.0, "seed": 1},
        {"method": "b", "setting": "n1i1", **n1i1, "error": 25.0, "seed": 0},
        {"method": "a", "setting": "n1i1", **tune, "error": 40.0, "seed": 0},
        {"method": "b", "setting": "n1i1", **tune, "error": 30.0, "seed": 0},
        {"method": "b", "setting": "i1i1", **default_factors("i1i1"), "error": 1.0, "seed": 0},
    ]
    d = _results_dir(tmp_path, rows)
    table, source = benchmark_table(results=[d])
    near_default = recommend(estimate_factors(*_pair(_stream("n1i1"))), table, source)
    assert [m["method"] for m in near_default.methods] == ["a", "b"]
    a = near_default.methods[0]
    assert a["error"] == pytest.approx(21.0) and a["se"] == pytest.approx(1.0)  # sd over 2 seeds / sqrt(2)
    b = near_default.methods[1]
    assert b["se"] == pytest.approx(100 * math.sqrt(0.25 * 0.75 / 10_000))
    near_tune = recommend(estimate_factors(*_pair(_stream("n1i1", class_alpha=0.8))), table, source)
    assert near_tune.points[0]["class_alpha"] == pytest.approx(0.8)
    assert [m["method"] for m in near_tune.methods] == ["b", "a"]


def _pair(s):
    return s.classes, s.domains


def test_cli_json_and_report(tmp_path, capsys) -> None:
    s = _stream("nui1")
    np.save(tmp_path / "c.npy", s.classes)
    (tmp_path / "d.csv").write_text("domain\n" + "\n".join(map(str, s.domains)) + "\n")
    assert main(["--classes", str(tmp_path / "c.npy"), "--domains", str(tmp_path / "d.csv"),
                 "--paper", "cifar10-c", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setting"] == "nui1"
    assert set(out["factors"]) == {"domain_alpha", "domain_beta", "class_alpha", "class_beta"}
    errors = [m["error"] for m in out["methods"]]
    assert errors == sorted(errors) and {"method", "error"} <= set(out["methods"][0])
    assert out["reason"].startswith(f"{out['methods'][0]['method']} has the lowest mean error")
    assert out["warnings"] == [] and out["alternatives"] == []  # a benchmark stream, far from any cut-off
    assert main(["--classes", str(tmp_path / "c.npy"), "--paper", "cifar10-c", "--top", "3"]) == 0
    report = capsys.readouterr().out
    assert "nearest setting: nu**" in report and "runner-up" in report


@pytest.mark.parametrize(
    "classes,domains,match",
    [
        ("", None, "no labels"),
        ("1\n2\nx\n", None, "line 3"),
        ("1\n2\n0\n", "0\n1\n", "--domains has 2 labels"),
        ("1.5\n2\n", None, "not an integer"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, classes, domains, match) -> None:
    (tmp_path / "c.txt").write_text(classes)
    argv = ["--classes", str(tmp_path / "c.txt"), "--paper", "cifar10-c"]
    if domains is not None:
        (tmp_path / "d.txt").write_text(domains)
        argv += ["--domains", str(tmp_path / "d.txt")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_cli_usage_errors_exit_2(tmp_path, capsys) -> None:
    (tmp_path / "c.txt").write_text("0\n1\n0\n1\n")
    with pytest.raises(SystemExit) as exc:
        main(["--classes", str(tmp_path / "c.txt")])  # neither --results nor --paper
    assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["--classes", str(tmp_path / "c.txt"), "--paper", "mnist"]) == 2
    assert main(["--classes", str(tmp_path / "c.txt"), "--results", str(tmp_path / "missing")]) == 2


# ---------------------------------------------------------------------- what limits a recommendation
def _report(tmp_path, capsys, classes, *extra) -> str:
    np.save(tmp_path / "labels.npy", np.asarray(classes))
    assert main(["--classes", str(tmp_path / "labels.npy"), "--paper", "cifar10-c", *extra]) == 0
    return capsys.readouterr().out


def _runs_stream(seed: int = 1, length: int = 10_000) -> np.ndarray:
    """Runs of 200-400 of one class; after a run of another class the next run is class 0 with probability 0.65:
    leaves are far from uniform (a ULMM leaves every state uniformly)."""
    rng = np.random.default_rng(seed)
    runs, prev = [], 0
    while sum(len(r) for r in runs) < length:
        c = 0 if prev != 0 and rng.random() < 0.65 else int(rng.integers(1, 10))
        runs.append(np.full(int(rng.integers(200, 401)), c))
        prev = c
    return np.concatenate(runs)[:length]


def test_hand_made_runs_stream_gets_a_misfit_warning(tmp_path, capsys) -> None:
    classes = _runs_stream()
    assert 0.33 < np.mean(classes == 0) < 0.43  # about 38 % class 0, as in the issue
    lines = _report(tmp_path, capsys, classes).splitlines()
    assert lines[0].startswith("warning: misfit: the class sequence is not the ULMM")
    assert "of the changes go to 0" in lines[0]
    assert any(line.startswith("reason: ") for line in lines)


def test_drifting_stream_gets_a_drift_warning(tmp_path, capsys) -> None:
    rng = np.random.default_rng(1)
    classes = np.concatenate([np.zeros(3000, dtype=np.int64), rng.integers(0, 10, 7000)])
    out = _report(tmp_path, capsys, classes)
    drift = [line for line in out.splitlines() if line.startswith("warning: drift:")]
    assert len(drift) == 1 and "state 0: 64 % of the first half" in drift[0]


@pytest.mark.parametrize("code", ["nui1", "i1i1", "n1nu", "nunu"])
def test_streams_from_the_benchmark_get_no_fit_or_drift_warning(code: str) -> None:
    from unitta.recommend import assess

    s = _stream(code)
    table, source = benchmark_table(paper="cifar10-c")
    rec = assess(recommend(estimate_factors(s.classes, s.domains), table, source), table, s.classes, s.domains)
    assert not [w for w in rec.warnings if w.startswith(("misfit", "drift", "far"))], rec.warnings


def test_short_stream_near_a_threshold_names_both_settings_and_rankings(tmp_path, capsys) -> None:
    s = _stream("nui1", seed=0, length=300, class_beta=3.5)  # just above the 3.16 cut-off between '1' and 'u'
    out = _report(tmp_path, capsys, s.classes, "--top", "3")
    lines = out.splitlines()
    near = next(line for line in lines if line.startswith("warning: near a threshold"))
    assert "class beta" in near and "straddles the cut-off 3.16" in near
    assert "candidate settings nu** and n1**" in near or "candidate settings n1** and nu**" in near
    assert any(line.startswith("alternative setting ") for line in lines)
    assert sum(line.startswith("reason: ") for line in lines) == 2  # one per candidate setting
    paper = load_paper_table("cifar10-c")
    for half in ("nu", "n1"):  # both rankings: each candidate's best method is the paper's over its 6 settings
        sub = paper.filter(pl.col("setting").str.starts_with(half)).group_by("method").agg(pl.col("error").mean(),
                                                                                          pl.len())
        best = sub.filter(pl.col("len") == 6).sort("error")["method"][0]
        assert any(f"reason: {best} has the lowest mean error" in line and f"{half}11" in line for line in lines)


def test_interval_basis_seeds_or_stream_sampling_only(tmp_path) -> None:
    n1i1 = default_factors("n1i1")
    rows = [{"method": m, "setting": "n1i1", **n1i1, "error": e, "seed": seed}
            for m, errors in (("a", (20.0, 22.0)), ("b", (25.0, 27.0))) for seed, e in enumerate(errors)]
    table, source = benchmark_table(results=[_results_dir(tmp_path, rows)])
    rec = recommend(estimate_factors(*_pair(_stream("n1i1"))), table, source)
    assert [m["basis"] for m in rec.methods] == ["seeds", "seeds"] and rec.runner_up()["basis"] == "seeds"
    assert "z = 3.5 from seeds" in rec.reason()  # gap 5; se 1 each (sd sqrt 2 over 2 seeds): sqrt(2)
    paper = recommend(estimate_factors(*_pair(_stream("n1i1"))), *benchmark_table(paper="cifar10-c"))
    assert paper.runner_up()["basis"] == "stream sampling only" and "from stream sampling only" in paper.reason()


@pytest.mark.parametrize(
    "labels,extra,match",
    [
        ([0, 1, 2, 1, 0, 10**8], [], "the largest label, 100000000 at position 5, implies 100,000,001 states"),
        ([0, 1, 2, 1, 0, 1e12], [], "implies 1,000,000,000,001 states; at most 1,000,000"),
        ([0, 1, 2, 1, 0, 1e30], [], "label 1e+30 is not a class index"),
        ([0, 1, 2, 1, 0, 10**8], ["--num-classes", "10"], "label 100000000 at position 5 is out of range"),
        ([0, 1, 2, 1, 0, 1], ["--num-classes", str(10**12)], "asks for 1,000,000,000,000 states"),
    ],
)
def test_a_stray_label_is_one_line_before_any_allocation(tmp_path, capsys, labels, extra, match) -> None:
    import resource

    np.save(tmp_path / "c.npy", np.array(labels))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["--classes", str(tmp_path / "c.npy"), "--paper", "cifar10-c", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: nothing near 100 MB


def test_a_label_too_large_for_an_integer_in_a_text_file(tmp_path, capsys) -> None:
    (tmp_path / "c.txt").write_text("0\n1\n" + "9" * 30 + "\n")
    assert main(["--classes", str(tmp_path / "c.txt"), "--paper", "cifar10-c"]) == 2
    assert "line 3: '999999999999999999999999999999' is not a class index" in capsys.readouterr().err
