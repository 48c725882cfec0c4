"""The gradual protocols of the other benchmark as samplers: gradual and gradual_correlated (docs/streams.md)."""

from __future__ import annotations

import numpy as np
import pytest

from unitta.streams import make_stream
from unitta.streams.__main__ import main
from unitta.streams.protocols import GRADUAL_STEPS, domain_severity

CORRUPTIONS, K, PER_CLASS = 3, 4, 5  # 3 corruptions x 5 severities, 4 classes, 5 images per (domain, class)
PER_DOMAIN = K * PER_CLASS
DOMAINS = np.repeat(np.arange(CORRUPTIONS * 5), PER_DOMAIN)  # corruption * 5 + severity - 1, domain-major
LABELS = np.tile(np.arange(PER_DOMAIN) % K, CORRUPTIONS * 5)  # label j mod K within each domain (CIFAR's layout)


def _steps(stream) -> list[np.ndarray]:
    """The stream's positions cut into its severity steps (one step = one domain's images)."""
    return np.split(np.arange(len(stream)), np.arange(PER_DOMAIN, len(stream), PER_DOMAIN))


@pytest.mark.parametrize(("sampler", "setting"), [("gradual", "i111"), ("gradual_correlated", "1111")])
def test_every_corruption_runs_severities_1_to_5_to_1_each_step_one_whole_domain(sampler, setting) -> None:
    s = make_stream(LABELS, DOMAINS, setting, sampler=sampler, seed=3)
    assert GRADUAL_STEPS == (1, 2, 3, 4, 5, 4, 3, 2, 1)  # the other benchmark's test_time.py @8b2ed63
    assert len(s) == CORRUPTIONS * len(GRADUAL_STEPS) * PER_DOMAIN and s.meta["steps"] == list(GRADUAL_STEPS)
    steps = _steps(s)
    expected = [(c, v) for c in range(CORRUPTIONS) for v in GRADUAL_STEPS]  # the first corruption starts at 1 too
    assert len(steps) == len(expected)
    for positions, (corruption, severity) in zip(steps, expected):
        domain = corruption * 5 + severity - 1
        assert np.all(s.domains[positions] == domain)
        # each step is every image of its (corruption, severity) exactly once
        assert np.array_equal(np.sort(s.indices[positions]), np.flatnonzero(DOMAINS == domain))
    assert np.array_equal(domain_severity(s.domains[steps[4]]), np.full(PER_DOMAIN, 5))
    assert np.array_equal(s.classes, LABELS[s.indices]) and s.num_domains == CORRUPTIONS * 5
    # severities 1-4 are played twice (up and down), severity 5 once
    assert s.n_reused == CORRUPTIONS * 4 * PER_DOMAIN
    again, other = (make_stream(LABELS, DOMAINS, setting, sampler=sampler, seed=sd) for sd in (3, 4))
    assert np.array_equal(again.indices, s.indices) and not np.array_equal(other.indices, s.indices)


def test_gradual_shuffles_each_step_and_draws_a_new_order_per_step() -> None:
    s = make_stream(LABELS, DOMAINS, "i111", sampler="gradual", seed=1)
    steps = _steps(s)
    runs = [1 + np.count_nonzero(np.diff(s.classes[p])) for p in steps]
    assert min(runs) > K  # not sorted by class: 20 images of 4 classes in far more than 4 runs
    up, down = (s.indices[steps[i]] - s.indices[steps[i]].min() for i in (0, 8))  # severity 1, up and down
    assert not np.array_equal(up, down)  # a fresh random order per step


def test_gradual_correlated_orders_each_step_like_the_correlated_protocol() -> None:
    """Within a step: classes ascending, a random order within a class (the other benchmark shuffles, then sorts
    by label: datasets/data_loading.py), the same class sequence as the ``sorted`` sampler's domains."""
    s = make_stream(LABELS, DOMAINS, "1111", sampler="gradual_correlated", seed=2)
    reference = make_stream(LABELS, DOMAINS, "1111", sampler="sorted", seed=2)
    sorted_classes = reference.classes[:PER_DOMAIN]
    assert np.array_equal(sorted_classes, np.repeat(np.arange(K), PER_CLASS))
    shuffled_within = 0
    for positions in _steps(s):
        assert np.array_equal(s.classes[positions], sorted_classes)
        for k in range(K):
            members = s.indices[positions][s.classes[positions] == k]
            shuffled_within += not np.all(np.diff(members) > 0)
    assert shuffled_within > len(_steps(s))  # within-class order is random, not the dataset order


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"setting": "1111", "sampler": "gradual"}, "the 'gradual' sampler is setting 'i111'"),
        ({"setting": "i111", "sampler": "gradual_correlated"}, "pass setting='1111'"),
        ({"setting": "i111", "sampler": "gradual", "S": 5}, "S: the 'gradual' sampler"),
        ({"setting": "i111", "sampler": "gradual", "delta": 0.1}, "only the 'dirichlet' sampler"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_stream(LABELS, DOMAINS, **kwargs)


def test_domains_that_are_not_corruptions_times_five_severities_are_refused() -> None:
    domains = np.repeat(np.arange(7), PER_DOMAIN)
    with pytest.raises(ValueError, match="7 domain ids; the gradual orders need every corruption at severities 1..5"):
        make_stream(np.tile(np.arange(PER_DOMAIN) % K, 7), domains, "i111", sampler="gradual")


def test_the_cli_draws_a_gradual_stream_over_every_severity(capsys) -> None:
    assert main(["--dataset", "cifar10", "--sampler", "gradual_correlated"]) == 0
    out = capsys.readouterr().out
    assert "length    1,350,000" in out and "severities 1..5..1" in out and "75 values" in out
