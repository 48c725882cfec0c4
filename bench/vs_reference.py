"""unitta's methods side by side with the mariodoebler TTA benchmark's own code, on the same batches.

    python bench/vs_reference.py --ref /path/to/test-time-adaptation [--methods cotta adacontrast memo ...]
                                 [--reps 5] [--batches 4]

Fetch the reference (mariodoebler/test-time-adaptation, 8b2ed63 cited in docs/) into a throw-away folder outside
this repository; ``bench/reference_md.py`` imports its method modules from there (never copied here).

One process, one thread (``torch.set_num_threads(1)``). Both implementations get deep copies of the embedded
ResNet-20 (``load_model("fmnist-c", "resnet20")``) and the same real Fashion-MNIST-C batches (a seeded shuffle
across the 15 corruptions; ``--batches`` batches of 64; MEMO, batch size 1 in the reference: the first
``--memo-images`` images, one at a time on both sides). Each repetition builds both methods afresh (not timed) and
runs the stream batch by batch through both, alternating which goes first (u r, r u, ...); seeds = the
repetition. Time: ``time.process_time`` (CPU time of this process) summed over the stream, median over
``--reps``; the ratio (unitta / reference) is the median of the repetitions' ratios.

What the reference's time includes: its data loader's work for the method (AdaContrast: the test, weak and two
strong views built per image by PIL, ``get_augmentation_versions("twss", "moco-v2-light")``; MEMO: 32 AugMix
views per image, ``AugMixAugmenter``), starting from the uint8 image (the form its CIFAR-10-C loader holds), since
unitta builds the same views inside the method. The column ``ref. loader views s`` shows that share, and the
next one the ratio to the reference's method without it.

Hyper-parameters: the reference's ``cfgs/cifar10_c/<method>.yaml`` with its ``conf.py`` defaults, and unitta's
defaults (which follow them; ``docs/methods.md``); differences are named in ``SPECS`` (``note``). Building a
method is not timed, except for EATA, whose one-off Fisher estimate the reference runs in its constructor and
unitta at the first batch (both get the same Fashion-MNIST training images, ``unitta.data.load_source``).
The reference's DeYO imports ``einops``: put it on ``PYTHONPATH`` (e.g. ``pip install --target DIR einops``).
Prediction agreement: the share of images whose argmax agrees (random augmentations differ between the two, so
the methods that draw them agree on less than 100 %).

Bad input (no --ref, not a checkout, unknown method): one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import copy
import functools
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == _BENCH:
    sys.path.pop(0)  # run as a script: bench/ modules (methods.py: the reference has a package of that name) stay out

import numpy as np  # noqa: E402
import torch  # noqa: E402

from unitta.models.code_files import import_file  # noqa: E402


def _sibling(name: str):
    """``bench/<name>.py`` as the module ``bench_<name>``, imported by its path (bench/ is not on sys.path)."""
    return import_file(f"bench_{name}", _BENCH / f"{name}.py")


reference_md = _sibling("reference_md")


@dataclass(frozen=True)
class Spec:
    """One method both share: the reference's module/class, its cfg on top of ``reference_md.DEFAULTS``, and how
    its data loader turns a batch into the method's input (``views``: None = the tensor batch itself)."""

    module: str
    cls: str
    ref_cfg: dict = field(default_factory=dict)
    unitta: dict = field(default_factory=dict)
    views: str | None = None
    per_image: bool = False  # the reference's protocol is batch size 1 (MEMO): called once per image
    source: bool = False  # needs labelled source images: building the method (its one-off set-up) is timed too
    note: str = ""


_ADAM = "Adam 1e-3"  # cfgs/cifar10_c/<method>.yaml OPTIM (the conf.py default) and the unitta defaults
SPECS: dict[str, Spec] = {
    "cotta": Spec("cotta", "CoTTA", note=f"{_ADAM}, m 0.999, p 0.01, AP 0.92, 32 views"),
    "adacontrast": Spec(
        "adacontrast", "AdaContrast",
        {"OPTIM": {"METHOD": "SGD", "LR": 2e-4, "MOMENTUM": 0.9, "WD": 1e-4, "NESTEROV": True},
         "CONTRAST": {"TEMPERATURE": 0.07}},
        views="adacontrast", note="SGD 2e-4 Nesterov, wd 1e-4, queue 16384, T 0.07, 10 neighbours"),
    "memo": Spec("memo", "MEMO",
                 {"MODEL": {"EPISODIC": True}, "OPTIM": {"METHOD": "SGD", "LR": 0.005}, "TEST": {"BATCH_SIZE": 1}},
                 views="memo", per_image=True, note="SGD 5e-3 Nesterov, 32 AugMix views, BN alpha 0.1, per image"),
    "test": Spec("source", "Source", note="the source model"),
    "bn": Spec("norm", "BNTest", note="test-batch statistics"),
    "bn_alpha": Spec("norm", "BNAlpha", note="BN alpha 0.1"),
    "tent": Spec("tent", "Tent", note=_ADAM),
    "eata": Spec("eata", "EATA", {"EATA": {"FISHER_ALPHA": 1.0, "D_MARGIN": 0.4}, "SOURCE": {"NUM_SAMPLES": 2000}},
                 source=True, note=f"{_ADAM}, Fisher alpha 1 from 2000 source images (set-up timed), d 0.4"),
    "eta": Spec("eata", "EATA", {"EATA": {"FISHER_ALPHA": 0.0, "D_MARGIN": 0.4}},
                note=f"{_ADAM}, E0 0.4 ln K, d 0.4 (EATA without Fisher, cfgs/cifar10_c/eta.yaml)"),
    "sar": Spec("sar", "SAR", note="SAM(SGD 1e-3, momentum 0.9), rho 0.05, E0 0.4 ln K, e_m 0.2"),
    "rotta": Spec("rotta", "RoTTA", note=f"{_ADAM}, memory 64, nu 0.001, alpha 0.05"),
    "lame": Spec("lame", "LAME", unitta={"affinity": "rbf"}, note="rbf affinity, k 5 (unitta's default: knn)"),
    "rpl": Spec("rpl", "RPL", note=f"{_ADAM}, q 0.8"),
    "roid": Spec("roid", "ROID", note=f"{_ADAM}, weighting, prior correction, consistency"),
    "cmf": Spec("cmf", "CMF", note=f"{_ADAM}, alpha 0.99, gamma 0.99, q 0.005, lp"),
    "deyo": Spec("deyo", "DeYO", note=f"{_ADAM}, patch 4, PLPD 0.2, margin 0.5 ln K (the reference needs einops)"),
}


def die(message: str) -> None:
    print(f"vs_reference: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_batches(n_batches: int, batch_size: int = 64, seed: int = 0) -> list[torch.Tensor]:
    """``n_batches`` batches of real Fashion-MNIST-C images, a seeded shuffle across the corruptions."""
    from unitta.data import load_dataset

    need = n_batches * batch_size
    data = load_dataset("fmnist-c", n_per_domain=10 * (-(-need // 150)))  # 15 corruptions, 10 classes
    idx = np.random.default_rng(seed).permutation(len(data.domains))[:need]
    images = data.get_batch(idx)
    return [images[i * batch_size : (i + 1) * batch_size] for i in range(n_batches)]


def view_makers() -> dict[str, Callable]:
    """The reference loader's per-image transforms for the methods that augment in the loader."""
    from augmentations.transforms_adacontrast import get_augmentation_versions
    from augmentations.transforms_augmix import AugMixAugmenter
    from PIL import Image
    from torchvision import transforms

    ada = get_augmentation_versions(aug_versions="twss", aug_type="moco-v2-light", res_size=(32, 32), crop_size=32)
    memo = AugMixAugmenter(None, transforms.Compose([transforms.ToTensor()]), dataset_name="cifar10_c",
                           n_views=32, use_augmix=True)

    def adacontrast(u8: np.ndarray) -> list[torch.Tensor]:
        views = [ada(Image.fromarray(image)) for image in u8]
        return [torch.stack(v) for v in zip(*views)]  # the loader's collate: [test, weak, strong, strong]

    def memo_views(u8: np.ndarray) -> list[list[torch.Tensor]]:
        return [[v.unsqueeze(0) for v in memo(Image.fromarray(image))] for image in u8]

    return {"adacontrast": adacontrast, "memo": memo_views}


def build_unitta(name: str, spec: Spec, model, info, seed: int):
    from unitta.methods import get_method

    source = _source() if spec.source else None
    return get_method(name, copy.deepcopy(model), info, dataset="fmnist-c", seed=seed, source=source, **spec.unitta)


def build_reference(spec: Spec, model, seed: int):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    cls = reference_md.reference_class(spec.module, spec.cls)
    model = copy.deepcopy(model)
    model.model_preprocess = None  # what its model zoo attaches (EATA's source loader reads it)
    if spec.source:
        reference_md.set_source(_source())
    with redirect_stdout(StringIO()):  # AlphaBatchNorm prints what it replaced
        return cls(reference_md.config(spec.ref_cfg), model, 10)


def reference_batch(method, spec: Spec, x: torch.Tensor, u8: np.ndarray, makers) -> tuple[float, torch.Tensor]:
    """(seconds of the reference loader's views, predictions) for one batch; the caller times the whole."""
    start = time.process_time()
    inputs = makers[spec.views](u8) if spec.views else x
    views = time.process_time() - start
    out = torch.cat([method(v) for v in inputs]) if spec.per_image else method(inputs)
    return views, out.argmax(dim=1)


def run_pair(name, spec, model, info, batches, u8s, makers, seed: int) -> tuple[float, float, float, float]:
    """One repetition: both methods built afresh, then the stream batch by batch, the two alternating which runs
    first, so that the machine's load hits both alike. (unitta s, reference s, reference views s, agreement)."""
    clock = time.process_time
    ours = theirs = views = 0.0
    t = clock()
    ours_method = build_unitta(name, spec, model, info, seed)
    ours += (clock() - t) if spec.source else 0.0  # one-off set-up timed only for EATA (module docstring)
    t = clock()
    ref_method = build_reference(spec, model, seed)
    theirs += (clock() - t) if spec.source else 0.0
    p_ours, p_ref = [], []
    with torch.no_grad():  # as unitta.evaluate and the reference's test loop (utils/eval_utils.py)
        for i, (x, u8) in enumerate(zip(batches, u8s)):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                t = clock()
                if side == 0:
                    p_ours.append(ours_method(x).argmax(dim=1))
                    ours += clock() - t
                else:
                    seconds, pred = reference_batch(ref_method, spec, x, u8, makers)
                    theirs += clock() - t
                    views += seconds
                    p_ref.append(pred)
    return ours, theirs, views, (torch.cat(p_ours) == torch.cat(p_ref)).float().mean().item()


@functools.cache
def _source():
    """Fashion-MNIST's labelled training images (``unitta.data.load_source``), for both implementations."""
    from unitta.data import load_source

    return load_source("fmnist-c")


def measure(name, spec, model, info, batches, makers, reps) -> dict[str, float]:
    """Medians over ``reps`` repetitions: seconds of each side, the reference's share for its loader's views, and
    the per-repetition ratios (with and without those views); the mean prediction agreement."""
    u8s = [(x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy() for x in batches]
    run_pair(name, spec, model, info, batches[:1], u8s[:1], makers, seed=100)  # warm-up, untimed
    rows = []
    for rep in range(reps):
        ours, theirs, views, agree = run_pair(name, spec, model, info, batches, u8s, makers, seed=rep)
        rows.append((ours, theirs, views, ours / theirs, ours / (theirs - views), agree))
    keys = ("unitta", "reference", "views", "ratio", "ratio_method", "agreement")
    out = {k: statistics.median(column) for k, column in zip(keys, zip(*rows))}
    out["agreement"] = statistics.mean(r[-1] for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="folder of a mariodoebler/test-time-adaptation checkout")
    parser.add_argument("--methods", nargs="+", default=list(SPECS), help=f"default: all of {', '.join(SPECS)}")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batches", type=int, default=4, help="batches of 64 (MEMO: the images of the first)")
    parser.add_argument("--memo-images", type=int, default=16, help="images MEMO adapts on (per image)")
    args = parser.parse_args(argv)
    if problem := reference_md.checkout_problem(args.ref):
        die(problem)
    unknown = [m for m in args.methods if m not in SPECS]
    if unknown:
        die(f"--methods: {unknown[0]!r} is not shared with the reference here; choose from {sorted(SPECS)}")
    if args.reps < 1 or args.batches < 1 or args.memo_images < 1:
        die("--reps, --batches and --memo-images must be >= 1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # the reference's torch.jit.script
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    reference_md.import_reference(Path(args.ref))
    from unitta.models import load_model

    model, info = load_model("fmnist-c", "resnet20")
    model.eval()
    batches = load_batches(args.batches)
    makers = view_makers()
    print("| method | unitta s | reference s | ratio | ref. loader views s | ratio to the reference's method alone "
          "| agreement % | hyper-parameters |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in args.methods:
        spec = SPECS[name]
        stream = list(batches[0][: args.memo_images].split(1)) if spec.per_image else batches
        try:
            r = measure(name, spec, model, info, stream, makers, args.reps)
        except Exception as exc:  # noqa: BLE001 - one method's failure is its row, the others still run
            print(f"| {name} | failed: {type(exc).__name__}: {str(exc)[:100]} | | | | | | {spec.note} |", flush=True)
            continue
        alone = f"{r['ratio_method']:.2f}" if spec.views else "="
        print(f"| {name} | {r['unitta']:.2f} | {r['reference']:.2f} | {r['ratio']:.2f} | {r['views']:.2f} | {alone} "
              f"| {100 * r['agreement']:.1f} | {spec.note} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
