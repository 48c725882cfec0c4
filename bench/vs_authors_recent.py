"""unitta's TEA, COME and TTAug side by side with their authors' code, on the same batches and model.

    python bench/vs_authors_recent.py --tea /tmp/tea --come /tmp/COME --md /tmp/test-time-adaptation \\
                                      [--methods tea come ttaug] [--reps 3] [--batches 4] [--ttaug-images 32]

Fetch yuanyige/tea (TEA, CVPR'24), BlueWhaleLab/COME (COME, ICLR'25) and mariodoebler/test-time-adaptation
(@ 8b2ed63, TTAug) into throw-away folders outside this repository; their method modules are imported from there,
never copied here: TEA's ``core/adazoo/energy.py`` with its ``core/param.py`` (``configure_model``,
``collect_params``), COME's ``tent_come.py`` (compiled from its file with its ImageNet class count 1000 set to the
model's K = 10, the README's ``K``: unitta's K is the model's number of classes), md's ``methods/ttaug.py`` through
``bench/reference_md.py``.

The machinery of ``bench/vs_reference.py``: one process, one thread; both sides get deep copies of the embedded
ResNet-20 (``load_model("fmnist-c", "resnet20")``) and the same real Fashion-MNIST-C batches of 64 (its
``load_batches``: a seeded shuffle across the 15 corruptions); each repetition builds both methods afresh (not
timed) and runs the stream batch by batch through both, alternating which goes first; CPU time
(``time.process_time``) summed over the stream, median over ``--reps``; the ratio (unitta / authors) is the median
of the repetitions' ratios. Seeds: the repetition.

Per method:
- COME: the authors' ``Tent_COME`` with ``configure_model`` / ``collect_params`` and ``torch.optim.Adam(lr 1e-3)``
  (TENT's CIFAR optimiser, unitta's default for COME; the authors run ImageNet only).
- TEA: the authors' ``Energy`` with ``cfgs/cifar10/energy.yaml`` (Adam 1e-3, SGLD 20 x 0.1, noise 0.01, buffer
  10,000, reinit 0.05, unconditional). Their random numbers come from torch's global RNG, seeded here with the seed
  of unitta's chain generator: unitta draws in the same order, so the two chains start from the same buffer and
  noise. The column "unitta seed vs seed" is the agreement of two unitta runs of other seeds (the seed range).
- TTAug: md's ``TTAug`` per image (its protocol, batch 1). "same views": md gets unitta's views of each image
  (``TTAug.views``); "own views": each side makes its own, md with its loader's ``AugMixAugmenter`` (PIL and numpy,
  from the uint8 image, as ``vs_reference.view_makers``), whose time counts on md's side; the next column is the
  ratio to md's method alone (without its loader's views).

Columns: prediction agreement (share of images whose argmax agrees, mean over repetitions) and the largest absolute
difference of the two sides' scores over the stream (max over repetitions).

Bad input (a folder missing or not the expected checkout, an unknown method): one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import copy
import linecache
import logging
import statistics
import sys
import time
import types
import warnings
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == _BENCH:
    sys.path.pop(0)  # run as a script: bench/ modules stay out of the import path (as vs_reference.py)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from unitta.models.code_files import import_file  # noqa: E402


def _sibling(name: str):
    """``bench/<name>.py`` as the module ``bench_<name>``, imported by its path (bench/ is not on sys.path)."""
    return import_file(f"bench_{name}", _BENCH / f"{name}.py")


vs_reference = _sibling("vs_reference")  # load_batches, view_makers, and through it reference_md
reference_md = vs_reference.reference_md

METHODS = ("tea", "come", "ttaug")
REQUIRED = {  # the files each checkout must hold
    "tea": ("core/adazoo/energy.py", "core/param.py", "cfgs/cifar10/energy.yaml"),
    "come": ("tent_come.py",),
}
NOTES = {
    "tea": "Adam 1e-3; SGLD 20 x 0.1, noise 0.01; buffer 10,000, reinit 0.05 (energy.yaml)",
    "come": "Adam 1e-3 (TENT's CIFAR), K = 10",
    "ttaug": "32 AugMix views + the image, BN alpha 0.1, per image",
}


def die(message: str) -> None:
    print(f"vs_authors_recent: {message}", file=sys.stderr)
    raise SystemExit(2)


def checkout_problem(flag: str, path: str | None, required: tuple[str, ...]) -> str | None:
    if not path:
        return f"{flag} is required for the methods asked: the folder of the authors' checkout"
    missing = [f for f in required if not (Path(path) / f).is_file()]
    if missing:
        return f"{flag} {path}: not the expected checkout (missing {missing[0]})"
    return None


# ---------------------------------------------------------------------------------------------- the authors' code
def import_tea(root: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """TEA's ``core.adazoo.energy`` and ``core.param`` (its repository root on sys.path: they import ``core.*``)."""
    sys.path.insert(0, str(Path(root).resolve()))
    import core.adazoo.energy as energy  # noqa: PLC0415 - from the checkout given on the command line
    import core.param as param  # noqa: PLC0415

    return energy, param


def import_come(root: Path, num_classes: int) -> types.ModuleType:
    """COME's ``tent_come.py``, compiled from its file with the ImageNet class count 1000 set to ``num_classes``."""
    path = Path(root) / "tent_come.py"
    text = path.read_text()
    if text.count("1000") != 3:
        die(f"--come: {path} no longer has the three 1000s of dirichlet_entropy; update this bench")
    text = text.replace("1000", str(num_classes))
    name = f"{path} (K = {num_classes})"  # torch.jit.script reads a function's source by its file name: this text's
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    module = types.ModuleType("authors_tent_come")
    module.__file__ = name
    exec(compile(text, name, "exec"), module.__dict__)  # noqa: S102
    return module


def build_authors(name: str, model, seed: int, modules: dict, ours):
    """The authors' method on a deep copy of ``model``, seeded like ``ours``; a callable batch -> scores."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = copy.deepcopy(model)
    if name == "come":
        tent_come = modules["come"]
        model = tent_come.configure_model(model)
        params, _ = tent_come.collect_params(model)
        method = tent_come.Tent_COME(model, torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999)), args=None)
        return method
    if name == "tea":
        energy, param = modules["tea"]
        model = param.configure_model(model, ada_param=["bn"])
        params, _ = param.collect_params(model, ada_param=["bn"], logger=logging.getLogger("tea"))
        optimizer = torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0)  # core/optim.py
        torch.manual_seed(ours.chain_generator.initial_seed())  # the chain's draws: the same numbers in order
        return energy.Energy(model, optimizer, steps=1, episodic=False, buffer_size=10000, sgld_steps=20,
                             sgld_lr=0.1, sgld_std=0.01, reinit_freq=0.05, if_cond="uncond", n_classes=10,
                             im_sz=32, n_ch=3)
    cls = reference_md.reference_class("ttaug", "TTAug")
    model.model_preprocess = None
    with redirect_stdout(StringIO()):  # AlphaBatchNorm prints what it replaced
        return cls(reference_md.config({}), model, 10)


def build_ours(name: str, model, info, seed: int):
    from unitta.methods import get_method

    return get_method(name, copy.deepcopy(model), info, dataset="fmnist-c", seed=seed)


# ---------------------------------------------------------------------------------------------- one repetition
def run_pair(name, model, info, batches, u8s, makers, modules, seed: int) -> dict[str, float]:
    """Both methods built afresh, then the stream batch by batch, alternating which side runs first."""
    clock = time.process_time
    ours = build_ours(name, model, info, seed)
    theirs = build_authors(name, model, seed, modules, ours)
    t_ours = t_theirs = t_views = 0.0
    s_ours, s_theirs, same_ours, same_theirs = [], [], [], []
    with torch.no_grad():  # as unitta.evaluate and the authors' test loops
        for i, (x, u8) in enumerate(zip(batches, u8s)):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                t = clock()
                if side == 0:
                    s_ours.append(ours(x))
                    t_ours += clock() - t
                elif name == "ttaug":
                    views = makers["memo"](u8)  # md's loader: [image] + 32 AugMix views per image (n_views=32)
                    t_views += clock() - t
                    s_theirs.append(torch.cat([theirs(v) for v in views]))
                    t_theirs += clock() - t
                else:
                    s_theirs.append(theirs(x))
                    t_theirs += clock() - t
            if name == "ttaug":  # the same views on both sides (not timed)
                views = ours.views(x)
                same_ours.append(ours.views_scores(views))
                same_theirs.append(torch.cat([theirs(list(v.split(1))) for v in views]))
    a, b = torch.cat(s_ours), torch.cat(s_theirs)
    out = {"unitta": t_ours, "authors": t_theirs, "views": t_views, "agreement": _agree(a, b), "diff": _diff(a, b)}
    if name == "ttaug":
        a, b = torch.cat(same_ours), torch.cat(same_theirs)
        out.update(same_agreement=_agree(a, b), same_diff=_diff(a, b))
    if name == "tea":  # the seed range: two unitta runs of other seeds
        other = build_ours(name, model, info, seed + 100)
        with torch.no_grad():
            c = torch.cat([other(x) for x in batches])
        out["seed_agreement"] = _agree(torch.cat(s_ours), c)
    return out


def _agree(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(dim=1) == b.argmax(dim=1)).float().mean().item()


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def measure(name, model, info, batches, makers, modules, reps: int) -> dict[str, float]:
    u8s = [(x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy() for x in batches]
    run_pair(name, model, info, batches[:1], u8s[:1], makers, modules, seed=100)  # warm-up, untimed
    rows = [run_pair(name, model, info, batches, u8s, makers, modules, seed=rep) for rep in range(reps)]
    out = {k: statistics.median(r[k] for r in rows) for k in ("unitta", "authors", "views")}
    out["ratio"] = statistics.median(r["unitta"] / r["authors"] for r in rows)
    out["ratio_method"] = statistics.median(r["unitta"] / (r["authors"] - r["views"]) for r in rows)
    for key in ("agreement", "same_agreement", "seed_agreement"):
        if key in rows[0]:
            out[key] = statistics.mean(r[key] for r in rows)
    for key in ("diff", "same_diff"):
        if key in rows[0]:
            out[key] = max(r[key] for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tea", help="folder of a yuanyige/tea checkout")
    parser.add_argument("--come", help="folder of a BlueWhaleLab/COME checkout")
    parser.add_argument("--md", help="folder of a mariodoebler/test-time-adaptation checkout (TTAug)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help=f"default: {' '.join(METHODS)}")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=4, help="batches of 64 (TEA, COME)")
    parser.add_argument("--ttaug-images", type=int, default=32, help="images TTAug predicts (in batches of 16)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        die(f"--methods: {unknown[0]!r} is not compared here; choose from {list(METHODS)}")
    if args.reps < 1 or args.batches < 1 or args.ttaug_images < 1:
        die("--reps, --batches and --ttaug-images must be >= 1")
    for name, flag, path in (("tea", "--tea", args.tea), ("come", "--come", args.come)):
        if name in args.methods and (problem := checkout_problem(flag, path, REQUIRED[name])):
            die(problem)
    if "ttaug" in args.methods and (problem := reference_md.checkout_problem(args.md)):
        die(problem.replace("--ref", "--md"))
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.jit.script in the authors' code
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    modules: dict = {}
    if "tea" in args.methods:
        modules["tea"] = import_tea(Path(args.tea))
    if "come" in args.methods:
        modules["come"] = import_come(Path(args.come), num_classes=10)
    makers = {}
    if "ttaug" in args.methods:
        reference_md.import_reference(Path(args.md))
        makers = vs_reference.view_makers()
    from unitta.models import load_model

    model, info = load_model("fmnist-c", "resnet20")
    model.eval()
    batches = vs_reference.load_batches(args.batches)
    print("| method | unitta s | authors s | ratio | authors' loader views s | ratio to the authors' method alone "
          "| agreement % | max abs. score diff | same views: agreement %, diff | unitta seed vs seed % "
          "| hyper-parameters |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for name in args.methods:
        stream = batches
        if name == "ttaug":
            images = torch.cat(batches)[: args.ttaug_images]
            stream = list(images.split(16))
        r = measure(name, model, info, stream, makers, modules, args.reps)
        alone = f"{r['ratio_method']:.2f}" if name == "ttaug" else "="
        same = f"{100 * r['same_agreement']:.1f}, {r['same_diff']:.1e}" if "same_agreement" in r else ""
        seeds = f"{100 * r['seed_agreement']:.1f}" if "seed_agreement" in r else ""
        print(f"| {name} | {r['unitta']:.2f} | {r['authors']:.2f} | {r['ratio']:.2f} | {r['views']:.2f} | {alone} "
              f"| {100 * r['agreement']:.1f} | {r['diff']:.1e} | {same} | {seeds} | {NOTES[name]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
