"""The official sampler reproduces the reference UniTTA sampler bit for bit (spec 1.2-1.8)."""

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from unitta.streams import SETTINGS_24, make_stream, synthetic_labels
from unitta.streams.official import legacy_choice_with_p

REF = Path(__file__).resolve().parents[3] / "shared" / "reference" / "sampler"
if not REF.exists():  # the shared folder sits beside the repository in the project's workspace
    REF = Path("/work/shared/reference/sampler")
needs_ref = pytest.mark.skipif(not (REF / "official_cifar10.npz").exists(), reason="reference sampler output not present")


# sha256 of each full CIFAR-10 reference stream (seed 425) as int64 little-endian, from
# shared/reference/sampler/official_summary.json: bit-exactness is checked even without the npz.
REFERENCE_SHA256 = {
    "i1i1": "a53883706253c2163d508f282aa1403c48a356754ea164c364c8768c7bd04020",
    "i1iu": "fc62cd119b02f584ccd350c82867fb88cc8ca011ab1619fde4922ca09f8ebbea",
    "i1n1": "d4ba6baddb372541b7e4ef4264eb14ea16ed9dacfdf137b39238f374e7eba0a4",
    "i1nu": "9a0bb40d755a0522aff31b4f69ea2c49f6ebd07b77df474eac25432b73c1fac8",
    "i111": "52b9192f4b8bb3c87471ffe72d5929803c31a59b1f274e1e2c72ec70e4a343a5",
    "i11u": "a8992f60b4a4cf9b5a444d8bdf42c082d7250ed8a2c5d9d7eeeb18a0a7fb58c4",
    "iui1": "f867e0f60f581e3aebc717817f9d6e3e775ddd7830e2ba1e6551f1c9ce3df8de",
    "iuiu": "6d51cf5ff405ff898726c12683792c6061cf3387983dc39d4661e9d5637732fc",
    "iun1": "5cd003fb481955153563d0cd652a62c95e0314e196078fd832fe75d606478fd5",
    "iunu": "6b3c2185d4612757c9ed08c5dbc4a30ba9f64587fc0e2b8a03ccca5f9704a199",
    "iu11": "b14e622068dc45643ce2655553a6623b86a721ef637833c5e2f9c42c93fe47ed",
    "iu1u": "808750b952c98020206b39682ffc5d46e71310049d1d32306eb063aadb49ca0e",
    "n1i1": "3bc7ef22c5b2e5fd12a4bc15ce257ee8cf7324d79e4bf960a85de3c84d59398b",
    "n1iu": "07aec6a87e9b25fc09ccc970fa9f4e8ec829b57f06d8e46f73007ab7cfaf7b2b",
    "n1n1": "6c27e66a0990f42a8104f8c04cbec886a090d2e53c812a763870c8712c4d2d5d",
    "n1nu": "b6df127ede8fdb2fdd16dbdac3805b6e4f0c074076a53f0d60886faea74bb3ef",
    "n111": "14576d03440ec80c235a42e379aac351d4bd715a9ad4bf25ed416ec4e5c07b37",
    "n11u": "4a78e796627f4ec8df3ea9706a6bb504574ec723344f1c8fa5d29f65ef4cc35a",
    "nui1": "90250d840c01212c361e80a7fb501002af495eed28e92fb293896eefe1501d79",
    "nuiu": "562f881b69f3797ef05227c1e6c36bc228a3c94b2dc63bb52704f922068b7a4e",
    "nun1": "f1628e231e525aeefa72ff51957cb7663717827ad70038cf49cb1e4254e17918",
    "nunu": "6c33cb6099fd85c9a2659534fab9547b6e1b06cb8ce49cf84cf46c6ed1af1b9e",
    "nu11": "9fc9acdbb972581fc04fdb6b0d562ffa6549d084d310baf1f0487cf3152444f7",
    "nu1u": "515353c606828c3c5aa4f2593676c1d56bb3efb0e756bcab4fa1b0adffd79042",
}


@pytest.fixture(scope="module")
def cifar10():
    return synthetic_labels("cifar10")


_STREAMS: dict = {}


def cifar10_stream(code, cifar10):
    """The official CIFAR-10 stream of a setting, built once per test session."""
    if code not in _STREAMS:
        _STREAMS[code] = make_stream(*cifar10, code, dataset="cifar10", sampler="official", seed=425)
    return _STREAMS[code]


@pytest.fixture(scope="module")
def reference():
    with np.load(REF / "official_cifar10.npz") as z:
        arrays = {k: z[k] for k in z.files}
    summary = json.loads((REF / "official_summary.json").read_text())["datasets"]["cifar10"]["seeds"]["425"]
    return arrays, summary["settings"]


@pytest.mark.parametrize("n,size,zeros", [(150, 1000, 0), (150, 1000, 40), (15000, 10, 0), (15000, 100, 7000), (7, 3, 0)])
def test_legacy_choice_arithmetic_equals_randomstate_choice(n, size, zeros):
    """cdf = cumsum(p); cdf /= cdf[-1]; searchsorted(cdf, random_sample(size), 'right') is RandomState.choice."""
    rng = np.random.default_rng(n + size + zeros)
    p = rng.random(n) ** 3
    p[rng.choice(n, size=zeros, replace=False)] = 0.0
    p /= p.sum()
    for seed in (0, 425, 2**31):
        a, b = np.random.RandomState(seed), np.random.RandomState(seed)
        for _ in range(3):
            np.testing.assert_array_equal(legacy_choice_with_p(a, p, size), b.choice(n, size=size, p=p))
        assert a.random_sample() == b.random_sample()  # same amount of the stream consumed


@pytest.mark.parametrize("code", [s.code for s in SETTINGS_24])
def test_cifar10_reference_sha256(code, cifar10):
    """Runs anywhere: the sha256 of the full index sequence equals the reference's."""
    stream = cifar10_stream(code, cifar10)
    assert hashlib.sha256(stream.indices.astype("<i8").tobytes()).hexdigest() == REFERENCE_SHA256[code]


@needs_ref
@pytest.mark.parametrize("code", [s.code for s in SETTINGS_24])
def test_cifar10_reference_streams_bit_for_bit(code, cifar10, reference):
    arrays, meta = reference
    stream = cifar10_stream(code, cifar10)
    np.testing.assert_array_equal(stream.indices, arrays[code].astype(np.int64))
    info = meta[code]
    assert hashlib.sha256(stream.indices.astype("<i8").tobytes()).hexdigest() == info["sha256_int64le"]
    assert stream.indices[:20].tolist() == info["first20_indices"]
    assert np.stack([stream.domains[:50], stream.classes[:50]], 1).tolist() == info["first50_states"]
    assert np.bincount(stream.domains, minlength=15).tolist() == info["domain_counts"]
    assert stream.S == info["max_state_samples"] == 1000
    assert stream.meta["consistency"] == info["factors_consistency"]
    assert stream.factors == {
        "domain_alpha": info["factors"]["cor_factor_max_domain"],
        "domain_beta": info["factors"]["imb_factor_domain"],
        "class_alpha": info["factors"]["cor_factor_max_class"],
        "class_beta": info["factors"]["imb_factor_class"],
    }


def test_spec_validation_vectors(cifar10):
    """spec 1.8: the first 12 states of CIFAR-10 i1i1 and n1n1."""
    s = make_stream(*cifar10, "i1i1")
    assert s.domains[:12].tolist() == [0, 11, 4, 1, 2, 12, 2, 10, 9, 13, 11, 7]
    assert s.classes[:12].tolist() == [0, 3, 4, 1, 2, 1, 1, 3, 2, 4, 2, 9]
    s = make_stream(*cifar10, "n1n1")
    assert s.domains[:12].tolist() == [0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 3, 3]
    assert s.classes[:12].tolist() == [0, 0, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3]


# spec 1.8, CIFAR-100 column: length / domain0:domain14 / class0:class99
CIFAR100 = {
    "i1i1": (110896, 7377, 7459, 1140, 1085), "i1iu": (75600, 10000, 2000, 766, 717),
    "i1n1": (103957, 6737, 7071, 1048, 1029), "i1nu": (58264, 7800, 1520, 634, 587),
    "i111": (150000, 10000, 10000, 1461, 1507), "i11u": (75600, 10000, 2000, 746, 769),
    "iui1": (58875, 3885, 3885, 1500, 150), "iuiu": (29703, 3925, 784, 756, 76),
    "iun1": (58875, 4009, 3910, 1500, 150), "iunu": (29703, 3941, 809, 756, 76),
    "iu11": (58875, 3925, 3925, 1500, 150), "iu1u": (29703, 3925, 784, 756, 76),
    "n1i1": (84405, 5612, 5646, 1083, 853), "n1iu": (75600, 10000, 2000, 911, 876),
    "n1n1": (27804, 1820, 1785, 482, 444), "n1nu": (14331, 2000, 383, 156, 63),
    "n111": (150000, 10000, 10000, 1238, 1857), "n11u": (75600, 10000, 2000, 418, 1136),
    "nui1": (37197, 2566, 2496, 887, 101), "nuiu": (29703, 3925, 784, 739, 68),
    "nun1": (24937, 1538, 1719, 639, 66), "nunu": (13183, 1802, 351, 568, 40),
    "nu11": (58875, 3925, 3925, 1068, 183), "nu1u": (29703, 3925, 784, 598, 49),
}


def _head_tail(stream):
    d = np.bincount(stream.domains, minlength=stream.num_domains)
    c = np.bincount(stream.classes, minlength=stream.num_classes)
    return (len(stream), int(d[0]), int(d[-1]), int(c[0]), int(c[-1]))


def test_cifar100_matches_the_spec_table():
    labels, domains = synthetic_labels("cifar100")
    got = {code: _head_tail(make_stream(labels, domains, code, dataset="cifar100-c")) for code in CIFAR100}
    assert got == CIFAR100


@pytest.mark.parametrize(
    "code,expected",
    [("i11u", (76000, 10000, 2000, 57, 69)), ("i1nu", (21618, 2588, 556, 27, 20))],
)
def test_imagenet_matches_the_spec_table(code, expected):
    """ImageNet-C layout: 50,000 per domain, label floor(j/50); rows computed on demand (no 1.8 GB matrix)."""
    labels, domains = synthetic_labels("imagenet")
    stream = make_stream(labels, domains, code, dataset="imagenet-c")
    assert _head_tail(stream) == expected
    assert stream.S == 10


def test_real_label_order_gives_the_same_states_and_rank_mapped_indices(cifar10):
    """The state sequence depends only on the RNG and pool sizes; indices map by rank within a pool (README)."""
    labels, domains = cifar10
    rng = np.random.default_rng(1)
    perm = np.concatenate([d * 10000 + rng.permutation(10000) for d in range(15)])
    shuffled = labels[perm]  # same pool sizes, labels no longer j mod 10
    a = make_stream(labels, domains, "nunu")
    b = make_stream(shuffled, domains, "nunu")
    np.testing.assert_array_equal(a.domains, b.domains)
    np.testing.assert_array_equal(a.classes, b.classes)
    assert np.array_equal(shuffled[b.indices], b.classes) and np.array_equal(domains[b.indices], b.domains)

    def rank(lab, idx):  # rank of each image within its (domain, class) pool, in dataset order
        state = domains * 10 + lab
        order = np.argsort(state, kind="stable")
        r = np.empty(len(lab), dtype=np.int64)
        r[order] = np.arange(len(lab)) - np.searchsorted(state[order], state[order])
        return r[idx]

    np.testing.assert_array_equal(rank(labels, a.indices), rank(shuffled, b.indices))


def test_no_global_random_state_is_touched(cifar10):
    np.random.seed(7)
    random.seed(7)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    make_stream(*cifar10, "nui1")
    assert np.array_equal(np.random.get_state()[1], before_np) and random.getstate() == before_py


def test_reuse_and_drift_reported(cifar10):
    s = make_stream(*cifar10, "i111")
    counts = np.bincount(s.domains * 10 + s.classes, minlength=150)
    assert int((counts > 1000).sum()) == 76  # spec 1.8: 76 of 150 states drawn more than their pool
    assert s.n_reused == int(np.maximum(counts - 1000, 0).sum()) > 0
    # spec 1.8: quota settings drift; i1iu's last quarter holds only the 8 head domains
    summary = make_stream(*cifar10, "i1iu").summary()
    assert summary["domain_counts_per_quarter"][3] == [5511, 4439, 3451, 2461, 1734, 953, 343, 23] + [0] * 7
    assert summary["domain_quarter_drift_tv"] > 0.2
    q4 = make_stream(*cifar10, "iui1").summary()["class_counts_per_quarter"][3]
    assert np.abs(np.array(q4) - [8254, 4802, 2138, 124, 0, 0, 0, 0, 0, 0]).max() <= 3  # quarter edges differ


def test_fmnist_c_uses_cifar10_factors(cifar10):
    a = make_stream(*cifar10, "nuiu", dataset="fmnist-c")
    b = make_stream(*cifar10, "nuiu", dataset="cifar10")
    assert a.S == 1000 and a.factors == b.factors and np.array_equal(a.indices, b.indices)


def test_overrides_are_used(cifar10):
    s = make_stream(*cifar10, "nunu", S=200, class_beta=2.0, domain_alpha=0.9)
    assert s.S == 200 and s.factors["class_beta"] == 2.0 and s.factors["domain_alpha"] == 0.9
    assert np.bincount(s.domains * 10 + s.classes).max() == 200  # C,C: stops when a state reaches S


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"setting": "xx11"}, "setting='xx11'"),
        ({"setting": "nui"}, "4-character"),
        ({"setting": "nui1", "sampler": "fast"}, "sampler='fast'"),
        ({"setting": "nui1", "S": 0}, "S=0"),
        ({"setting": "nui1", "length": 100}, "length"),
        ({"setting": "nui1", "class_beta": 0.5}, r"class_beta=0.5.*>= 1"),
        ({"setting": "nui1", "domain_alpha": 0.01}, r"domain_alpha=0.01.*\[0.0666667, 1\]"),
        ({"setting": "1111"}, "class-continual"),
        ({"setting": "nui1", "dataset": "mnist"}, "dataset='mnist'"),
    ],
)
def test_bad_input(cifar10, kwargs, match):
    setting = kwargs.pop("setting")
    with pytest.raises(ValueError, match=match):
        make_stream(*cifar10, setting, **kwargs)


def test_bad_arrays():
    with pytest.raises(ValueError, match="n >= 2 classes"):
        make_stream(np.zeros(20, dtype=int), np.arange(20) % 2, "nui1")
    with pytest.raises(ValueError, match="n >= 2 domains"):
        make_stream(np.arange(20) % 2, np.zeros(20, dtype=int), "nui1")
    with pytest.raises(ValueError, match="empty"):
        make_stream(np.array([], dtype=int), np.array([], dtype=int), "nui1")
    labels, domains = synthetic_labels("cifar10")
    keep = ~((labels == 0) & (domains == 0))
    with pytest.raises(ValueError, match="start state"):
        make_stream(labels[keep], domains[keep], "nui1")
    with pytest.raises(ValueError, match=r"domain_alpha=0.067.*\[0.5, 1\]"):  # 2 domains: i.i.d. is 0.5
        make_stream(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), "nui1")
    with pytest.raises(ValueError, match="integer"):
        make_stream(np.array([0.5, 1.0]), np.array([0, 1]), "nui1")


def test_empty_pool_states_are_never_entered(cifar10):
    """Like the reference, a state with an empty pool is invalid from the start and rejected (spec 1.2)."""
    labels, domains = cifar10
    keep = ~((labels == 5) & (domains == 3))
    for code in ("nui1", "n1iu", "iuiu"):
        s = make_stream(labels[keep], domains[keep], code)
        assert not np.any((s.domains == 3) & (s.classes == 5))
        assert np.array_equal(labels[keep][s.indices], s.classes)


def test_streams_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, unitta.streams; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("code", ["iui1", "i1iu", "iuiu", "nunu", "iu11"])
def test_cdf_cache_changes_nothing(code, cifar10):
    """The cdf cache (rows whose sum is exactly 1) is a pure speed-up: disabled, the states are the same."""
    from unitta.streams import official
    from unitta.streams.settings import default_factors

    labels, domains = cifar10
    f = default_factors(code, "cifar10")
    plan = official.make_plan(15, 10, f, 1000)
    sizes = np.bincount(domains * 10 + labels, minlength=150)
    kw = {"domain_alpha": f["domain_alpha"], "class_alpha": f["class_alpha"]}
    cached = official.sample_states(plan, sizes, 425, **kw)
    uncached = official.sample_states(plan, sizes, 425, cdf_cache_bytes=0, **kw)
    np.testing.assert_array_equal(cached, uncached)
