"""Benchmark scenarios (settings), their notation and the default factors per dataset (docs/streams.md).

A setting is a class attribute and a domain attribute, each (correlation, imbalance) with
correlation in {i: i.i.d., n: non-i.i.d., 1: continual} and imbalance in {1: balanced, u: imbalanced}.
Its canonical id is the 4-character code <class corr><class imb><domain corr><domain imb>, e.g.
``nui1`` = class (n,u), domain (i,1). 36 codes exist; the paper's grid uses the 24 with class
correlation in {i, n}.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from unitta.data.records import RECORDS

# The longest stream anything here builds (S x domains x classes for the official sampler, length for the exact
# one): 10 million positions, 13 times ImageNet-C's 750,000, whose index arrays take a few hundred MB. Longer
# asks are refused in one line before any memory is allocated.
MAX_STREAM_LENGTH = 10_000_000

CORRELATIONS = ("i", "n", "1")
IMBALANCES = ("1", "u")
_CORR_WORD = {"i": "i.i.d.", "n": "non-i.i.d.", "1": "continual"}
_IMB_WORD = {"1": "balanced", "u": "imbalanced"}


@dataclass(frozen=True)
class Setting:
    """One benchmark scenario, e.g. ``Setting.parse('nui1')``: class (n,u) x domain (i,1)."""

    class_corr: str
    class_imb: str
    domain_corr: str
    domain_imb: str

    def __post_init__(self) -> None:
        for field, value, allowed in (
            ("class_corr", self.class_corr, CORRELATIONS),
            ("class_imb", self.class_imb, IMBALANCES),
            ("domain_corr", self.domain_corr, CORRELATIONS),
            ("domain_imb", self.domain_imb, IMBALANCES),
        ):
            if value not in allowed:
                raise ValueError(f"{field}={value!r}: allowed values are {allowed}")

    @classmethod
    def parse(cls, code: str | Setting) -> Setting:
        """A Setting from its 4-character code (or a Setting, returned as is)."""
        if isinstance(code, Setting):
            return code
        if not isinstance(code, str) or len(code) != 4:
            raise ValueError(
                f"setting={code!r}: expected a 4-character code <class corr><class imb><domain corr><domain imb>"
                f" with corr in {CORRELATIONS} and imb in {IMBALANCES}, e.g. 'nui1'"
            )
        try:
            return cls(*code)
        except ValueError as err:
            raise ValueError(f"setting={code!r}: {err}; e.g. 'nui1'") from None

    @property
    def code(self) -> str:
        return self.class_corr + self.class_imb + self.domain_corr + self.domain_imb

    @property
    def class_notation(self) -> str:
        """The paper's notation, e.g. '(n,u)'."""
        return f"({self.class_corr},{self.class_imb})"

    @property
    def domain_notation(self) -> str:
        return f"({self.domain_corr},{self.domain_imb})"

    @property
    def name(self) -> str:
        """Readable name, e.g. 'class non-i.i.d. imbalanced, domain i.i.d. balanced'."""
        return (
            f"class {_CORR_WORD[self.class_corr]} {_IMB_WORD[self.class_imb]}, "
            f"domain {_CORR_WORD[self.domain_corr]} {_IMB_WORD[self.domain_imb]}"
        )

    def __str__(self) -> str:
        return f"{self.code} (class {self.class_notation}, domain {self.domain_notation})"


def _grid(class_corrs: tuple[str, ...]) -> tuple[Setting, ...]:
    # The reference's npz key order: class corr, class imb, domain corr (i, n, 1), domain imb.
    return tuple(
        Setting(cc, ci, dc, di)
        for cc, ci, dc, di in itertools.product(class_corrs, IMBALANCES, CORRELATIONS, IMBALANCES)
    )


SETTINGS_24: tuple[Setting, ...] = _grid(("i", "n"))  # the paper's grid (class-continual excluded)
SETTINGS_36: tuple[Setting, ...] = _grid(CORRELATIONS)
# The same as 4-character codes: the project's one home for setting codes (configs, analysis, results).
SETTING_CODES_24: tuple[str, ...] = tuple(s.code for s in SETTINGS_24)
SETTING_CODES_36: tuple[str, ...] = tuple(s.code for s in SETTINGS_36)


def setting_order(codes) -> list[str]:
    """Setting codes (each once) in the paper's order, the one order of every table, heatmap and console summary;
    unknown codes last, alphabetically. A stream label ``<setting>:<sampler>[@delta]`` sorts by its setting (the
    labels of one setting in the order given)."""
    rank = {c: i for i, c in enumerate(SETTING_CODES_36)}

    def key(code) -> tuple[int, str]:
        setting = str(code).split(":", 1)[0]
        return (rank[setting], "") if setting in rank else (len(rank), str(code))

    return sorted(dict.fromkeys(codes), key=key)


# The halves of a code: the 4 class settings and the 6 domain settings of the paper's grid.
CLASS_HALVES: tuple[str, ...] = ("i1", "iu", "n1", "nu")
DOMAIN_HALVES: tuple[str, ...] = ("i1", "iu", "n1", "nu", "11", "1u")
# The four factors of a stream (UniTTA paper, section 3.2): correlation alpha_1 and imbalance beta of
# the domain and of the class Markov chain; the keys of make_stream's keyword overrides and Cell.factors.
FACTOR_KEYS: tuple[str, ...] = ("domain_alpha", "domain_beta", "class_alpha", "class_beta")


def is_setting_code(code: object) -> bool:
    """True for a valid 4-character code such as 'nui1'."""
    return isinstance(code, str) and code in SETTING_CODES_36


def is_half_code(code: object) -> bool:
    """True for a valid 2-character <corr><imb> half such as 'n1'."""
    return isinstance(code, str) and len(code) == 2 and code[0] in CORRELATIONS and code[1] in IMBALANCES

# Dataset names accepted by make_stream, mapped to the paper dataset whose factors and S apply (each
# dataset record's preset family: fmnist-c uses CIFAR-10's values, unitta.data.records).
DATASET_ALIASES: dict[str, str] = {alias: r.preset_family for r in RECORDS.values() for alias in r.names}

# Class i.i.d. alpha_1 = 1/K printed with 3 decimals by `bc` in sh/run.sh (docs/streams.md).
_CLASS_IID_ALPHA = {"cifar10": 0.1, "cifar100": 0.01, "imagenet": 0.001}


def canonical_dataset(dataset: str) -> str:
    """'cifar10' | 'cifar100' | 'imagenet' for any accepted dataset name, or a ValueError."""
    key = str(dataset).lower()
    if key not in DATASET_ALIASES:
        raise ValueError(f"dataset={dataset!r}: allowed values are {sorted(DATASET_ALIASES)}")
    return DATASET_ALIASES[key]


def default_factors(setting: str | Setting, dataset: str = "cifar10") -> dict[str, float]:
    """The factors sh/run.sh passes for a setting (docs/streams.md), as floats.

    Domain alpha_1: i 0.067, n 0.85, 1 1.0; class alpha_1: i 1/K (3 decimals), n 0.95, 1 1.0;
    beta: 1.0 balanced, 5.0 (domain) / 10.0 (class) imbalanced.
    """
    s = Setting.parse(setting)
    ds = canonical_dataset(dataset)
    domain_alpha = {"i": 0.067, "n": 0.85, "1": 1.0}[s.domain_corr]  # sh/run.sh
    class_alpha = {"i": _CLASS_IID_ALPHA[ds], "n": 0.95, "1": 1.0}[s.class_corr]  # sh/run.sh
    return {
        "domain_alpha": domain_alpha,
        "domain_beta": 5.0 if s.domain_imb == "u" else 1.0,  # sh/run.sh
        "class_alpha": class_alpha,
        "class_beta": 10.0 if s.class_imb == "u" else 1.0,  # sh/run.sh
    }


def default_state_cap(setting: str | Setting, dataset: str = "cifar10") -> int:
    """The reference's max_state_samples S per dataset and setting (the reference's sh/run.sh; docs/streams.md).

    CIFAR-10: 1000; CIFAR-100: 100; ImageNet: 100 for class n x domain n, 50 for class n x domain (i,1),
    10 otherwise.
    """
    s = Setting.parse(setting)
    ds = canonical_dataset(dataset)
    if ds == "cifar10":
        return 1000
    if ds == "cifar100":
        return 100
    if s.class_corr == "n" and s.domain_corr == "n":
        return 100
    if s.class_corr == "n" and s.domain_corr == "i" and s.domain_imb == "1":
        return 50
    return 10
