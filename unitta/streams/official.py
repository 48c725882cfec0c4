"""The ``official`` sampler: the reference UniTTA sampler's index sequence, bit for bit (spec 1.2-1.8).

The reference (``core/data/unittasampler.py`` of LeapLabTHU/UniTTA) builds its whole stream in its
constructor: pools shuffled with Python's ``random``, a dense DK x DK Kronecker transition matrix,
per-state pre-sampling buffers filled with numpy's legacy global generator, quota or cap stopping
rules, dead-end jumps, and round-robin pool reuse. This module replays exactly the same random
calls on private ``random.Random(seed)`` and ``numpy.random.RandomState(seed)`` instances (which
yield the same numbers as the seeded global generators) with three speed-ups that do not change a
single bit:

* rows of the Kronecker matrix are computed on demand (``ulmm.kron_row``: the same float64 products)
  and, for large state spaces, recomputed from their history (zeroed columns, the exact divisors of
  every in-place renormalisation) instead of being stored: no 1.8 GB matrix for ImageNet;
* legacy ``RandomState.choice(n, size, p=row)`` is done by hand with its own arithmetic
  (cdf = cumsum(p); cdf /= cdf[-1]; searchsorted(cdf, random_sample(size), side='right')), skipping
  its O(n) input checks (a test compares it against ``RandomState.choice`` itself);
* the state sequence is produced first and mapped to images afterwards (pool visit v of a state
  takes the pool's (v mod size)-th shuffled item, which is what the round-robin queue does).

Deviations, only in cases where the reference crashes or hangs (never in the paper's 24 settings
on real or synthetic data): an empty pool at the start state (0,0) or a class-continual setting is a
ValueError; with empty pools in quota settings the stream stops when no valid state remains (the
reference loops forever because the trace test never passes).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import numpy as np

from unitta.streams import ulmm
from unitta.streams.settings import Setting

# Dense rows are kept (and updated in place, like the reference's matrix) when the matrix fits this budget.
_ROW_CACHE_BYTES = 64 * 2**20
# From this many states on, choice() locates its draws without the full sequential cumsum (proved exact).
_FAST_CHOICE_MIN_STATES = 2048


@dataclass(frozen=True)
class OfficialPlan:
    """Everything the reference derives from its factors before sampling (spec 1.3-1.4)."""

    num_domains: int
    num_classes: int
    S: int
    domain_consistent: bool
    class_consistent: bool
    t_domain: np.ndarray  # (D, D) ULMM
    t_class: np.ndarray  # (K, K) ULMM
    quota: np.ndarray  # (D, K) int64: round(S * M[d,k] / M[0,0]), M = outer(r_domain, r_class)

    @property
    def mode(self) -> str:
        """'CC' cap at S; 'QQ' per-state quotas; 'DQ' domain totals; 'CQ' class totals (spec 1.6)."""
        if self.domain_consistent and self.class_consistent:
            return "CC"
        if not self.domain_consistent and not self.class_consistent:
            return "QQ"
        return "DQ" if not self.domain_consistent else "CQ"


def make_plan(num_domains: int, num_classes: int, factors: dict[str, float], S: int) -> OfficialPlan:
    """Correlation vectors, ULMMs, consistency flags and quotas exactly as the reference computes them."""
    if int(S) != S or S < 1:
        raise ValueError(f"S={S!r}: the per-state sample cap must be an integer >= 1")
    da, db = factors["domain_alpha"], factors["domain_beta"]
    ca, cb = factors["class_alpha"], factors["class_beta"]
    ulmm.check_factors(da, db, num_domains, name="domain")
    ulmm.check_factors(ca, cb, num_classes, name="class")
    r_domain = ulmm.imbalance_ratios(db, num_domains)
    r_class = ulmm.imbalance_ratios(cb, num_classes)
    m = np.outer(r_domain, r_class)
    quota = np.round(S * m / m[0, 0]).astype(np.int64)
    return OfficialPlan(
        num_domains=num_domains,
        num_classes=num_classes,
        S=int(S),
        domain_consistent=ulmm.is_consistent(da, db, num_domains),
        class_consistent=ulmm.is_consistent(ca, cb, num_classes),
        t_domain=ulmm.ulmm(ulmm.correlation_vector(da, db, num_domains)),
        t_class=ulmm.ulmm(ulmm.correlation_vector(ca, cb, num_classes)),
        quota=quota,
    )


def legacy_choice_with_p(rs: np.random.RandomState, p: np.ndarray, size: int) -> np.ndarray:
    """``rs.choice(len(p), size, p=p)`` with legacy RandomState's arithmetic, without its input checks."""
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return cdf.searchsorted(rs.random_sample(size), side="right")


@functools.lru_cache(maxsize=4)
def _pool_permutations(seed: int, sizes: bytes) -> np.ndarray:
    """Positions after Python's ``random.shuffle`` of each pool in turn (loop order = state order).

    The permutation depends only on the seed and the pool sizes (spec: "pool order depends only on pool
    size"), so it is cached across settings. Returns, concatenated, each pool's shuffled local positions.
    """
    rnd = random.Random(seed)
    out: list[int] = []
    for size in np.frombuffer(sizes, dtype=np.int64).tolist():
        pos = list(range(size))
        rnd.shuffle(pos)
        out.extend(pos)
    perm = np.asarray(out, dtype=np.int64)
    perm.setflags(write=False)
    return perm


def shuffled_pools(order: np.ndarray, starts: np.ndarray, seed: int) -> np.ndarray:
    """Every state's pool (dataset order, grouped by state) shuffled with ``random.Random(seed)`` (spec 1.2)."""
    sizes = (starts[1:] - starts[:-1]).astype(np.int64)
    local = _pool_permutations(int(seed), sizes.tobytes())
    return order[np.repeat(starts[:-1], sizes) + local]


class _Rows:
    """The reference's transition matrix, one row at a time, with its in-place history replayed exactly.

    Small state spaces keep every materialised row (updated in place, like the reference's dense
    matrix). Large ones recompute a row when it is needed: the Kronecker products, then the zeroed
    columns (multiplying by a 0/1 mask is exact), then every renormalisation divisor in order.
    """

    def __init__(self, plan: OfficialPlan, cache: bool) -> None:
        self.plan = plan
        self.k = plan.num_classes
        self.n = plan.num_domains * plan.num_classes
        self.cache: dict[int, list] | None = {} if cache else None  # s -> [row, n zeroed columns applied]
        self.divisors: dict[int, list[float]] = {}  # s -> every renormalisation divisor, in order
        self.zeroed_cols: list[int] = []  # columns zeroed so far (quota mode), in order
        self.keep = np.ones(self.n)  # 0.0 at zeroed columns
        self.zeroed_rows: set[int] = set()
        # Rows of a continual domain (T_D = identity) are zero outside their own domain's block.
        self.block_only = [int(np.count_nonzero(r)) == 1 for r in plan.t_domain]

    def zero_column(self, s: int) -> None:
        self.zeroed_cols.append(s)
        self.keep[s] = 0.0

    def get(self, s: int) -> np.ndarray:
        if s in self.zeroed_rows:
            return np.zeros(self.n)
        if self.cache is not None and s in self.cache:
            entry = self.cache[s]
            if entry[1] < len(self.zeroed_cols):
                entry[0][self.zeroed_cols[entry[1] :]] = 0.0
                entry[1] = len(self.zeroed_cols)
            return entry[0]
        d, k = divmod(s, self.k)
        if self.block_only[d]:
            dd = int(np.flatnonzero(self.plan.t_domain[d])[0])
            row = np.zeros(self.n)
            np.multiply(self.plan.t_domain[d, dd], self.plan.t_class[k], out=row[dd * self.k : (dd + 1) * self.k])
        else:
            row = ulmm.kron_row(self.plan.t_domain, self.plan.t_class, d, k)
        if self.zeroed_cols:
            row *= self.keep
        # Zeroing commutes with the scalar divisions (0 / x = 0 and the other entries are untouched), so
        # replaying the divisions after all zeroings gives exactly the row the reference holds.
        for div in self.divisors.get(s, ()):
            row /= div
        if self.cache is not None:
            self.cache[s] = [row, len(self.zeroed_cols)]
        return row

    def renormalise(self, s: int, row: np.ndarray, total: float) -> None:
        row /= total  # in place, as the reference does (spec 7.23); cached rows keep it
        self.divisors.setdefault(s, []).append(total)


_CHUNK = 32


def fast_legacy_indices(p: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``searchsorted(cumsum(p) / cumsum(p)[-1], uniforms, side='right')`` without the O(n) sequential cumsum.

    numpy's cumsum is a dependent chain of n additions (about 10 ns each here), the bottleneck for
    ImageNet's 15,000-entry rows. This locates each uniform with chunk sums and a short local cumsum,
    then proves the answer: any summation order of n non-negative terms is within gamma_n = n 2^-53
    (relative) of the exact sum, so when both neighbours of the found position lie more than a margin
    covering both orders' errors away from the threshold, the exact sequential cdf gives the same index.
    Otherwise (probability about 1e-10 per draw) it falls back to the exact cumsum.
    """
    n = len(p)
    nch = -(-n // _CHUNK)
    if nch * _CHUNK != n:
        padded = np.zeros(nch * _CHUNK)
        padded[:n] = p
    else:
        padded = p
    blocks = padded.reshape(nch, _CHUNK)
    chunk_tot = blocks.sum(axis=1)
    ends = np.cumsum(chunk_tot)
    total = ends[-1]
    t = uniforms * total
    j = np.minimum(np.searchsorted(ends, t, side="right"), nch - 1)
    before = np.concatenate(([0.0], ends))[j]
    local = before[:, None] + np.cumsum(blocks[j], axis=1)  # (size, CHUNK) approximate cdf * total
    k = np.count_nonzero(local <= t[:, None], axis=1)
    idx = j * _CHUNK + k
    rows = np.arange(len(t))
    below = np.where(k > 0, local[rows, np.maximum(k - 1, 0)], before)
    above = np.where(k < _CHUNK, local[rows, np.minimum(k, _CHUNK - 1)], np.inf)
    margin = total * (8.0 * (n + 8) * 2.0**-53 + 2.0**-50)  # twice the bound derived above
    if np.all(t - below > margin) and np.all(above - t > margin) and np.all(idx < n):
        return idx
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return cdf.searchsorted(uniforms, side="right")


def sample_states(
    plan: OfficialPlan,
    pool_sizes: np.ndarray,
    seed: int,
    *,
    domain_alpha: float,
    class_alpha: float,
    row_cache: bool | None = None,
    force_fast: bool = False,
) -> np.ndarray:
    """The reference's state sequence s = d*K + k (spec 1.5-1.6), from ``numpy.random.RandomState(seed)``."""
    D, K, S = plan.num_domains, plan.num_classes, plan.S
    DK = D * K
    P = S  # presampling_size = max_state_samples
    if class_alpha == 1.0:
        raise ValueError(
            "class_alpha=1.0: class-continual settings are not supported by the official sampler "
            "(the reference's dead-end jump to class k+1 runs out of classes); use sampler='exact'"
        )
    if pool_sizes[0] == 0:
        raise ValueError("labels: the pool of the start state (domain 0, class 0) is empty; the reference requires it")
    rs = np.random.RandomState(seed)
    if row_cache is None:
        row_cache = DK * DK * 8 <= _ROW_CACHE_BYTES
    rows = _Rows(plan, cache=row_cache)
    valid = (np.asarray(pool_sizes) > 0).tolist()
    n_valid = sum(valid)
    count = [0] * DK
    used = [0] * DK
    bufs: list[list[int] | None] = [None] * DK
    mode = plan.mode
    quota = plan.quota.ravel().tolist()
    dquota = plan.quota.sum(axis=1).tolist()
    cquota = plan.quota.sum(axis=0).tolist()
    dcount = [0] * D
    ccount = [0] * K

    def refill(s: int) -> list[int]:
        row = rows.get(s)
        total = row.sum()
        if total == 0:
            if valid[s]:
                raise RuntimeError(f"state {s} is valid but its transition row is all zero")
            # Dead end: one uniform draw among the valid states (spec 1.5), restricted to the next domain
            # (continual domain) and/or next class (continual class).
            cand = np.flatnonzero(np.asarray(valid))
            if domain_alpha == 1.0:
                cand = cand[cand // K == s // K + 1]
            if cand.size == 0:
                raise RuntimeError(f"dead end at state {s}: no valid state to jump to")
            buf = bufs[s] if bufs[s] is not None else [0] * P
            buf[0] = int(rs.choice(cand, size=1)[0])
            return buf
        if total != 1:
            rows.renormalise(s, row, total)
        if DK < _FAST_CHOICE_MIN_STATES and not force_fast:
            return legacy_choice_with_p(rs, row, P).tolist()
        return fast_legacy_indices(row, rs.random_sample(P)).tolist()

    seq: list[int] = []
    append = seq.append
    s = 0
    while True:
        append(s)
        c = count[s] + 1
        count[s] = c
        if mode == "CC":
            if c >= S:
                break
        elif mode == "QQ":
            if c >= quota[s]:
                valid[s] = False
                n_valid -= 1
                rows.zero_column(s)
                if n_valid == 0:
                    break
        elif mode == "DQ":
            d = s // K
            dcount[d] += 1
            if dcount[d] >= dquota[d]:
                for x in range(d * K, d * K + K):
                    if valid[x]:
                        valid[x] = False
                        n_valid -= 1
                    rows.zeroed_rows.add(x)
                if n_valid == 0:
                    break
        else:  # "CQ"
            k = s % K
            ccount[k] += 1
            if ccount[k] >= cquota[k]:
                for x in range(k, DK, K):
                    if valid[x]:
                        valid[x] = False
                        n_valid -= 1
                    rows.zeroed_rows.add(x)
                if n_valid == 0:
                    break
        # Next state: consume this state's buffer, refilling every P draws; reject invalid successors.
        while True:
            u = used[s]
            if u % P == 0:
                bufs[s] = refill(s)
                u = 0
            nxt = bufs[s][u]
            used[s] = u + 1
            if valid[nxt]:
                break
        s = nxt
    return np.asarray(seq, dtype=np.int64)
