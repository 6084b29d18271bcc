"""Count domains: per pipeline rank, then per stage, the (lo, hi) number of layers of the
counted run (a GPT's blocks) that every partition better than a bound must hold.

The probing phase of planner.search.exact proves such domains with the LP; this module
derives them without a solver, from the whole-layer rank floors of planner.search.bounds
(integer_rank_floors_s), so that the LP, probing, branching and CP-SAT start inside them.

For a GPT (embedding, N equal blocks, head), rank r holding D_r blocks makes every partition's
step time at least

    max(busy_r(D_r), B) + max(post_r(D_r), P)

with busy_r / post_r rank r's whole-layer busy and post floors (its forward fill, m times its
work with the least recompute that fits D_r blocks; its DP sync + optimizer time) and B, P the
floors over all ranks (step = makespan + the slowest rank's post time; makespan >= every
rank's busy time and >= B). Both floors grow with D_r, so D_r <= hi_r, the largest count that
stays under the bound; the blocks sum to N, so D_r >= N - sum of the other ranks' hi. A stage
holds at most its rank's hi less one block for every other stage of the rank (every stage but
the first and last holds one), and at least its rank's lo less the other stages' hi.

Why: on 310.1B's tp = 4 pp = 24 zbv (48 stages, 96 blocks), the bound fixes every rank at 4
blocks; the LP with the seed cuts rises from 0.947 to 0.998 of the bound at once, which the
LP's probing took ~100 solves to find.
"""

from __future__ import annotations

from planner.cost import PartitionInputs
from planner.schedules import rank_stages
from planner.search.bounds import integer_rank_floors_s, rank_levels
from planner.search.model import layer_runs

Domains = tuple[tuple[int, int], ...]


def counted_run(inputs: PartitionInputs) -> int:
    """The run whose per-rank and per-stage counts the domains bound: the largest (a GPT's
    blocks)."""
    runs = layer_runs(inputs)
    return max(range(len(runs)), key=lambda k: runs[k].count)


def whole_layer_domains(inputs: PartitionInputs, limit_s: float) -> Domains | None:
    """Domains (per rank, then per stage) holding every partition whose step time is below
    `limit_s`; None where the floors do not apply (not GPT-shaped, a single rank). Some
    domain is empty (lo > hi) if no partition can be below `limit_s`."""
    n_st, pp = inputs.num_stages, inputs.pp
    runs = layer_runs(inputs)
    if pp < 2 or len(runs) != 3 or runs[counted_run(inputs)].first != 1:
        return None  # the counted run must be every middle layer
    levels = rank_levels(inputs, per_stage=True)
    floors = integer_rank_floors_s(inputs, per_stage=True)
    if levels is None or floors is None:
        return None
    wl, (busy_all, post_all) = levels.whole, floors

    def fits(r: int, x: int) -> bool:
        busy, post = levels.busy[r](x), levels.post[r](x)
        return max(busy, busy_all) + max(post, post_all) < limit_s

    ranks: list[tuple[int, int]] = []
    for r in range(pp):
        if not fits(r, 0):
            return _empty(pp + n_st)
        lo, hi = 0, wl.free  # the largest x with fits(r, x): both floors grow with x
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(r, mid):
                lo = mid
            else:
                hi = mid - 1
        ranks.append((wl.lo[r], wl.lo[r] + lo))
    total = runs[counted_run(inputs)].count
    top = sum(hi for _, hi in ranks)
    ranks = [(max(lo, total - (top - hi)), hi) for lo, hi in ranks]
    least = [0 if s in (0, n_st - 1) else 1 for s in range(n_st)]
    on_rank = rank_stages(inputs.stage_rank)
    stage_hi = [0] * n_st
    for r, stages in enumerate(on_rank):
        held = sum(least[s] for s in stages)
        for s in stages:
            stage_hi[s] = ranks[r][1] - (held - least[s])
    stages_out = []
    for s, r in enumerate(inputs.stage_rank):
        others = sum(stage_hi[t] for t in on_rank[r] if t != s)
        stages_out.append((max(least[s], ranks[r][0] - others), stage_hi[s]))
    return (*ranks, *stages_out)


def rank_count_vectors(
    inputs: PartitionInputs, domains: Domains, limit_s: float, most: int
) -> list[tuple[int, ...]] | None:
    """Every vector (D_0 .. D_pp-1) of the counted run's layers per rank inside the rank
    domains of `domains` (its first pp entries), summing to the run's size, whose whole-layer
    floor is below `limit_s`; None where the floors do not apply (as whole_layer_domains) or
    there are more than `most` of them.

    The floor of a vector: max(max_r busy_r(D_r), B) + max(max_r post_r(D_r), P) (module
    docstring: the makespan is at least every rank's busy time and the post time is the
    slowest rank's), at least each rank's own floor that whole_layer_domains bounds. Every
    partition's per-rank counts are one vector, so each partition below `limit_s` inside
    `domains` has its vector in the list: an LP over each (its rank counts fixed) floors the
    configuration by the least of their optima (exact.branch_phase)."""
    pp = inputs.pp
    runs = layer_runs(inputs)
    if pp < 2 or len(runs) != 3 or runs[counted_run(inputs)].first != 1:
        return None
    levels = rank_levels(inputs, per_stage=True)
    floors = integer_rank_floors_s(inputs, per_stage=True)
    if levels is None or floors is None:
        return None
    wl, (busy_all, post_all) = levels.whole, floors
    total = runs[counted_run(inputs)].count
    ranks = [
        (max(lo, wl.lo[r]), min(hi, wl.lo[r] + wl.free)) for r, (lo, hi) in enumerate(domains[:pp])
    ]
    # the most the ranks after r can take, and the least they must: the sum's reach
    most_after = [0] * (pp + 1)
    least_after = [0] * (pp + 1)
    for r in range(pp - 1, -1, -1):
        most_after[r] = most_after[r + 1] + max(0, ranks[r][1])
        least_after[r] = least_after[r + 1] + ranks[r][0]
    found: list[tuple[int, ...]] = []

    def walk(r: int, left: int, busy: float, post: float, prefix: tuple[int, ...]) -> bool:
        """Extend `prefix` (ranks before r) by every count of rank r; False once past
        `most`."""
        if r == pp:
            found.append(prefix)
            return len(found) <= most
        lo, hi = ranks[r]
        for d in range(max(lo, left - most_after[r + 1]), min(hi, left - least_after[r + 1]) + 1):
            b = max(busy, levels.busy[r](d - wl.lo[r]))
            q = max(post, levels.post[r](d - wl.lo[r]))
            if b + q >= limit_s:
                break  # both floors grow with d: no larger count of rank r is below it
            if not walk(r + 1, left - d, b, q, (*prefix, d)):
                return False
        return True

    if not walk(0, total, busy_all, post_all, ()):
        return None
    return found


def intersect(a: Domains | None, b: Domains | None) -> Domains | None:
    """Both sets of domains at once (each holds every better partition)."""
    if a is None or b is None:
        return a if b is None else b
    return tuple((max(la, lb), min(ha, hb)) for (la, ha), (lb, hb) in zip(a, b, strict=True))


def is_empty(domains: Domains | None) -> bool:
    """No count fits some domain: no partition is better than the bound they were made for."""
    return domains is not None and any(lo > hi for lo, hi in domains)


def _empty(size: int) -> Domains:
    return ((1, 0),) * size
