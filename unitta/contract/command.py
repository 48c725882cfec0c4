"""`unitta methods` (= `python -m unitta.contract`): list the registered methods, or check a method against the method
contract.

Examples::

    unitta methods check examples/my_method/my_method.py:pseudo_label
    unitta methods check my_pkg.my_tta                 # every method the module registers
    unitta methods check tent                           # a registered method (built-in or entry point)
    unitta methods check tent --model vit_tiny          # on the embedded LayerNorm ViT
    unitta methods check my_tta.py:my_tta --set steps=1 --set lr=1e-4
    unitta methods list
    unitta methods space tent                           # the method's search space (unitta select)

``check`` runs the contract of ``unitta/contract/__init__.py`` on the embedded ResNet-20 (``--model vit_tiny``:
the LayerNorm ViT; a method whose ``norm_kinds`` exclude the model's kind is a usage error) and Fashion-MNIST-C
images (no downloads) and prints one line per item, PASS or FAIL with the reason: finite (B, K) scores at
B = 64 and B = 1, ``reset()`` restores the source exactly, the same seed gives the same outputs, the Config
refuses unknown names and wrong types, every dataset preset is a valid Config, the declared search space (if any)
lies within the Config's checks, forward/backward passes
are counted, the source model passed in is never modified; WARN lines for a method whose outputs equal the
source model's ("never adapts") and for host synchronisations in ``forward``. Every check runs on its own copy
of the model. What an author runs before a sweep (docs/adding_a_method.md). Exit code 0 when every item
passes (warnings included), 1 when one fails, 2 for a usage error or a plugin that cannot be loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Callable
from typing import Any

from unitta.files import os_error_text
from unitta.run.exits import EXIT_FAILED_CELLS, EXIT_OK, EXIT_USAGE

# Images for the checks: the embedded Fashion-MNIST-C, 40 per corruption (600), 128 drawn with a fixed seed.
N_PER_DOMAIN, N_IMAGES, IMAGE_SEED = 40, 128, 0
PRESET_DATASETS = ("cifar10", "cifar100", "imagenet")


def _parse_value(text: str) -> Any:
    import yaml

    from unitta.schema.yaml_files import yaml_loader

    return yaml.load(text, Loader=yaml_loader())  # noqa: S506 (a SafeLoader subclass): 1e-4 is a float


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = _parse_value(value)
    return out


def _targets(target: str) -> list[str]:
    """The method names ``target`` (MODULE_OR_FILE[:NAME] or a registered NAME) stands for; loads the plugin."""
    from unitta import plugins
    from unitta.methods import list_methods
    from unitta.methods.parts.registry import methods_of
    from unitta.schema import ConfigError

    spec, sep, name = target.rpartition(":")
    if not sep:
        spec, name = target, ""
        if target in list_methods():
            return [target]
    try:
        loaded = plugins.load([spec], source=None)[0]
    except ConfigError as exc:
        raise ConfigError(_not_a_method(target, list_methods(), exc) if not sep else str(exc)) from None
    registered = methods_of(loaded.module)
    if not name:
        return registered
    if name not in registered:
        raise ValueError(f"{spec} registers no method {name!r}; it registers: {', '.join(registered)}")
    return [name]


def _not_a_method(target: str, registered: list[str], exc: Exception) -> str:
    """A target that is neither registered nor importable: say so, with the closest registered name if any."""
    close = difflib.get_close_matches(target, registered, n=3, cutoff=0.6)
    if not close:
        return str(exc)
    return (f"{target!r} is not a registered method (did you mean {' or '.join(map(repr, close))}?) nor a plugin "
            f"that can be imported ({exc})")


def _guarded(check: str, run: Callable[[], Any]):
    """Run one check; an exception raised by the method is that check's failure, not the checker's crash."""
    from unitta.contract import CheckResult
    from unitta.evaluate import short_error

    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - the method's own error is the reason of the failure
        return CheckResult(check, "", False, f"raised {short_error(exc)}")  # check() names the method


def _check_presets(name: str):
    from unitta.contract import CheckResult
    from unitta.methods import build_config, method_class

    cls = method_class(name)
    for dataset in PRESET_DATASETS:
        try:
            build_config(cls, dataset)
        except (ValueError, TypeError) as exc:
            return CheckResult("presets", name, False, f"the {dataset} preset is refused: {exc}")
    unknown = sorted(set(cls.presets) - set(PRESET_DATASETS))
    if unknown:
        return CheckResult("presets", name, False, f"presets for unknown dataset families {unknown}; "
                                                   f"known: {', '.join(PRESET_DATASETS)}")
    return CheckResult("presets", name, True, "ok")


def _check_space(name: str):
    """The method's declared search space: dimensions over Config fields, every point within the Config's checks."""
    from unitta.contract import CheckResult
    from unitta.methods.parts.search_space import check_space, method_space
    from unitta.search_dimensions import DIM_TYPES

    space = method_space(name)
    if not space:
        return CheckResult("space", name, True, "ok")
    wrong = [key for key, dim in space.items() if not isinstance(dim, DIM_TYPES)]
    if wrong:
        return CheckResult("space", name, False, f"space[{wrong[0]!r}] is not a LogUniform, Uniform, IntUniform or "
                                                 "Choice (unitta.search_dimensions)")
    try:
        check_space(name, space)
    except ValueError as exc:
        return CheckResult("space", name, False, f"the declared space is refused: {exc}")
    return CheckResult("space", name, True, "ok")


def check(name: str, model, info, images, **overrides: Any) -> list:
    """The contract items for method ``name`` (``contract.run_checks``, each guarded) plus the presets."""
    from unitta import contract
    from unitta.methods import method_class

    overrides = {**method_class(name).check_overrides, **overrides}  # the method's own short-check values first
    results = contract.run_checks(name, model, info, images, guard=_guarded, **overrides)
    results = [r if r.method else dataclasses.replace(r, method=name) for r in results]
    at = [r.check for r in results].index("config_validation") + 1
    extra = [_guarded("presets", lambda: _check_presets(name)), _guarded("space", lambda: _check_space(name))]
    return [*results[:at], *extra, *results[at:]]


_WHAT = {
    "finite_outputs": "finite (B, K) scores at B=1, 64, 1, 8, 8",
    "reset": "reset() restores the source exactly",
    "deterministic": "same seed -> same outputs",
    "config_validation": "Config refuses unknown names and wrong types",
    "presets": "every dataset preset is a valid Config",
    "space": "its search space (if any) lies within the Config's checks",
    "cost": "forward/backward passes counted",
    "bf16": "finite scores under bf16 autocast (precision: bf16)",
    "source_unchanged": "the source model passed in is never modified",
    "adapts": "outputs differ from the source model's on shifted images",
    "host_sync": "no host synchronisation in forward",
}


def _check_command(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from unitta.data import load_dataset
    from unitta.methods import build_config, method_class, norm_kind_problem
    from unitta.models import load_model
    from unitta.schema import ConfigError

    try:
        overrides = _overrides(args.set)
        names = _targets(args.target)
        for name in names:
            build_config(method_class(name), **overrides)
    except (ConfigError, ValueError, TypeError) as exc:
        print(f"error: {exc}".replace("\n", " "), file=sys.stderr)
        return EXIT_USAGE
    torch.set_num_threads(max(1, args.threads))
    try:
        model, info = load_model("fmnist-c", args.model)
    except (ValueError, OSError) as exc:  # a checkpoint that pickles code (CheckpointError), unreadable, ...
        print(f"error: {os_error_text(exc) if isinstance(exc, OSError) else exc}".replace("\n", " "), file=sys.stderr)
        return EXIT_USAGE
    refused = [p for name in names if (p := norm_kind_problem(method_class(name), info.norm_kind, info.name))]
    if refused:
        print(f"error: {refused[0]}", file=sys.stderr)
        return EXIT_USAGE
    dataset = load_dataset("fmnist-c", n_per_domain=N_PER_DOMAIN)
    order = np.random.default_rng(IMAGE_SEED).permutation(len(dataset))[:N_IMAGES]
    images = dataset.get_batch(order)
    failed = warned = 0
    for name in names:
        print(f"{name} ({method_class(name).__module__}) on the embedded {info.name}, {N_IMAGES} Fashion-MNIST-C images"
              + (f", overrides {overrides}" if overrides else ""))
        for result in check(name, model, info, images, **overrides):
            mark = "FAIL" if not result.passed else "WARN" if result.warning else "PASS"
            reason = result.reason if mark != "PASS" else _WHAT.get(result.check, "")
            print(f"  {mark}  {result.check:<18} {reason}")
            failed += not result.passed
            warned += result.warning
    print((f"{failed} check(s) failed" if failed else "all checks passed")
          + (f", {warned} warning(s)" if warned else ""))
    return EXIT_FAILED_CELLS if failed else EXIT_OK


def _list_command(args: argparse.Namespace) -> int:
    from unitta import plugins
    from unitta.methods import list_methods, method_class
    from unitta.methods.parts.registry import builtin_modules, entry_point_errors
    from unitta.schema import ConfigError

    try:
        plugins.load(args.plugins, source=None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name in list_methods():
        cls = method_class(name)
        where = "built-in" if cls.__module__ in builtin_modules() else cls.__module__
        print(f"{name:<20} v{cls.version}  {where}  norm: {','.join(cls.norm_kinds)}")
    for name, reason in sorted(entry_point_errors().items()):
        print(f"{name:<20} --  {reason}")
    return EXIT_OK


def _space_command(args: argparse.Namespace) -> int:
    from unitta import plugins
    from unitta.methods.parts.search_space import space_rows
    from unitta.schema import ConfigError

    try:
        plugins.load(args.plugins, source=None)
        rows = space_rows(args.name)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not rows:
        print(f"{args.name}: no hyper-parameters to search (an empty space)")
        return EXIT_OK
    header = ("hyper-parameter", "kind", "range", "default")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unitta methods",
        description="List the registered TTA methods, check one against the method contract, or print its "
        "search space.",
        epilog="examples:\n  unitta methods check examples/my_method/my_method.py:pseudo_label\n"
        "  unitta methods check tent\n  unitta methods list\n"
        "  unitta methods space tent\n"
        "exit codes: 0 all checks pass, 1 a check failed, 2 usage error or plugin that cannot be loaded\n"
        "docs: docs/adding_a_method.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run the method contract on the embedded model")
    c.add_argument("target", metavar="MODULE_OR_FILE[:NAME]",
                   help="a plugin (dotted module, .py file or package dir) and the method's name, or a registered name")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a hyper-parameter override (repeatable), e.g. to make a slow method adapt within the checks")
    c.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    c.add_argument("--model", default=None, help="embedded model: resnet20 (default, BatchNorm), vit_tiny (LayerNorm)")
    c.set_defaults(run=_check_command)
    ls = sub.add_parser("list", help="the registered methods (built-in, entry points, --plugin)")
    ls.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE_OR_FILE",
                    help="load this plugin first (repeatable)")
    ls.set_defaults(run=_list_command)
    sp = sub.add_parser("space", help="a method's search space: hyper-parameter, kind, range, default")
    sp.add_argument("name", help="a registered method name")
    sp.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE_OR_FILE",
                    help="load this plugin first (repeatable)")
    sp.set_defaults(run=_space_command)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
