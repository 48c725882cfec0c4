"""``bench/gpu.py`` end to end on the CPU at a tiny size (docs/benchmarks.md, "The GPU measurement"): the embedded
ResNet-20 on real Fashion-MNIST-C stream batches, packing as separate processes, a grid config's estimate with its
unmeasured cells, the methods that need source data built with the source split, and bad input in one line with
exit 2. The paper's models need robustbench checkpoints that are not here; the GPU figures come from a GPU session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu.py"


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("UNITTA_CUDNN_BENCHMARK", None)
    return subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)  # fmt: skip


def _grid_config(tmp_path: Path, methods: list[str]) -> Path:
    config = tmp_path / "grid.yaml"
    config.write_text(
        "name: tiny\noutput: out\ndatasets: [fmnist-c]\nmodels: {fmnist-c: resnet20}\n"
        f"methods: [{', '.join(methods)}]\nsettings: [n111]\nseeds: [425]\n"
    )
    return config


@pytest.fixture(scope="module")
def bench():
    yield load_bench_script("gpu")
    sys.modules.pop("bench_gpu", None)


@pytest.mark.slow
def test_a_grid_on_the_cpu_with_two_packed_processes(tmp_path):
    config = _grid_config(tmp_path, ["test", "bn"])
    out, lengths = tmp_path / "gpu.json", tmp_path / "lengths.json"
    done = _run("--grid", str(config), "--warmup", "1", "--batches", "2", "--pack", "2",
                "--lengths", str(lengths), "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = {r["method"]: r for r in report["rows"]}
    assert list(rows) == ["test", "bn"]
    for row in rows.values():
        assert row["error"] == "" and row["arch"] == "resnet20"
        assert row["images_per_s"] > 0 and row["timed_batches"] == 2
        assert row["pack"] == 2 and row["pack_images_per_s"] > 0
        assert row["aten_ops"] > 0 and row["syncs"] >= 0
    assert rows["bn"]["extra"]["inputs"][0].startswith("stream: real fmnist-c images, official stream n111")
    assert "cuDNN benchmark off" in report["backend"]
    # the estimate: the official stream's images x each method's measured seconds per image
    grid = report["grid"]
    images = json.loads(lengths.read_text())["fmnist-c"]["n111/425"]
    assert grid["images_per_cell_sum"] == {"fmnist-c": images} and grid["unmeasured"] == []
    for name, row in rows.items():
        assert grid["hours"][name]["fmnist-c"] == pytest.approx(images / row["images_per_s"] / 3600)
    assert "estimated GPU-hours" in done.stdout


def test_the_methods_that_need_source_data_are_built_with_the_source_split(bench):
    needs = [m for m in bench.list_methods() if bench.method_class(m).needs_source]
    assert {"eata", "rmt", "santa", "gtta"} <= set(needs)
    args = bench.parse(["--device", "cpu", "--warmup", "0", "--batches", "1"])
    assert bench.check(args) is None
    inputs = bench.prepare("resnet20", "fmnist-c", needs, args, bench.torch.device("cpu"))
    assert len(inputs.batches) == 1 and inputs.batches[0].shape == (64, 3, 32, 32)
    assert inputs.notes[-1] == "source: fmnist-c's source split (60,000 images)"
    # a slice of it here: SANTA's set-up passes its whole source split once (minutes on this CPU)
    inputs.source = bench.torch.utils.data.Subset(inputs.source, range(128))
    for name in needs:
        assert bench.build(name, inputs, args).source is inputs.source


def test_a_spent_budget_lists_every_cell_as_unmeasured(tmp_path):
    config = _grid_config(tmp_path, ["test", "rotta"])
    done = _run("--grid", str(config), "--budget-s", "0", "--lengths", str(tmp_path / "lengths.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "time budget reached: resnet20 not measured" in done.stdout
    assert "unmeasured cells (2), so the total is a lower bound:" in done.stdout
    assert "rotta on fmnist-c (resnet20): not reached within the time budget" in done.stdout


def test_the_grid_comes_first_then_what_the_options_add(bench, tmp_path):
    plan = bench.grid_plan(str(_grid_config(tmp_path, ["test", "bn"])))
    args = bench.parse(["--grid", "x", "--methods", "bn", "tent", "--models", "resnet20", "Standard"])
    assert bench.work_list(args, plan) == [
        [("resnet20", "fmnist-c", ["test", "bn"])],
        [("resnet20", "fmnist-c", ["tent"])],
        [("Standard", "cifar10-c", ["bn", "tent"])],
    ]
    assert bench.work_list(bench.parse(["--grid", "x"]), plan) == [[("resnet20", "fmnist-c", ["test", "bn"])]]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--methods", "nosuch"], {}, "error: unknown method(s) nosuch; known: "),
        (["--batches", "0"], {}, "error: --warmup must be >= 0, --batches and --pack >= 1"),
        (["--grid", "/nonexistent.yaml"], {}, "error: --grid: /nonexistent.yaml: "),
        ([], {"UNITTA_CUDNN_BENCHMARK": "yes"}, "error: UNITTA_CUDNN_BENCHMARK='yes': expected 0 or 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(bench, args, env, expected, capsys, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert bench.main(["--device", "cpu", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith(expected), err


def test_a_dry_rehearsal_keeps_its_budget_in_every_step(tmp_path):
    """The CPU rehearsal of ``--grid --budget-s``: every step (warm-up, timing, operator count, packing) ends inside
    the budget or is skipped and listed; the grid's packing (num_gpus 0.5: two cells per GPU) is read."""
    config = _grid_config(tmp_path, ["test", "bn", "tent", "rotta"])
    config.write_text(config.read_text() + "resources: {num_cpus: 1, num_gpus: 0.5}\n")
    budget = 12
    done = _run("--grid", str(config), "--budget-s", str(budget), "--pack", "1", "--warmup", "2", "--batches", "2",
                "--lengths", str(tmp_path / "lengths.json"), "--json", str(tmp_path / "gpu.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    measured = float(done.stdout.split("measured in ")[1].split(" s")[0])
    # a row being timed ends after the batch that crossed the budget: one batch of slack (a few s on a busy CPU)
    assert measured <= budget + 5, done.stdout
    assert report["grid"]["cells_per_gpu"] == 2
    assert "2 cells per GPU, as the config packs them" in done.stdout
    for row in report["rows"]:  # measured, or listed with what was left out
        assert row["error"] or row["images_per_s"] > 0
        assert all(step in ("ops", "pack 1") for step in row["skipped"])


def test_a_row_stops_before_a_batch_that_would_overrun_and_the_next_model_is_not_loaded(bench):
    """Loading a model and every warm-up batch are budgeted steps: a batch as long as the longest so far that would
    end after the deadline is not started (one batch of a big model on a CPU takes seconds; issue 53)."""
    import time

    calls = []
    inputs = bench.Inputs("m", "d", None, None, [])
    inputs.batch_s = 5.0  # an earlier row's longest batch
    with pytest.raises(bench.OverBudget):
        bench.warm_up(calls.append, [1, 2], time.perf_counter() + 1.0, inputs)
    assert calls == []
    inputs.batch_s = 0.0
    bench.warm_up(calls.append, [1, 2], time.perf_counter() + 30.0, inputs)
    assert calls == [1, 2] and 0 < inputs.batch_s < 1
