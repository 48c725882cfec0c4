"""The ``official`` sampler: the reference UniTTA sampler's index sequence, bit for bit (docs/streams.md).

The reference (``core/data/unittasampler.py`` of LeapLabTHU/UniTTA) builds its whole stream in its
constructor: pools shuffled with Python's ``random``, a dense DK x DK Kronecker transition matrix,
per-state pre-sampling buffers filled with numpy's legacy global generator, quota or cap stopping
rules, dead-end jumps, and round-robin pool reuse. This module replays exactly the same random
calls on private ``random.Random(seed)`` and ``numpy.random.RandomState(seed)`` instances (which
yield the same numbers as the seeded global generators) with three speed-ups that do not change a
single bit:

* no DK x DK matrix (1.8 GB for ImageNet): a row is recomputed when a refill needs it, from the same
  float64 products (``ulmm.kron_row``), the columns zeroed so far and the exact divisors of every
  in-place renormalisation of that row (``_Rows``);
* legacy ``RandomState.choice(n, size, p=row)`` is done by hand with its own arithmetic
  (cdf = cumsum(p); cdf /= cdf[-1]; searchsorted(cdf, random_sample(size), side='right')), skipping
  its O(n) input checks (a test compares it against ``RandomState.choice`` itself); for a continual
  domain the cumsum runs over the one non-zero domain block only (zeros add exactly nothing);
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
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from unitta.streams import ulmm

# Memory for the cdfs of recently refilled rows (about 550 dense ImageNet rows of 15,000 states).
_CDF_CACHE_BYTES = 64 * 2**20

@dataclass(frozen=True)
class OfficialPlan:
    """Everything the reference derives from its factors before sampling (docs/streams.md)."""

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
        """'CC' cap at S; 'QQ' per-state quotas; 'DQ' domain totals; 'CQ' class totals."""
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


def legacy_cdf(p: np.ndarray) -> np.ndarray:
    """The cdf legacy ``RandomState.choice`` builds from p: cumsum, then divided by its last value."""
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return cdf


def legacy_choice_with_p(rs: np.random.RandomState, p: np.ndarray, size: int) -> np.ndarray:
    """``rs.choice(len(p), size, p=p)`` with legacy RandomState's arithmetic, without its input checks."""
    return legacy_cdf(p).searchsorted(rs.random_sample(size), side="right")


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
    perm = np.fromiter(out, dtype=np.int64, count=len(out))
    perm.setflags(write=False)
    return perm


def shuffled_pools(order: np.ndarray, starts: np.ndarray, seed: int) -> np.ndarray:
    """Every state's pool (dataset order, grouped by state) shuffled with ``random.Random(seed)`` (docs/streams.md)."""
    sizes = (starts[1:] - starts[:-1]).astype(np.int64)
    local = _pool_permutations(int(seed), sizes.tobytes())
    return order[np.repeat(starts[:-1], sizes) + local]


class _Rows:
    """The reference's transition matrix, one row at a time, with its in-place history replayed exactly.

    A row is not stored: a refill recomputes it from the Kronecker products (``ulmm.kron_row``), the
    columns zeroed so far (multiplying by a 0/1 mask is exact) and every renormalisation divisor of
    that row in order. Zeroing commutes with the scalar divisions (0 / x = 0 and other entries are
    untouched), so this is exactly the row the reference holds in its dense DK x DK matrix.

    What is kept is the cdf of recently refilled rows whose sum is exactly 1 after the refill: until a
    column of the row is zeroed, the reference's next refill of that state sees the same row, skips the
    renormalisation and builds the same cdf. This matters when most successors are rejected (late in
    quota settings) and one state refills over and over. Bounded by ``cache_bytes`` (oldest out first).
    """

    def __init__(self, plan: OfficialPlan, cache_bytes: int = _CDF_CACHE_BYTES) -> None:
        self.plan = plan
        self.k = plan.num_classes
        self.n = plan.num_domains * plan.num_classes
        self.divisors: dict[int, list[float]] = {}  # s -> every renormalisation divisor, in order
        self.keep = np.ones(self.n)  # 0.0 at zeroed columns
        self.n_zeroed = 0
        self.block_zeroed = [0] * plan.num_domains  # zeroed columns per domain block
        self.zeroed_rows: set[int] = set()
        # A continual domain's rows (T_D = identity) are zero outside one domain block.
        self.block_of = [int(np.flatnonzero(r)[0]) if np.count_nonzero(r) == 1 else -1 for r in plan.t_domain]
        self.cache: OrderedDict[int, tuple[int, int, np.ndarray]] = OrderedDict()  # s -> (version, lo, cdf)
        self.cache_left = cache_bytes

    def zero_column(self, s: int) -> None:
        self.keep[s] = 0.0
        self.n_zeroed += 1
        self.block_zeroed[s // self.k] += 1

    def refill_info(self, s: int) -> tuple[float, int, np.ndarray | None]:
        """(row sum before this refill's renormalisation, offset, normalised cdf from the offset on).

        Records the renormalisation (the reference's ``if sum(p) != 1: p /= sum(p)`` in place). A zero sum
        (dead end) returns cdf None. searchsorted(full cdf, u) == offset + searchsorted(cdf, u) for u < 1.
        """
        if s in self.zeroed_rows:
            return 0.0, 0, None
        d, k = divmod(s, self.k)
        blk = self.block_of[d]
        version = self.block_zeroed[blk] if blk >= 0 else self.n_zeroed  # zeroings that can touch this row
        hit = self.cache.get(s)
        if hit is not None:
            if hit[0] == version:
                self.cache.move_to_end(s)
                return 1.0, hit[1], hit[2]
            self._drop(s)
        if blk >= 0:
            row = np.zeros(self.n)
            lo, hi = blk * self.k, (blk + 1) * self.k
            np.multiply(self.plan.t_domain[d, blk], self.plan.t_class[k], out=row[lo:hi])
        else:
            row = ulmm.kron_row(self.plan.t_domain, self.plan.t_class, d, k)
            lo, hi = 0, self.n
        if self.n_zeroed:
            row *= self.keep
        divisors = self.divisors.setdefault(s, [])
        for div in divisors:
            row /= div
        total = row.sum()  # numpy's pairwise sum over the full row, as the reference
        if total == 0:
            return 0.0, 0, None
        if total != 1:
            row /= total
            divisors.append(total)
        # Zeros before the block leave the running sum at exactly 0 and zeros after it at its last
        # value, so the block's own cumsum holds every value a uniform in [0, 1) can select.
        cdf = legacy_cdf(row[lo:hi])
        if row.sum() == 1:  # the next refill sees this very row and does not renormalise it
            while self.cache and self.cache_left < cdf.nbytes:
                self._drop(next(iter(self.cache)))
            if self.cache_left >= cdf.nbytes:
                self.cache[s] = (version, lo, cdf)
                self.cache_left -= cdf.nbytes
        return float(total), lo, cdf

    def _drop(self, s: int) -> None:
        self.cache_left += self.cache.pop(s)[2].nbytes


def _check_sampler_inputs(pool_sizes: np.ndarray, class_alpha: float) -> None:
    """What the reference sampler cannot run: class-continual settings, an empty start state."""
    if class_alpha == 1.0:
        raise ValueError(
            "class_alpha=1.0: class-continual settings are not supported by the official sampler "
            "(the reference's dead-end jump to class k+1 runs out of classes); use sampler='exact'"
        )
    if pool_sizes[0] == 0:
        raise ValueError("labels: the pool of the start state (domain 0, class 0) is empty; the reference requires it")


def _budgets(plan: OfficialPlan) -> tuple[list[int], list[int]]:
    """The stop rules as countdowns: (the group of each state, each group's budget). Every visit decrements the
    budget of the visited state's group (CC and QQ: the state, cap S resp. its quota; DQ: its domain's total
    quota; CQ: its class's)."""
    D, K, S, mode = plan.num_domains, plan.num_classes, plan.S, plan.mode
    DK = D * K
    if mode == "DQ":
        return [s // K for s in range(DK)], plan.quota.sum(axis=1).tolist()
    if mode == "CQ":
        return [s % K for s in range(DK)], plan.quota.sum(axis=0).tolist()
    return list(range(DK)), ([S] * DK if mode == "CC" else plan.quota.ravel().tolist())


def _close(s: int, plan: OfficialPlan, rows: _Rows, valid: list, valid_arr: np.ndarray, state_counter: list) -> bool:
    """The visit that exhausted a budget: close the state/domain/class (``valid``, ``valid_arr``, the rows of
    ``rows`` and ``state_counter`` change in place); True when the stream ends."""
    mode, K = plan.mode, plan.num_classes
    DK = plan.num_domains * K
    if mode == "CC":
        return True  # the first state to reach S ends the stream
    if mode == "QQ":
        members = [s]
        rows.zero_column(s)  # T[:, s] = 0
    elif mode == "DQ":
        members = list(range((s // K) * K, (s // K) * K + K))
    else:
        members = list(range(s % K, DK, K))
    for x in members:
        if valid[x]:
            valid[x] = valid_arr[x] = False
            state_counter[0] -= 1
        if mode != "QQ":
            rows.zeroed_rows.add(x)  # T[rows of the closed domain/class] = 0
    # The reference also requires trace(T) == 0, which holds once every state with a pool is closed.
    return state_counter[0] == 0


def sample_states(
    plan: OfficialPlan,
    pool_sizes: np.ndarray,
    seed: int,
    *,
    domain_alpha: float,
    class_alpha: float,
    cdf_cache_bytes: int = _CDF_CACHE_BYTES,
) -> np.ndarray:
    """The reference's state sequence s = d*K + k (docs/streams.md), from ``numpy.random.RandomState(seed)``."""
    D, K, S = plan.num_domains, plan.num_classes, plan.S
    DK = D * K
    P = S  # presampling_size = max_state_samples
    _check_sampler_inputs(pool_sizes, class_alpha)
    rs = np.random.RandomState(seed)
    rows = _Rows(plan, cdf_cache_bytes)
    valid_arr = np.asarray(pool_sizes) > 0  # kept in step with `valid` for the dead-end draws
    valid = valid_arr.tolist()
    n_valid = sum(valid)
    used = [0] * DK
    bufs: list[list[int] | None] = [None] * DK

    def refill(s: int) -> list[int]:
        total, lo, cdf = rows.refill_info(s)
        if cdf is None:
            if valid[s]:
                raise RuntimeError(f"state {s} is valid but its transition row is all zero")
            # Dead end: one uniform draw among the valid states (as the reference), restricted to the next domain
            # when domains are continual.
            cand = np.flatnonzero(valid_arr)
            if domain_alpha == 1.0:
                cand = cand[cand // K == s // K + 1]
            if cand.size == 0:
                raise RuntimeError(f"dead end at state {s}: no valid state to jump to")
            buf = bufs[s] if bufs[s] is not None else [0] * P
            buf[0] = int(rs.choice(cand, size=1)[0])
            return buf
        # legacy RandomState.choice(DK, P, p=row): uniforms through the normalised cdf (see legacy_choice_with_p)
        return (cdf.searchsorted(rs.random_sample(P), side="right") + lo).tolist()

    group_of, left = _budgets(plan)
    state_counter = [n_valid]

    seq: list[int] = []
    append = seq.append
    s = 0
    while True:
        append(s)
        g = group_of[s]
        budget = left[g] - 1
        left[g] = budget
        if budget <= 0 and _close(s, plan, rows, valid, valid_arr, state_counter):
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
