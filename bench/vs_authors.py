"""unitta's SHOT, T3A and Conjugate PL side by side with the code of the benchmarks that run them, on the same batches.

    python bench/vs_authors.py --ttab /tmp/ttab [--benchmark-tta /tmp/Benchmark-TTA]
                               [--methods shot t3a conjugate_pl] [--reps 5] [--batches 8]

Fetch LINs-lab/ttab (and, for a second T3A, yuyongcan/Benchmark-TTA) into throw-away folders outside this
repository; ``bench/reference_authors.py`` compiles only their method classes from there (neither package imports
on this machine; how, without stubbing anything, is said there). Benchmark-TTA's SHOT is not run: it is the
offline form (epochs over a whole domain with clustered pseudo-labels, ``src/methods/shot.py``), not the online
one compared here.

The machinery of ``bench/vs_reference.py``: one process, one thread; both sides get deep copies of the embedded
ResNet-20 (``load_model("fmnist-c", "resnet20")``) and the same real Fashion-MNIST-C batches of 64 (a seeded
shuffle across the 15 corruptions); each repetition builds both afresh (not timed) and runs the stream batch by
batch through both, alternating which goes first; CPU time (``time.process_time``) summed over the stream, median
over ``--reps``; the ratio (unitta / reference) is the median of the repetitions' ratios.

What runs on ttab's side per batch: the method's ``one_adapt_step`` (the forward, loss, backward and step of one
adaptation step, with ttab's own bookkeeping in it: the optimiser state copy and gradient clones it returns),
``yhat`` its prediction. ttab's outer loop around it (its model-selection state copies and metrics) is not run,
which leaves out work ttab does per batch. Benchmark-TTA's T3A is its ``nn.Module``'s forward.

Hyper-parameters: ttab's ``configs/algorithms.py`` and ``parameters.py`` defaults (``reference_authors.ttab_config``;
SGD 1e-3 Nesterov; SHOT beta 0.3, threshold 0.9; T3A top_M 100; Conjugate PL T 1, eps 0), which are unitta's
defaults for these methods (docs/methods.md); Benchmark-TTA's T3A with its CIFAR-10 ``FILTER_K`` 100.

Columns: prediction agreement (share of images whose argmax agrees) and the largest absolute difference between the
two sides' scores (T3A: adjusted logits; Conjugate PL: ttab returns logits / T, compared with unitta's logits / T;
SHOT: logits), over the whole stream.

Bad input (no --ttab, not a checkout, unknown method): one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == _BENCH:
    sys.path.pop(0)  # run as a script: bench/ modules stay out of the import path (as vs_reference.py)

import torch  # noqa: E402

from unitta.models.code_files import import_file  # noqa: E402


def _sibling(name: str):
    """``bench/<name>.py`` as the module ``bench_<name>``, imported by its path (bench/ is not on sys.path)."""
    return import_file(f"bench_{name}", _BENCH / f"{name}.py")


authors = _sibling("reference_authors")
vs_reference = _sibling("vs_reference")  # load_batches: the same stream as the mariodoebler comparison

METHODS = ("shot", "t3a", "conjugate_pl")
NOTES = {
    "shot": "SGD 1e-3 Nesterov, beta 0.3, threshold 0.9, classifier frozen",
    "t3a": "filter_k / top_M 100",
    "conjugate_pl": "SGD 1e-3 Nesterov, T 1, eps 0, layer4 frozen (none here)",
}


def die(message: str) -> None:
    print(f"vs_authors: {message}", file=sys.stderr)
    raise SystemExit(2)


def _no_timer(name: str):
    """ttab's ``timer("forward")`` context, without its bookkeeping (the harness's, not the method's)."""
    return contextlib.nullcontext()


class TtabSide:
    """One ttab method on a deep copy of the model: ``__call__(x)`` -> its scores for the batch."""

    def __init__(self, name: str, root: str, model, seed: int):
        cls = authors.ttab_classes(root)[{"shot": "SHOT", "t3a": "T3A", "conjugate_pl": "ConjugatePL"}[name]]
        from ttab.api import Batch

        self.batch = Batch
        self.seed = seed
        self.method = cls(authors.ttab_config(name, seed), authors.timm_style(copy.deepcopy(model)))
        self.takes_optimizer = name != "t3a"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m = self.method
        args = (m._model, m._optimizer) if self.takes_optimizer else (m._model,)
        return m.one_adapt_step(*args, self.batch(x, None), _no_timer, random_seed=self.seed)["yhat"].detach()


class BenchmarkTTASide:
    """Benchmark-TTA's T3A module on a deep copy of the model."""

    def __init__(self, root: str, model, filter_k: int = 100):
        self.method = authors.btta_t3a(root)(copy.deepcopy(model), filter_k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.method(x)


def build_unitta(name: str, model, info, seed: int):
    from unitta.methods import get_method

    return get_method(name, copy.deepcopy(model), info, dataset="fmnist-c", seed=seed)


def run_pair(make_ours, make_theirs, batches, seed: int) -> tuple[float, float, float, float]:
    """One repetition: (unitta s, reference s, agreement, max |score difference|), the two alternating."""
    clock = time.process_time
    ours_method, theirs_method = make_ours(seed), make_theirs(seed)
    ours = theirs = 0.0
    s_ours, s_ref = [], []
    with torch.no_grad():  # as unitta.evaluate; both methods enable gradients where they step
        for i, x in enumerate(batches):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                t = clock()
                if side == 0:
                    s_ours.append(ours_method(x))
                    ours += clock() - t
                else:
                    with torch.enable_grad():  # ttab's one_adapt_step has no enable_grad of its own
                        s_ref.append(theirs_method(x))
                    theirs += clock() - t
    a, b = torch.cat(s_ours).float(), torch.cat(s_ref).float()
    return ours, theirs, (a.argmax(1) == b.argmax(1)).float().mean().item(), (a - b).abs().max().item()


def measure(make_ours, make_theirs, batches, reps: int) -> dict[str, float]:
    run_pair(make_ours, make_theirs, batches[:1], seed=100)  # warm-up, untimed
    rows = [run_pair(make_ours, make_theirs, batches, seed=rep) for rep in range(reps)]
    return {
        "unitta": statistics.median(r[0] for r in rows), "reference": statistics.median(r[1] for r in rows),
        "ratio": statistics.median(r[0] / r[1] for r in rows), "agreement": statistics.mean(r[2] for r in rows),
        "max_diff": max(r[3] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttab", help="folder of a LINs-lab/ttab checkout")
    parser.add_argument("--benchmark-tta", help="folder of a yuyongcan/Benchmark-TTA checkout (a second T3A)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help=f"default: all of {', '.join(METHODS)}")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batches", type=int, default=8, help="batches of 64")
    args = parser.parse_args(argv)
    if problem := authors.checkout_problem("--ttab", args.ttab, authors.TTAB_REQUIRED, "LINs-lab/ttab"):
        die(problem)
    if args.benchmark_tta and (problem := authors.checkout_problem(
            "--benchmark-tta", args.benchmark_tta, authors.BTTA_REQUIRED, "yuyongcan/Benchmark-TTA")):
        die(problem)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        die(f"--methods: {unknown[0]!r} is not compared here; choose from {sorted(METHODS)}")
    if args.reps < 1 or args.batches < 1:
        die("--reps and --batches must be >= 1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    sys.path.insert(0, str(Path(args.ttab).resolve()))  # ttab.api, ttab.utils.auxiliary (reference_authors)
    from unitta.models import load_model

    model, info = load_model("fmnist-c", "resnet20")
    model.eval()
    batches = vs_reference.load_batches(args.batches)
    print("| method | reference | unitta s | reference s | ratio | agreement % | max abs score diff | "
          "hyper-parameters |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    pairs = [(m, "ttab") for m in args.methods]
    if args.benchmark_tta and "t3a" in args.methods:
        pairs.append(("t3a", "Benchmark-TTA"))
    for name, ref in pairs:
        def make_theirs(seed, name=name, ref=ref):
            if ref == "ttab":
                return TtabSide(name, args.ttab, model, seed)
            return BenchmarkTTASide(args.benchmark_tta, model)

        def make_ours(seed, name=name):
            method = build_unitta(name, model, info, seed)
            if name != "conjugate_pl":
                return method
            return lambda x: method(x) / method.cfg.temperature  # ttab's yhat is logits / T

        try:
            r = measure(make_ours, make_theirs, batches, args.reps)
        except Exception as exc:  # noqa: BLE001 - one method's failure is its row, the others still run
            print(f"| {name} | {ref} | failed: {type(exc).__name__}: {str(exc)[:100]} | | | | | {NOTES[name]} |",
                  flush=True)
            continue
        print(f"| {name} | {ref} | {r['unitta']:.2f} | {r['reference']:.2f} | {r['ratio']:.2f} | "
              f"{100 * r['agreement']:.1f} | {r['max_diff']:.1e} | {NOTES[name]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
