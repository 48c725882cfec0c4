"""Speed and memory of the stream samplers. Prints figures; not a test.

    python bench/streams.py                      # CIFAR-10-C and ImageNet-C, both samplers, all 24 settings
    python bench/streams.py --datasets imagenet --settings nunu,iuiu --repeat 3

Per dataset it reports
* ``exact``: a 150,000-sample stream (synthetic labels with the real pool sizes), per setting;
* ``official``: every setting's full reference stream (lengths 13k-269k), per setting, both *cold*
  (pool-shuffle cache cleared, i.e. everything the reference's constructor does) and *warm* (the
  seed's pool permutation cached from an earlier setting, as in a sweep);
* wall time and process CPU time (on a shared machine the CPU time is the fairer figure), and peak
  memory: the peak of numpy/Python allocations (tracemalloc) and the process's peak RSS.

Reference implementation (spec/reference README, single-threaded, idle 2-core VM): about 7.5 s per
ImageNet setting (180 s for 24; peak RSS 3.7 GB) and about 0.35 s per CIFAR-10 setting (8.1 s for 24).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import tracemalloc
from functools import partial

from unitta.streams import SETTINGS_24, make_stream, synthetic_labels
from unitta.streams import official as _official

# tracemalloc slows allocation-heavy code down, so peak memory is measured on a few settings only:
# the longest consistent stream and two quota settings.
MEMORY_SETTINGS = ("n1n1", "iuiu", "iui1")
REFERENCE_S_PER_SETTING = {"cifar10": 8.1 / 24, "imagenet": 180.0 / 24}  # reference sampler README totals


def _timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def bench_dataset(dataset: str, codes: list[str], repeat: int, length: int) -> None:
    labels, domains = synthetic_labels(dataset)
    print(f"\n== {dataset}: {len(labels):,} images, {(domains.max() + 1) * (labels.max() + 1):,} states ==")
    rows = []
    for code in codes:
        exact_stream = partial(make_stream, labels, domains, code, dataset=dataset, sampler="exact", length=length)
        official_stream = partial(make_stream, labels, domains, code, dataset=dataset, sampler="official")
        exact = [_timed(exact_stream) for _ in range(repeat)]
        cold = []
        for _ in range(repeat):
            _official._pool_permutations.cache_clear()
            cold.append(_timed(official_stream))
        warm = [_timed(official_stream) for _ in range(repeat)]
        best = lambda runs, i: min(r[i] for r in runs)  # noqa: E731 - best of the repeats
        rows.append((code, len(cold[0][2]), best(exact, 0), best(exact, 1), best(cold, 0), best(cold, 1),
                     best(warm, 0), best(warm, 1)))
        r = rows[-1]
        print(f"{code}  exact {r[2]:6.3f} s (cpu {r[3]:6.3f})  official len {r[1]:>7,}: cold {r[4]:6.3f} s "
              f"(cpu {r[5]:6.3f})  warm {r[6]:6.3f} s (cpu {r[7]:6.3f})", flush=True)
    ref = REFERENCE_S_PER_SETTING[dataset]
    cols = {"exact": (2, 3), "official cold": (4, 5), "official warm": (6, 7)}
    print(f"-- {dataset} summary over {len(rows)} setting(s), best of {repeat}:")
    for name, (w, c) in cols.items():
        walls, cpus = [r[w] for r in rows], [r[c] for r in rows]
        line = (f"   {name:<14} mean {statistics.mean(walls):.3f} s wall / {statistics.mean(cpus):.3f} s cpu, "
                f"max {max(walls):.3f} s wall / {max(cpus):.3f} s cpu, total {sum(cpus):.2f} s cpu")
        if name != "exact":
            line += f"; reference {ref:.2f} s/setting -> {ref / statistics.mean(cpus):.1f}x (cpu)"
        print(line)
    tracemalloc.start()
    make_stream(labels, domains, codes[0], dataset=dataset, sampler="exact", length=length)
    exact_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    peaks = []
    for code in [c for c in codes if c in MEMORY_SETTINGS] or codes[:1]:
        tracemalloc.reset_peak()
        make_stream(labels, domains, code, dataset=dataset, sampler="official")
        peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    print(f"   peak allocations: exact {exact_peak / 2**20:.0f} MiB, official max {max(peaks) / 2**20:.0f} MiB "
          f"over {', '.join(c for c in codes if c in MEMORY_SETTINGS) or codes[0]} (synthetic label arrays excluded)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cifar10,imagenet")
    parser.add_argument("--settings", default=",".join(s.code for s in SETTINGS_24))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--length", type=int, default=150_000, help="exact sampler stream length")
    args = parser.parse_args()
    codes = args.settings.split(",")
    for dataset in args.datasets.split(","):
        bench_dataset(dataset, codes, args.repeat, args.length)
    print(f"\nprocess peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB "
          "(reference: about 3.7 GB for ImageNet)")


if __name__ == "__main__":
    main()
