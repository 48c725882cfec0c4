"""Methods of one's own (unitta/plugins.py, docs/adding_a_method.md): the ``plugins:`` key of sweep and tune
configs, the ``unitta.methods`` entry points, and ``unitta methods check``.

Plugins live in temporary directories outside the package. Tests that import one in this process restore
the method registry afterwards (``clean_registry``), so that the rest of the suite sees the built-ins only.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from unitta.methods.parts import registry
from unitta.schema import ConfigError
from unitta.sweep.config import load_config, parse_config
from unitta.tune.config import parse_tune_config

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"datasets": ["fmnist-c"], "settings": ["i111", "nui1"], "n_per_domain": 200, "S": 5, "seeds": [425]}

# A plugin that is the built-in 'bn' under another name: its results must equal bn's exactly. It reports the
# file it was imported from, so that a test can tell the copy Ray shipped to a worker from the original.
BN_PLUGIN = '''
from unitta.methods import register_method
from unitta.methods.bn import BatchStatsBN


@register_method("{name}")
class PluginBN(BatchStatsBN):
    """The built-in bn, registered by a plugin."""

    def extra_metrics(self):
        return {{"module_file": __file__}}
'''

# reset() cannot restore the source: setup() adapts the model passed in instead of its copy (a real mistake).
LEAKY_PLUGIN = '''
from dataclasses import dataclass

import torch

from unitta.methods import TTAMethod, register_method


@register_method("leaky_bn")
class LeakyBN(TTAMethod):
    @dataclass(frozen=True)
    class Config:
        momentum: float = 0.1

    def setup(self):
        self.model = self.source_model  # the bug: no copy, so BN running statistics of the source move
        self.model.train()

    @torch.no_grad()
    def forward(self, x):
        return self.model(x)
'''


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def clean_registry(tmp_path):
    """Restore the method registry and sys.path, and forget the plugin modules, after a test that loads plugins.

    Only modules imported from the test's directory or examples/ are forgotten: the libraries a test imports
    lazily (parts of torch) cannot be imported twice.
    """
    registry.list_methods()  # the built-ins, registered once per process, are part of what is restored
    methods, modules, path = dict(registry._REGISTRY), set(sys.modules), list(sys.path)
    roots = (tmp_path.resolve(), (ROOT / "examples").resolve())
    loaded, errors = registry._builtins_loaded, dict(registry._ENTRY_POINT_ERRORS)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(methods)
    registry._builtins_loaded = loaded
    registry._ENTRY_POINT_ERRORS.clear()
    registry._ENTRY_POINT_ERRORS.update(errors)
    for name in set(sys.modules) - modules:
        file = getattr(sys.modules[name], "__file__", None)
        if file and any(Path(file).resolve().is_relative_to(root) for root in roots):
            del sys.modules[name]
    sys.path[:] = path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
    return env


def _sweep_config(path: Path, plugins: list[str], methods: list, **changes) -> Path:
    data = {"name": path.stem, "plugins": plugins, "methods": methods, **SMALL,
            "resources": {"num_cpus": 1}, **changes}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------------- loading on the driver
def test_file_plugin_is_loaded_relative_to_the_config(tmp_path, clean_registry):
    _write(tmp_path / "methods" / "zz_bn_file.py", BN_PLUGIN.format(name="zz_bn_file"))
    config = _sweep_config(tmp_path / "cfg" / "plugin.yaml", ["../methods/zz_bn_file.py"], ["test", "zz_bn_file"])
    cfg = load_config(config)
    assert cfg.plugins == [str((tmp_path / "methods" / "zz_bn_file.py").resolve())]
    assert "zz_bn_file" in registry.list_methods()
    assert {c.method for c in cfg.cells()} == {"test", "zz_bn_file"}
    # loading the same config again (a resumed sweep, the tune driver) is a no-op, not a clash
    assert load_config(config).cells() == cfg.cells()


def test_dotted_module_and_package_directory_plugins(tmp_path, clean_registry, monkeypatch):
    _write(tmp_path / "zz_pkg" / "__init__.py", "")
    _write(tmp_path / "zz_pkg" / "tta.py", BN_PLUGIN.format(name="zz_bn_dotted"))
    _write(tmp_path / "zz_dir" / "__init__.py", BN_PLUGIN.format(name="zz_bn_dir"))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = parse_config({"name": "p", "plugins": ["zz_pkg.tta", "zz_dir/"], "methods": ["zz_bn_dotted", "zz_bn_dir"],
                        **SMALL}, base_dir=tmp_path)
    from unitta import plugins

    loaded = plugins.load(cfg.plugins)
    # a module outside site-packages travels to the workers as its top-level package directory
    assert [(p.module, p.ship) for p in loaded] == [
        ("zz_pkg.tta", tmp_path / "zz_pkg"), ("zz_dir", tmp_path / "zz_dir")
    ]
    assert plugins.runtime_env(loaded) == {"py_modules": sorted([str(tmp_path / "zz_dir"), str(tmp_path / "zz_pkg")])}


@pytest.mark.parametrize(
    "plugin, expected",
    [
        ("raise RuntimeError('no GPU here')", "cannot import it: RuntimeError: no GPU here (at zz_bad.py:1)"),
        ("import zz_no_such_module", "cannot import it: ModuleNotFoundError: No module named 'zz_no_such_module'"),
        ("def broken(:\n    pass", "cannot import it: SyntaxError"),
        (BN_PLUGIN.format(name="tent"), "method name 'tent' is already taken by unitta.methods.tent.Tent"),
        (BN_PLUGIN.format(name="../../evil"), "method name '../../evil' is not allowed: use one word"),
        ("x = 1", "registers no method"),
        (
            "from dataclasses import dataclass\nfrom unitta.methods import TTAMethod, register_method\n"
            "@register_method('zz_mutable')\nclass M(TTAMethod):\n    @dataclass\n    class Config:\n"
            "        lr: float = 1.0\n    def forward(self, x):\n        return self.model(x)\n",
            "TypeError: M.Config must be a frozen dataclass",
        ),
        (
            "from dataclasses import dataclass\nfrom unitta.methods import TTAMethod, register_method\n"
            "@register_method('zz_badlr')\nclass M(TTAMethod):\n    @dataclass(frozen=True)\n    class Config:\n"
            "        lr: float = -1.0\n        def __post_init__(self):\n            if self.lr <= 0:\n"
            "                raise ValueError(f'lr must be > 0, got {self.lr}')\n"
            "    def forward(self, x):\n        return self.model(x)\n",
            "method 'zz_badlr': bad Config: ValueError: method 'zz_badlr': lr must be > 0, got -1.0",
        ),
    ],
    ids=["raises", "missing-import", "syntax", "clash-with-builtin", "traversal", "no-method", "mutable-config",
         "bad-default"],
)
def test_broken_plugin_is_one_config_error(tmp_path, clean_registry, plugin, expected):
    _write(tmp_path / "zz_bad.py", plugin)
    with pytest.raises(ConfigError) as err:
        parse_config({"name": "p", "plugins": ["zz_bad.py"], "methods": ["test"], **SMALL}, "cfg.yaml", tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith("cfg.yaml: plugins[0] (zz_bad.py): ")
    assert expected in message, message


def test_plugin_path_mistakes(tmp_path, clean_registry):
    _write(tmp_path / "json.py", BN_PLUGIN.format(name="zz_json"))  # would shadow the standard library's json
    _write(tmp_path / "my-method.py", BN_PLUGIN.format(name="zz_dash"))
    cases = {
        "nowhere.py": "no such file",
        "json.py": "would be imported as 'json'",
        "my-method.py": "not a valid Python module name",
        "not a module": "neither a dotted module name nor a path",
    }
    for spec, expected in cases.items():
        with pytest.raises(ConfigError, match=expected):
            parse_config({"name": "p", "plugins": [spec], "methods": ["test"], **SMALL}, "cfg.yaml", tmp_path)
    assert "zz_json" not in registry.list_methods()


def test_tune_config_loads_plugins(tmp_path, clean_registry):
    _write(tmp_path / "zz_bn_tune.py", BN_PLUGIN.format(name="zz_bn_tune"))
    raw = {"name": "t", "plugins": ["zz_bn_tune.py"], "cell": {"dataset": "fmnist-c", "setting": "n1nu", "S": 5},
           "methods": ["zz_bn_tune"], "space": {"domain_alpha": [0.5, 0.9]}}
    cfg = parse_tune_config(raw, "tune.yaml", base_dir=tmp_path)
    assert cfg.plugins == [str(tmp_path / "zz_bn_tune.py")] and "zz_bn_tune" in registry.list_methods()


# ---------------------------------------------------------------------- entry points of installed packages
def _install_entry_point(site: Path, dist: str, name: str, module: str, source: str) -> None:
    _write(site / f"{module}.py", source)
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"  # as pip names it: the stem before '-' is the name
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    _write(info / "entry_points.txt", f"[unitta.methods]\n{name} = {module}\n")


def test_entry_points_register_methods_and_a_broken_one_is_one_warning(tmp_path, clean_registry, monkeypatch,
                                                                       caplog):
    _install_entry_point(tmp_path, "zz-good", "zz_ep_bn", "zz_ep_good", BN_PLUGIN.format(name="zz_ep_bn"))
    _install_entry_point(tmp_path, "zz-bad", "zz_ep_broken", "zz_ep_bad", "raise ImportError('needs CUDA 13')")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._builtins_loaded = False  # as in a fresh process with these packages installed
    with caplog.at_level(logging.WARNING, logger="unitta.methods.parts.registry"):
        names = registry.list_methods()
    assert "zz_ep_bn" in names and "tent" in names and "zz_ep_broken" not in names
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "entry point zz_ep_broken = zz_ep_bad (package zz-bad)" in warnings[0]
    assert "ImportError: needs CUDA 13" in warnings[0]
    parse_config({"name": "ep", "methods": ["zz_ep_bn"], **SMALL})  # an installed method needs no plugins: key
    with pytest.raises(ConfigError, match="method 'zz_ep_broken' is not available: entry point zz_ep_broken"):
        parse_config({"name": "ep", "methods": ["zz_ep_broken"], **SMALL}, "cfg.yaml")


# ---------------------------------------------------------------------- unitta methods check
def test_check_passes_the_example_and_fails_a_reset_that_keeps_the_adapted_model(tmp_path, clean_registry, capsys):
    from unitta.contract.command import main

    assert main(["check", str(ROOT / "examples" / "my_method" / "my_method.py:pseudo_label")]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 11 and "WARN" not in out and "all checks passed" in out

    _write(tmp_path / "zz_leaky.py", LEAKY_PLUGIN)
    assert main(["check", f"{tmp_path / 'zz_leaky.py'}:leaky_bn"]) == 1
    lines = capsys.readouterr().out.splitlines()
    reset = next(line for line in lines if line.split()[1:2] == ["reset"])
    assert reset.split()[0] == "FAIL" and "state after reset() differs from the fresh method's" in reset, lines
    assert lines[-1].endswith("check(s) failed")


# setup() replaces a layer of the model it was given: before every check had its own copy, the first check's
# build changed the model the later "source unchanged" comparisons started from, and the plugin passed.
MUTATING_PLUGIN = '''
from dataclasses import dataclass

import torch
from torch import nn

from unitta.methods import TTAMethod, register_method


@register_method("zz_mutating")
class Mutating(TTAMethod):
    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3

    def setup(self):
        self.source_model.bn1 = nn.Identity()  # the bug: the source itself loses its first BatchNorm
        self.model.bn1 = nn.Identity()

    @torch.no_grad()
    def forward(self, x):
        return self.model(x)
'''

# A host read in forward (.item()) and a method that never changes the source model's outputs.
SYNCING_PLUGIN = '''
from dataclasses import dataclass

import torch

from unitta.methods import TTAMethod, register_method


@register_method("zz_syncing")
class Syncing(TTAMethod):
    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3

    def setup(self):
        self.model.train()  # batch statistics: adapts

    @torch.no_grad()
    def forward(self, x):
        out = self.model(x)
        if out.abs().max().item() > 1e9:  # the host waits for the device here
            out = out.clamp(-1e9, 1e9)
        return out


@register_method("zz_frozen")
class Frozen(TTAMethod):
    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3

    @torch.no_grad()
    def forward(self, x):
        return self.model(x)
'''


def _check_lines(capsys) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] + " " + " ".join(line.split()[2:])
            for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["PASS"], ["FAIL"], ["WARN"])}


def test_check_fails_a_plugin_that_modifies_the_source_model(tmp_path, clean_registry, capsys):
    from unitta.contract.command import main

    _write(tmp_path / "zz_mutating.py", MUTATING_PLUGIN)
    assert main(["check", f"{tmp_path / 'zz_mutating.py'}:zz_mutating"]) == 1
    lines = _check_lines(capsys)
    failed = {check: text for check, text in lines.items() if text.startswith("FAIL")}
    assert list(failed) == ["source_unchanged"], lines
    assert "the source model passed in was modified" in failed["source_unchanged"]


def test_check_warns_on_a_host_sync_and_on_a_method_that_never_adapts(tmp_path, clean_registry, capsys):
    from unitta.contract.command import main

    _write(tmp_path / "zz_syncing.py", SYNCING_PLUGIN)
    assert main(["check", f"{tmp_path / 'zz_syncing.py'}:zz_syncing"]) == 0  # warnings do not fail the check
    lines = _check_lines(capsys)
    assert lines["host_sync"].startswith("WARN") and "Tensor.item at zz_syncing.py:21 (x3)" in lines["host_sync"]
    assert lines["adapts"].startswith("PASS")
    assert main(["check", f"{tmp_path / 'zz_syncing.py'}:zz_frozen"]) == 0
    lines = _check_lines(capsys)
    assert lines["adapts"].startswith("WARN never adapts") and lines["host_sync"].startswith("PASS"), lines
    assert main(["check", "test"]) == 0  # the source model does not adapt by design: no warning
    assert _check_lines(capsys)["adapts"].startswith("PASS")


def test_check_usage_errors_exit_2(tmp_path, clean_registry, capsys):
    from unitta.contract.command import main

    _write(tmp_path / "zz_other.py", BN_PLUGIN.format(name="zz_other"))
    assert main(["check", f"{tmp_path / 'zz_other.py'}:zz_missing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "registers no method 'zz_missing'; it registers: zz_other" in err
    assert main(["check", "zz_no_such_module:x"]) == 2
    assert "No module named 'zz_no_such_module'" in capsys.readouterr().err


def test_check_refuses_a_method_name_that_escapes_the_output_folder(tmp_path, clean_registry, capsys):
    from unitta.contract.command import main

    _write(tmp_path / "zz_evil.py", BN_PLUGIN.format(name="../../evil"))
    assert main(["check", str(tmp_path / "zz_evil.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "method name '../../evil' is not allowed" in err


def test_check_suggests_the_registered_name_meant(capsys):
    from unitta.contract.command import main

    assert main(["check", "tnet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tnet' is not a registered method (did you mean" in err and "'tent'" in err


# ---------------------------------------------------------------------- as a user runs it
def test_broken_plugin_exits_2_with_one_line_before_anything_runs(tmp_path, clean_registry, capfd, monkeypatch):
    """``main`` in this process, in the config's folder (capfd: all that reaches file descriptors 1 and 2)."""
    from unitta.sweep import main

    _write(tmp_path / "plugins" / "zz_typo.py", "from unitta.methods import TTAMethod, register_methd\n")
    config = _sweep_config(tmp_path / "broken.yaml", ["plugins/zz_typo.py"], ["test"], output=str(tmp_path / "out"))
    monkeypatch.chdir(tmp_path)
    code = main([str(config), "--address", "local"])
    err = capfd.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "cannot import it: ImportError: cannot import name 'register_methd'" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_plugin_runs_in_a_local_ray_sweep_next_to_a_builtin_method(tmp_path):
    """Ray workers import the plugin from the copy Ray ships; its rows equal the built-in bn's exactly."""
    plugin = _write(tmp_path / "elsewhere" / "zz_ray_bn.py", BN_PLUGIN.format(name="plugin_bn"))
    out = tmp_path / "out"
    config = _sweep_config(tmp_path / "configs" / "ray.yaml", ["../elsewhere/zz_ray_bn.py"], ["bn", "plugin_bn"],
                           output=str(out), max_retries=0)
    run_dir = tmp_path / "run"  # neither the plugin's nor the config's directory: only Ray's py_modules has it
    run_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "unitta.sweep", str(config), "--address", "local", "--num-cpus", "2", "--no-progress"],
        cwd=run_dir, env=_env(), capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plugin_bn" in proc.stdout  # the summary table lists it like a built-in method

    from unitta.results import load_results

    df = load_results(out)
    rows = {(r["method"], r["setting"]): r for r in df.iter_rows(named=True)}
    assert len(rows) == 4 and {r["status"] for r in rows.values()} == {"ok"}
    for setting in SMALL["settings"]:
        ours, builtin = rows[("plugin_bn", setting)], rows[("bn", setting)]
        assert ours["error"] == builtin["error"] and ours["n_samples"] == builtin["n_samples"]
        assert ours["node_id"] is not None  # computed in a Ray task, not in the driver
        shipped = json.loads(ours["method_extra"])["module_file"]
        assert Path(shipped).name == "zz_ray_bn.py" and Path(shipped).resolve() != plugin.resolve()


CONSTANT_PLUGIN = '''
from dataclasses import dataclass

import torch

from unitta.methods import TTAMethod, register_method


@register_method("zz_constant")
class Constant(TTAMethod):
    @dataclass(frozen=True)
    class Config:
        k: int = {k}

    def forward(self, x):
        return torch.full((len(x), 10), float(self.cfg.k))
'''


def test_an_edited_plugin_file_is_loaded_again(tmp_path, clean_registry):
    """Issue 52 item 3: loading a plugin file whose content changed since it was imported runs the new code."""
    from unitta.plugins import load

    path = _write(tmp_path / "zz_constant.py", CONSTANT_PLUGIN.format(k=1))
    load([str(path)])
    assert registry.method_class("zz_constant").Config().k == 1
    load([str(path)])  # the same content: the same module, no clash
    _write(path, CONSTANT_PLUGIN.format(k=22))
    load([str(path)])
    assert registry.method_class("zz_constant").Config().k == 22
