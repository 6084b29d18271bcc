"""Cheap lower bounds of one configuration, valid for every partition: they prune without CP-SAT.

Memory floor. The busiest rank holds at least the average over ranks:
    peak >= fixed + (sum_l static_l + min_s coheld_s * sum_l min_k act_{l,k}) / pp
(coheld: counts each rank holds all at one moment, PartitionInputs.coheld, so each rank's
activation peak is at least sum_{s on r} coheld_s act_s) and at least the largest single
layer's static bytes on top of the fixed bytes.

Time floor. Every rank runs its actions one at a time, so the makespan is at least the average
busy time m * W / pp, with W = sum_l (fw_l + min_k bw_input_{l,k} + bw_weight_l) (one
micro-batch through the whole model, the cheapest recompute everywhere); micro-batch 0 must also
go forward and (input-gradient) backward through all layers, so it is at least
sum_l (fw_l + min_k bw_input_{l,k}) (weight gradients may run off that chain in zb-h1 / zbv).
For gpipe and 1f1b the path
"F0 through stages 0..r-1, every action of rank r, B(m-1) back through stages r-1..0" exists for
each rank r, so makespan >= max_r (m w_r + sum_{s<r} w_s) with w_s the stage's fw + bw; its
minimum over fractional partitions is W / (1 - (1 - 1/m)^pp) (fill each rank to the bound in
turn). The post term adds at least the average per-rank DP sync + optimizer time.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple, overload

from planner.cost import MODE_INDEX, PartitionInputs
from planner.cost.partition import SPLIT_BACKWARD
from planner.memo import PerObject
from planner.schedules import rank_stages
from planner.search.paths import PathCut
from planner.specs.base import RecomputeMode

# water_fill starts from the envelope's counts (a binary search per rank) only where ranks
# take at least this many steps on average; below it the searches cost what they save.
WARM_START_STEPS = 8


def restricted(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> PartitionInputs:
    """`inputs` as a configuration that uses only `modes` sees them, for its floors: each
    layer's backward time and activation bytes of a mode outside `modes` become the least of
    those inside (so every `min` over modes in this module is the least over `modes`), and
    `allowed_modes` is `modes`. Every partition of the configuration has the same times and
    bytes in both, so each floor of the result is a floor of the configuration; with one
    mode (a framework that cannot mix them: uniform full recompute) the floors count its
    recompute, which the least over all modes leaves out. `inputs` itself where `modes` are
    all three."""
    ks = sorted({MODE_INDEX[m] for m in modes})
    if len(ks) == len(MODE_INDEX) or not ks:
        return inputs

    # A GPT's layers repeat a few distinct triples: each is folded once (`folded`), so the
    # sweep's per-configuration cost is a dictionary look-up per layer.
    folded: dict[tuple[float, float, float], tuple[float, float, float]] = {}

    def fold(values: tuple[float, float, float]) -> tuple[float, float, float]:
        out = folded.get(values)
        if out is None:
            least = min(values[k] for k in ks)
            a, b, c = (v if k in ks else least for k, v in enumerate(values))
            out = folded[values] = (a, b, c)
        return out

    return dataclasses.replace(
        inputs,
        bw_input_s=tuple(map(fold, inputs.bw_input_s)),
        activation_bytes=tuple(map(fold, inputs.activation_bytes)),
        allowed_modes=tuple(modes),
    )


def memory_floor_bytes(inputs: PartitionInputs) -> float:
    static = sum(inputs.static_bytes)
    act = sum(map(min, inputs.activation_bytes))
    avg = inputs.fixed_bytes + (static + min(inputs.coheld) * act) / inputs.pp
    return max(avg, inputs.fixed_bytes + max(inputs.static_bytes))


def work_s(inputs: PartitionInputs) -> float:
    """One micro-batch through every layer, forward and backward, cheapest recompute."""
    return sum(inputs.fw_s) + sum(map(min, inputs.bw_input_s)) + sum(inputs.bw_weight_s)


def chain_s(inputs: PartitionInputs) -> float:
    """Micro-batch 0's forward through every layer and its input-gradient backward back: a
    dependency chain of every schedule (the weight-gradient part may run off the chain in the
    zero-bubble schedules, so it is left out)."""
    return sum(inputs.fw_s) + sum(map(min, inputs.bw_input_s))


def time_floor_s(inputs: PartitionInputs, enough_s: float | None = None) -> float:
    """The time floor of the module docstring with the whole-layer floors
    (integer_rank_floors_s, or layer_rank_floors_s where the middle layers differ); one at or
    above `enough_s` may be returned before the recompute term of integer_rank_floors_s, or
    without layer_rank_floors_s."""
    m, pp = inputs.num_microbatches, inputs.pp
    w = work_s(inputs)
    pipeline = max(m * w / pp, chain_s(inputs))
    if inputs.schedule in ("gpipe", "1f1b") and inputs.vpp == 1:
        fill = 1.0 - (1.0 - 1.0 / m) ** pp
        pipeline = max(pipeline, w / fill, last_rank_bound_s(w, m=m, pp=pp))
    post = sum(inputs.post_s) / pp
    whole = integer_rank_floors_s(inputs, per_stage=True, enough_s=enough_s)
    if whole is None and (enough_s is None or pipeline + post < enough_s):
        whole = layer_rank_floors_s(inputs, per_stage=True)
    if whole is not None:
        pipeline, post = max(pipeline, whole[0]), max(post, whole[1])
    return pipeline + post


def integer_rank_floors_s(
    inputs: PartitionInputs,
    *,
    per_stage: bool,
    enough_s: float | None = None,
    drain: bool | None = None,
) -> tuple[float, float] | None:
    """(busy, post) floors that respect whole layers, for models whose layers between the first
    and the last are identical (a GPT: embedding, N equal blocks, head); None otherwise.

    The first layer always sits in stage 0 and the last in stage S - 1, so their ranks are
    known; each rank r holds D_r of the N middle layers, sum D_r = N, and with `per_stage` at
    least one layer per stage it holds (its stages, less stage 0 / S - 1 that already hold the
    first / last layer). For every partition and every schedule:
        makespan >= busy of each rank >= m * (a D_r + E_r + R_r(D_r))  (the rank chain is a path),
        post     =  max_r (p D_r + Q_r)                   (step = makespan + slowest post),
    with a = one middle layer's fw + cheapest input-grad bw + weight-grad bw, p its post time,
    E_r / Q_r the first/last layer's share on rank r, and (with `per_stage`) R_r(D) the least
    extra recompute time that lets D middle layers fit rank r's memory (see _whole_layers).
    Each is at least its minimum over integer D (given the constraints), found exactly by
    water-filling one layer at a time onto the rank whose maximum grows least (optimal for a
    max of nondecreasing functions with unit steps). Each rank's busy floor also waits for the
    forward chain that reaches it and, with `drain`, the backward chain after it
    (rank_edges_s; `drain` None: where inputs.schedule has no split backward). Without
    `per_stage` (valid for every schedule and vpp of the group: it depends on the layers, pp, m
    and whether the schedule is zbv) the lower bounds are 0 and R uses the in-flight counts of
    group_inflight; `drain` must then be False unless no member of the group splits its
    backward. A busy + post floor at or above `enough_s` may be returned before the recompute
    term is added."""
    levels = rank_levels(inputs, per_stage=per_stage, drain=drain)
    if levels is None:
        return None
    wl, fill = levels.whole, levels.fill
    m = inputs.num_microbatches
    # Every level below is nondecreasing in x (a, p >= 0 and the recompute curve is, see
    # _Curve), which water-filling needs; each is computed only where water-filling looks.
    # Without the recompute term the busy levels are linear in x, and so are the post levels:
    # linear_fill finds their minimum in O(pp log pp). That floor (recompute >= 0) is the
    # whole answer where no rank needs recompute at its share of it (below), and enough where
    # it reaches `enough_s`.
    post = linear_fill(levels.post, wl.p, wl.free)

    def plain(r: int) -> Callable[[int], float]:
        return lambda x: fill[r] + m * (wl.e[r] + wl.a * (wl.lo[r] + x))

    busy, share = _linear_fill_at([plain(r) for r in range(inputs.pp)], m * wl.a, wl.free)
    if enough_s is not None and busy + post >= enough_s:
        return busy, post
    # Where no rank needs recompute at its share of the plain optimum, that optimum is the
    # answer: every busy level is at least its plain level (recompute >= 0, rounding is
    # monotone), and at that share they are the same floats (x + 0.0 == x), so the least
    # max of the busy levels is attained there. Each curve is read at one point only.
    if all(curve[x] == 0.0 for curve, x in zip(wl.extra, share, strict=True)):
        return busy, post
    size = len(wl.xs)
    # lower envelopes base_r + slope * x of the levels (the recompute curve is >= 0)
    busy_base = [fill[r] + m * (wl.e[r] + wl.a * wl.lo[r]) for r in range(inputs.pp)]
    busy = water_fill([_Lazy(f, size) for f in levels.busy], wl.free, (busy_base, m * wl.a))
    return busy, post


def layer_rank_floors_s(
    inputs: PartitionInputs, *, per_stage: bool, drain: bool | None = None
) -> tuple[float, float] | None:
    """(busy, post) floors that respect whole layers for any list of layers (the middle ones
    need not be equal: DeepSeek-V3's dense first layers), None with fewer than 3 layers or one
    rank. integer_rank_floors_s's argument without its recompute term, each middle layer at
    its own cost, and a drain for split-backward schedules too:

    The first layer sits in stage 0 and the last in stage S - 1 (their ranks are known); rank
    r holds D_r of the N middle layers (sum D_r = N), each one r can hold ("reachable"). Layer
    i lies in a stage s with s <= i (stages 0 .. s - 1 each hold a layer before it): every
    stage of rank r is r or later (interleaved r + k pp, zbv r and 2 pp - 1 - r), so r
    reaches only middle layers i >= r. With `per_stage` (the configuration's own schedule and
    vpp): also i <= s + L - S (the stages after s each hold a layer after it) for some stage
    s of r, and D_r >= r's stages less stage 0 / S - 1 (each holds a middle layer).

    Every action of rank r waits for a forward through stages 0 .. r - 1 (fill_r of
    rank_edges) and r runs them one at a time, each at least its layers' cheapest times, so
    for every partition and schedule the makespan is at least each of
        fill_r + m (E_r + sum of r's layer works)                     (its busy chain),
        fill_r + sum over r's layers of (m work - k_r wg) + idrain_r  (up to its last I / B),
        fill_r + m (E_r + sum of r's layer works) + drain_r           (`drain`: no split),
    with a layer's work its fw + cheapest input-grad bw + weight-grad bw (wg), E_r the first
    / last layer's work on r, drain_r of rank_edges. The second: a rank's last input-grad
    backward (B or I) is on stage r in every schedule of planner.schedules with split
    backward (zb-h1, zbv) and some stage >= r in the others; at most k_r = min(r + 1, m)
    weight-gradient actions per stage follow it (zb-h1 at every vpp defers r + 1, zbv r on
    its second stage and r + 1 on its first; none without split: tests/planner/search/
    test_layer_floor.py counts them in the generated orders), so every other action of r
    runs before it; the same micro-batch's input-grad backward then runs through stages r - 1 ..
    0 (idrain_r: the first layer's cheapest input-grad bw, r - 1 middle layers' and r p2p
    hops, as rank_edges counts its drain). The post floor is Q_r (the ends' post on r) plus
    r's layers' post times. Each level is nondecreasing in D_r when each sum is over the D_r
    least values of r's reachable layers (m work - k_r wg >= 0 as k_r <= m), so
    water-filling one layer at a time onto the rank whose level grows least gives their
    least max over integer D exactly (water_fill). `drain` None: where inputs.schedule has
    no split backward. Without `per_stage` the floor holds for every schedule and vpp of the
    group whose first and last layers sit on the same ranks (all but zbv, whose last stage is
    on rank 0). For identical middle layers and `drain` it is integer_rank_floors_s without
    the recompute term."""
    n_layers, pp, n_st = inputs.num_layers, inputs.pp, inputs.num_stages
    if n_layers < 3 or pp < 2:
        return None
    if drain is None:
        drain = inputs.schedule not in SPLIT_BACKWARD
    m = inputs.num_microbatches
    lo = [0] * pp
    if per_stage:
        for s in range(1, n_st - 1):
            lo[inputs.stage_rank[s]] += 1
    spans = _reachable(inputs, per_stage=per_stage)
    runs = _middle_runs(inputs)
    counts = [[_overlap(spans[r], run.first, run.last) for run in runs] for r in range(pp)]
    free = n_layers - 2 - sum(lo)
    if free < 0 or any(sum(counts[r]) < lo[r] for r in range(pp)):
        return None  # no partition (some stage would be empty)
    if free > sum(sum(counts[r]) - lo[r] for r in range(pp)):
        return None
    ends = ((0, inputs.stage_rank[0]), (n_layers - 1, inputs.stage_rank[n_st - 1]))
    inflight = inputs.coheld if per_stage else group_inflight(inputs)
    stages = rank_stages(inputs.stage_rank)
    fill = rank_edges_s(inputs, drain)  # with the B drain where `drain`
    idrain = _input_grad_drains(inputs)
    wg = inputs.bw_weight_s
    busy_levels, post_levels = [], []
    for r in range(pp):
        mine = [i for i, rank in ends if rank == r]
        held = list(zip(runs, counts[r], strict=True))
        e = sum(_layer_work(inputs, i) for i in mine)
        busy = _cheapest(fill[r] + m * e, [(m * run.work, c) for run, c in held], lo[r])
        if not drain:
            k = min(r + 1, m)
            split_e = sum(m * _layer_work(inputs, i) - k * wg[i] for i in mine)
            values = [(m * run.work - k * run.wg, c) for run, c in held]
            split = _cheapest(fill[r] + split_e + idrain[r], values, lo[r])
            busy = list(map(max, busy, split))
        least = min(inflight[s] for s in stages[r])
        room = inputs.cap_bytes - inputs.fixed_bytes
        room -= sum(
            inputs.static_bytes[i] + inflight[s] * min(inputs.activation_bytes[i])
            for i, s in ((0, 0), (n_layers - 1, n_st - 1))
            if inputs.stage_rank[s] == r
        )
        forced = _forced_recompute_s(inputs, spans[r], least, room, lo[r], len(busy))
        if forced is not None:
            busy = [b + m * f for b, f in zip(busy, forced, strict=True)]
        busy_levels.append(busy)
        q = sum(inputs.post_s[i] for i in mine)
        post_levels.append(_cheapest(q, [(run.post, c) for run, c in held], lo[r]))
    return water_fill(busy_levels, free), water_fill(post_levels, free)


def _forced_recompute_s(
    inputs: PartitionInputs,
    spans: list[tuple[int, int]],
    least: int,
    room: float,
    lo: int,
    size: int,
) -> list[float] | None:
    """Per D = lo .. lo + size - 1: a lower bound of the extra input-grad backward time (one
    micro-batch) that recompute must add for any D middle layers of `spans` to fit a rank
    whose stages each hold at least `least` micro-batches at once and whose memory left for
    its middle layers is `room` (cap less fixed bytes less the first / last layer's static and
    cheapest activation bytes if on it); None where no D needs any (the bound is then 0).

    Layer l at in-flight count I in mode k takes static_l + I act_{l,k} bytes (the peak of
    layer_rank_floors_s's memory model, as in _recompute_curve) and bw_{l,k} - bw_{l,b} more
    time than in its fastest mode b (least act among the fastest; the busy level counts
    bw_{l,b}). With I >= `least` on every stage of the rank, putting each layer at I = least
    only lowers its bytes in every mode, so every choice that fits still fits: the least
    extra time there is at most the true one. There, a chosen set S must free
        need(S) = sum_{l in S} (static_l + least act_{l,b}) - room
    bytes, at most least (act_{l,b} - act_{l,k}) per layer (capacity_l) and at most rho
    bytes per second of extra time, rho the best least (act_{l,b} - act_{l,k}) /
    (bw_{l,k} - bw_{l,b}) of the layers of `spans` (an LP relaxation: a layer's recompute
    may be fractional). need(S) is at least N(D), the sum of the D least (static_l + least
    act_{l,b}), less room, and the capacity of S at most the sum of the D largest
    capacity_l: the extra time is at least max(0, N(D)) / rho, inf where N(D) exceeds that
    capacity. Whole layers: the q layers S recomputes free at most the sum of the q largest
    capacity_l, so q is at least the least q whose sum reaches N(D), and their extra time is
    at least the sum of the q least c_l (a layer's least extra time in a mode that shrinks
    it). The true least extra time is nondecreasing in D (from a choice for D + 1 layers
    drop one: its bytes are >= 0, the rest still fits at no more time), so the running
    maximum over D of these bounds is one too, and is nondecreasing: what water-filling
    needs."""
    ks = sorted({MODE_INDEX[mode] for mode in inputs.allowed_modes}) or [0]
    needs: list[float] = []
    capacity: list[float] = []
    costs: list[float] = []  # per layer that some mode shrinks, its least extra time
    rho = 0.0
    kinds: dict[tuple[float, tuple[float, float, float], tuple[float, float, float]], int] = {}
    for first, last in spans:
        for i in range(first, last + 1):
            key = (inputs.static_bytes[i], inputs.bw_input_s[i], inputs.activation_bytes[i])
            kinds[key] = kinds.get(key, 0) + 1
    for (static, bw, act), count in kinds.items():
        b = min(ks, key=lambda k: (bw[k], act[k]))
        needs += [static + least * act[b]] * count
        capacity += [least * (act[b] - min(act[k] for k in ks))] * count
        shrink = [k for k in ks if act[k] < act[b]]
        if shrink:
            costs += [min(bw[k] - bw[b] for k in shrink)] * count
        for k in shrink:
            rho = max(rho, least * (act[b] - act[k]) / (bw[k] - bw[b]))
    needs.sort()
    capacity.sort(reverse=True)
    costs.sort()
    need = list(itertools.accumulate(needs, initial=0.0))
    freeable = list(itertools.accumulate(capacity, initial=0.0))
    cheapest = list(itertools.accumulate(costs, initial=0.0))
    if need[min(lo + size - 1, len(needs))] <= room:
        return None
    out, level = [], 0.0
    for d in range(lo, lo + size):
        short = need[d] - room
        if short > 0.0:
            tol = 1e-9 * max(1.0, short)
            q = bisect.bisect_left(freeable, short - tol, hi=d + 1)  # layers recomputed
            if q > d or q >= len(cheapest) or rho <= 0.0:
                level = math.inf
            else:
                level = max(level, short / rho, cheapest[q])
        out.append(level)
    return out


def _cheapest(base: float, values: list[tuple[float, int]], lo: int) -> list[float]:
    """base + the sum of the x least of `values` ((value, how many times) pairs), for x = lo
    .. their count."""
    flat: list[float] = []
    for v, c in sorted(values):
        flat += [v] * c
    return list(itertools.accumulate(flat, initial=base))[lo:]


class _Run(NamedTuple):
    """Consecutive middle layers [first, last] of equal work, weight-grad bw and post."""

    first: int
    last: int
    work: float  # fw + cheapest input-grad bw + weight-grad bw
    wg: float  # weight-grad bw
    post: float


def _middle_runs(inputs: PartitionInputs) -> list[_Run]:
    """The middle layers as maximal _Runs."""
    runs: list[_Run] = []
    for i in range(1, inputs.num_layers - 1):
        key = (_layer_work(inputs, i), inputs.bw_weight_s[i], inputs.post_s[i])
        if runs and runs[-1][2:] == key:
            runs[-1] = runs[-1]._replace(last=i)
        else:
            runs.append(_Run(i, i, *key))
    return runs


def _overlap(spans: list[tuple[int, int]], a: int, b: int) -> int:
    """How many layers of [a, b] the disjoint inclusive `spans` hold."""
    return sum(max(0, min(b, hi) - max(a, lo) + 1) for lo, hi in spans)


def _input_grad_drains(inputs: PartitionInputs) -> list[float]:
    """Per rank r, a lower bound of an input-grad backward through stages r - 1 .. 0: the
    first layer's cheapest input-grad bw, r - 1 middle layers' (each stage 1 .. r - 1 holds
    one) and r of the cheapest p2p hops (rank_edges' drain, without weight gradients)."""
    chains = edge_chains(inputs)
    if chains is None:
        return [0.0] * inputs.pp
    i0 = min(inputs.bw_input_s[0])
    im = min(map(min, inputs.bw_input_s[1:-1]))
    return [0.0] + [i0 + (r - 1) * im + r * chains.hop for r in range(1, inputs.pp)]


def _layer_work(inputs: PartitionInputs, layer: int) -> float:
    return inputs.fw_s[layer] + min(inputs.bw_input_s[layer]) + inputs.bw_weight_s[layer]


def _reachable(inputs: PartitionInputs, *, per_stage: bool) -> list[list[tuple[int, int]]]:
    """Per rank, the middle layers it can hold (layer_rank_floors_s) as disjoint inclusive
    spans, ascending: i >= r, and with `per_stage` s <= i <= s + L - S for one of its
    stages s."""
    n_layers, pp, n_st = inputs.num_layers, inputs.pp, inputs.num_stages
    if not per_stage:
        return [[(max(1, r), n_layers - 2)] for r in range(pp)]
    slack = n_layers - n_st
    starts: list[list[int]] = [[] for _ in range(pp)]
    for s, rank in enumerate(inputs.stage_rank):
        starts[rank].append(s)  # ascending
    out = []
    for stages in starts:
        spans: list[tuple[int, int]] = []
        for s in stages:
            first, last = max(s, 1), min(s + slack, n_layers - 2)
            if spans and first <= spans[-1][1] + 1:
                spans[-1] = (spans[-1][0], max(spans[-1][1], last))
            elif first <= last:
                spans.append((first, last))
        out.append(spans)
    return out


def linear_fill(levels: Sequence[Callable[[int], float]], slope: float, total: int) -> float:
    """water_fill for levels that are linear in x, levels[r](x) = levels[r](0) + slope * x up
    to rounding (slope >= 0), without reading each one step by step: the fractional water
    level L (sum_r max(0, L - base_r) = slope * total) has at most `total` steps at or below
    it (floor((L - b_r) / slope) per rank), so they are among the `total` smallest; each rank
    starts with those less one (rounding) and a heap takes the rest, at most 2 per rank. The
    same value as the step-by-step greedy (tests/planner/search/test_linear_fill.py)."""
    return _linear_fill_at(levels, slope, total)[0]


def _linear_fill_at(
    levels: Sequence[Callable[[int], float]], slope: float, total: int
) -> tuple[float, list[int]]:
    """linear_fill's value and the counts x (sum x = total) that attain it."""
    base = [f(0) for f in levels]
    if total <= 0 or slope <= 0.0:  # nothing to place, or constant levels
        x = [0] * len(levels)
        if levels:
            x[0] = max(total, 0)  # constant levels: any placement attains max(base)
        return max(base), x
    order = sorted(base)
    acc, level = 0.0, order[0]
    for k, b in enumerate(order, 1):
        acc += b
        level = (slope * total + acc) / k
        if k == len(order) or order[k] >= level:
            break
    x = [max(0, math.floor((level - b) / slope) - 1) for b in base]
    heap = [(levels[r](x[r] + 1), r) for r in range(len(levels))]
    heapq.heapify(heap)  # ties go to the lowest rank, as in water_fill
    for _ in range(total - sum(x)):
        _, r = heapq.heappop(heap)
        x[r] += 1
        heapq.heappush(heap, (levels[r](x[r] + 1), r))
    return max(f(x[r]) for r, f in enumerate(levels)), x


@dataclass(frozen=True)
class RankLevels:
    """Per rank r of a GPT-shaped model (integer_rank_floors_s), its busy and post floors as
    functions of x = the middle layers it holds beyond its least (whole.lo[r]), x in
    whole.xs; both nondecreasing in x. `fill`: each rank's edges (rank_edges_s), the
    constant part of its busy level."""

    whole: _Whole
    fill: list[float]
    busy: tuple[Callable[[int], float], ...]
    post: tuple[Callable[[int], float], ...]


def rank_levels(
    inputs: PartitionInputs, *, per_stage: bool, drain: bool | None = None
) -> RankLevels | None:
    """The RankLevels of a GPT-shaped model (`drain` as in integer_rank_floors_s); None
    otherwise."""
    wl = _whole_layers(inputs, per_stage=per_stage)
    if wl is None:
        return None
    m = inputs.num_microbatches
    fill = rank_edges_s(inputs, drain)

    def busy_at(r: int) -> Callable[[int], float]:
        return lambda x: fill[r] + m * (wl.e[r] + wl.a * (wl.lo[r] + x) + wl.extra[r][x])

    def post_at(r: int) -> Callable[[int], float]:
        return lambda x: wl.q[r] + wl.p * (wl.lo[r] + x)

    ranks = range(inputs.pp)
    busy, post = tuple(busy_at(r) for r in ranks), tuple(post_at(r) for r in ranks)
    return RankLevels(wl, fill, busy, post)


def _same_middle(inputs: PartitionInputs, fields: tuple[str, ...]) -> bool:
    """Every layer between the first and the last has layer 1's value in each field (a
    tuple count: C speed, the sweep checks hundreds of configurations)."""
    n = inputs.num_layers - 2
    for name in fields:
        values = getattr(inputs, name)
        if values[1:-1].count(values[1]) != n:
            return False
    return True


@dataclass(frozen=True)
class _Whole:
    a: float  # fw + cheapest bw of one middle layer
    p: float  # its post time
    e: list[float]  # per rank: the end layers' fw + cheapest bw
    q: list[float]  # per rank: the end layers' post time
    lo: list[int]  # per rank: middle layers it must hold
    free: int  # middle layers beyond the minimums
    xs: range  # 0 .. free
    curves: Callable[[], list[Sequence[float]]]  # builds `extra`

    @cached_property
    def extra(self) -> list[Sequence[float]]:
        """Per rank, per x: the least recompute time to fit lo + x layers (built when first
        read: a floor that the layers' work alone settles never needs it)."""
        return self.curves()


_WHOLE: PerObject[dict[bool, _Whole | None]] = PerObject()  # inputs -> per_stage -> _Whole


def _whole_layers(inputs: PartitionInputs, *, per_stage: bool) -> _Whole | None:
    """The whole-layer floors' levels of `inputs`, once per live PartitionInputs and
    `per_stage` (planner.memo: keyed by identity, not by hashing its tuples)."""
    known = _WHOLE.get(inputs, dict)
    if per_stage not in known:
        known[per_stage] = _build_whole_layers(inputs, per_stage=per_stage)
    return known[per_stage]


def _build_whole_layers(inputs: PartitionInputs, *, per_stage: bool) -> _Whole | None:
    n_layers, pp, n_st = inputs.num_layers, inputs.pp, inputs.num_stages
    if n_layers < 3:
        return None
    mid = range(1, n_layers - 1)

    def sig(i: int) -> tuple[float, float, float, float]:
        return (inputs.fw_s[i], min(inputs.bw_input_s[i]), inputs.bw_weight_s[i], inputs.post_s[i])

    if not _same_middle(inputs, ("fw_s", "bw_weight_s", "post_s")):
        return None
    if not _same_middle(inputs, ("bw_input_s",)):  # equal triples, or at least equal minima
        cheapest = min(inputs.bw_input_s[1])
        if any(min(inputs.bw_input_s[i]) != cheapest for i in mid):
            return None
    f, bi, w, p = sig(1)
    e, q = [0.0] * pp, [0.0] * pp
    ends = ((0, 0), (n_layers - 1, n_st - 1))
    for layer, s in ends:
        rank = inputs.stage_rank[s]
        e[rank] += inputs.fw_s[layer] + min(inputs.bw_input_s[layer]) + inputs.bw_weight_s[layer]
        q[rank] += inputs.post_s[layer]
    lo = [0] * pp
    if per_stage:
        for s, rank in enumerate(inputs.stage_rank):
            if s not in (0, n_st - 1):
                lo[rank] += 1
    free = len(mid) - sum(lo)
    if free < 0:
        return None
    xs = range(free + 1)

    def curves() -> list[Sequence[float]]:
        if not _same_middle(inputs, ("bw_input_s", "activation_bytes", "static_bytes")):
            return [[0.0] * len(xs) for _ in range(pp)]
        if per_stage:
            return list(_recompute_curves(inputs, inputs.coheld, lo, free))
        # group floor: the in-flight counts every schedule of the group reaches
        return list(_recompute_curves(inputs, group_inflight(inputs), [0] * pp, free))

    return _Whole(f + bi + w, p, e, q, lo, free, xs, curves)


def _recompute_curves(
    inputs: PartitionInputs, inflight: tuple[int, ...], lo: list[int], free: int
) -> list[_Curve]:
    """_recompute_curve of every rank r (with lo[r]) at these in-flight counts, the parts
    they share computed once."""
    n_st = inputs.num_stages
    stages = rank_stages(inputs.stage_rank)
    bw, act = inputs.bw_input_s[1], inputs.activation_bytes[1]
    ks = sorted({MODE_INDEX[mode] for mode in inputs.allowed_modes}) or [0]
    base = min(ks, key=lambda k: (bw[k], act[k]))
    options = mode_options(
        tuple((act[base] - act[k], bw[k] - bw[base]) for k in ks if act[k] < act[base])
    )
    ends = [0.0] * inputs.pp  # the first / last layer's bytes on their ranks
    for layer, s in ((0, 0), (inputs.num_layers - 1, n_st - 1)):
        a = min(inputs.activation_bytes[layer])
        ends[inputs.stage_rank[s]] += inputs.static_bytes[layer] + inflight[s] * a
    room = inputs.cap_bytes - inputs.fixed_bytes
    static = inputs.static_bytes[1]
    return [
        _recompute_curve(
            [inflight[s] for s in stages[r] if s not in (0, n_st - 1)],
            min(inflight[s] for s in stages[r]),
            room - ends[r],
            static,
            act[base],
            options,
            lo[r],
            free,
        )
        for r in range(inputs.pp)
    ]


def _recompute_curve(
    held: list[int],
    least: int,
    room: float,
    static: float,
    act_base: float,
    options: tuple[tuple[float, float], ...],
    lo: int,
    free: int,
) -> _Curve:
    """For x = 0 .. free: the least extra input-grad backward time (one micro-batch) over
    whole-layer recompute choices that let lo + x middle layers fit a rank (inf if none
    does) in
        fixed + ends + sum_l (static + I_l act(mode_l)) <= cap,
    `held`: the in-flight counts of the rank's stages but stage 0 / S - 1, `least` the least
    of all its stages', `room` = cap - fixed - ends, `act_base` a middle layer's bytes in its
    fastest mode, `options` the other modes (mode_options).
    Each stage of the rank but stage 0 / S - 1 holds one middle layer at its own in-flight
    count I_s; the other middle layers are put at the rank's least I (moving a layer there
    never grows its bytes in any mode, so this only makes the rank look smaller); ends are the
    first / last layer's static and cheapest activation bytes if on this rank. Solved exactly
    over whole layers by integer_curve (it replaced an LP relaxation, which let a fraction of
    a layer recompute: up to one layer's full recompute, 1-2 % of a memory-bound step, below
    the optimum)."""
    # groups: (in-flight count, layers); the last one (the free layers) grows with x
    groups = [(i, 1) for i in held[:lo]]
    extra_layers = lo - len(groups)  # lo beyond the stages (does not happen: lo = stages)
    need0 = sum(n * (static + i * act_base) for i, n in groups) - room
    per_free = static + least * act_base
    fixed = tuple(sorted((i for i, n in groups for _ in range(n)), reverse=True))
    return integer_curve(need0, per_free, fixed, least, options, free + extra_layers, extra_layers)


def mode_options(
    raw: tuple[tuple[float, float], ...],
) -> tuple[tuple[float, float], ...]:
    """The recompute modes worth using instead of the fastest one, as (activation bytes saved
    per in-flight micro-batch, seconds added): those no other mode beats in both, by bytes
    saved, largest first."""
    kept = [
        (d, c)
        for d, c in raw
        if not any((d2 >= d and c2 <= c) and (d2, c2) != (d, c) for d2, c2 in raw)
    ]
    return tuple(sorted(set(kept), reverse=True))


@lru_cache(maxsize=4096)
def integer_curve(
    need0: float,
    per_free: float,
    fixed: tuple[int, ...],
    least: int,
    options: tuple[tuple[float, float], ...],
    top: int,
    start: int,
) -> _Curve:
    """For x = 0 .. top - start: the least extra seconds (one micro-batch) over *whole-layer*
    recompute choices that free `need0 + (x + start) * per_free` bytes, with one layer at each
    in-flight count of `fixed` and x + start more at `least` (<= every fixed count). A layer
    at in-flight count I in a mode saving d bytes per micro-batch frees I * d.

    Exact over integers for up to two useful modes (none, selective, full: the fastest is the
    base, `options` the other two): for given counts F (mode 1, the larger saving) and S
    (mode 2) the bytes freed are largest when mode 1 takes the F layers of highest in-flight
    count and mode 2 the next S (rearrangement inequality), so the optimum is the least
    F c1 + S c2 over F with S the smallest count that frees enough (bisection on the sorted
    counts' prefix sums). Never below the LP (fractional-layer) relaxation it replaces: a
    layer's recompute is not divisible, and for memory-bound configurations one layer's full
    recompute is 1-2 % of the step. Values are computed when first read (_Curve)."""
    # the levels for x are a prefix of those for top (least <= every fixed count): one
    # prefix-sum array serves every x
    prefix = list(itertools.accumulate((*fixed, *([least] * top)), initial=0))
    return _Curve(
        lambda x: least_recompute(
            need0 + (x + start) * per_free, prefix, len(fixed) + x + start, options
        ),
        top - start + 1,
    )


class _Lazy(Sequence[float]):
    """values[x] = fn(x) for x in 0 .. size - 1, each computed once, when first read: the
    water-filling reads each rank's levels only up to about its share of the layers."""

    def __init__(self, fn: Callable[[int], float], size: int) -> None:
        self._fn, self._size = fn, size
        self._memo: dict[int, float] = {}

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, x: int) -> float: ...
    @overload
    def __getitem__(self, x: slice) -> Sequence[float]: ...
    def __getitem__(self, x: int | slice) -> float | Sequence[float]:
        if isinstance(x, slice):
            return [self[i] for i in range(*x.indices(self._size))]
        if not 0 <= x < self._size:
            raise IndexError(x)
        v = self._memo.get(x)
        if v is None:
            v = self._memo[x] = self._fn(x)
        return v


class _Curve(_Lazy):
    """A recompute curve (integer_curve). Nondecreasing in x: from a choice for x + 1 layers,
    drop one layer at the least in-flight count (one in the base mode if any: the bytes freed
    stay, the need falls by per_free; else a recomputed one: it freed least * d <= least *
    act(base) <= per_free bytes) and the rest still fits x layers, at no more time."""


def least_recompute(
    need: float, prefix: list[int], n: int, options: tuple[tuple[float, float], ...]
) -> float:
    """Least seconds to free `need` bytes with the first n whole layers, `prefix` the prefix
    sums of their in-flight counts sorted descending."""
    tol = 1e-9 * max(1.0, abs(need))
    if need <= tol:
        return 0.0
    if not options:
        return float("inf")
    (d1, c1), rest = options[0], options[1:]
    if d1 * prefix[n] < need - tol:  # every layer in the mode that saves most is not enough
        return float("inf")
    if not rest:  # the fewest layers, those of highest in-flight count first
        return bisect.bisect_left(prefix, (need - tol) / d1, lo=0, hi=n + 1) * c1
    best = float("inf")
    for f in range(n + 1):
        cost1 = f * c1
        if cost1 >= best:
            break
        left = need - d1 * prefix[f]
        if left <= tol:
            best = cost1
            break
        d2, c2 = rest[0]
        target = prefix[f] + (left - tol) / d2
        k = bisect.bisect_left(prefix, target, lo=f, hi=n + 1)
        if k <= n:
            best = min(best, cost1 + (k - f) * c2)
    return best


def water_fill(
    levels: Sequence[Sequence[float]],
    total: int,
    envelope: tuple[list[float], float] | None = None,
) -> float:
    """min over integer x >= 0, sum x = total, of max_r levels[r][x_r] (each nondecreasing):
    the `total` smallest steps of the merged sequences, taken greedily.

    `envelope` (base_r, slope), with levels[r][x] >= base_r + slope * x, starts the greedy
    part way: below a threshold T whose envelope counts sum to at most `total`, every step
    (level <= T) is among the `total` smallest, so each rank starts at its count of them
    (binary search on its levels) and the heap takes the rest. The result is the same: it
    is max(the total-th smallest step, the largest levels[r][0]), whichever steps of equal
    value are taken. Used where ranks take WARM_START_STEPS steps or more on average (with
    fewer, the binary searches cost what they save)."""
    x = [0] * len(levels)
    if envelope is not None and envelope[1] > 0 and total >= WARM_START_STEPS * len(levels):
        x = _warm_start(levels, total, *envelope)
    heap = [(lv[x[r] + 1], r) for r, lv in enumerate(levels) if x[r] + 1 < len(lv)]
    heapq.heapify(heap)  # ties go to the lowest rank, as a scan in rank order would
    for _ in range(total - sum(x)):
        _, r = heapq.heappop(heap)
        x[r] += 1
        if x[r] + 1 < len(levels[r]):
            heapq.heappush(heap, (levels[r][x[r] + 1], r))
    return max(levels[r][x[r]] for r in range(len(levels)))


def _warm_start(
    levels: Sequence[Sequence[float]], total: int, base: list[float], slope: float
) -> list[int]:
    """Per rank, how many of its steps are <= T (see water_fill), T such that they number
    at most `total`; all zeros if rounding leaves too many."""
    pp = len(levels)
    threshold = (slope * total + sum(base)) / pp - 2 * slope
    for _ in range(2 * pp + 4):  # the envelope count with clamping can exceed the estimate
        if sum(max(0, math.floor((threshold - b) / slope)) for b in base) <= total:
            break
        threshold -= slope
    counts = []
    for r, lv in enumerate(levels):
        # past the envelope's count every level is above the threshold (+2: rounding)
        top = min(len(lv) - 1, max(0, math.floor((threshold - base[r]) / slope)) + 2)
        lo, hi = 0, top  # the largest x in [0, top] with x == 0 or lv[x] <= threshold
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if lv[mid] <= threshold:
                lo = mid
            else:
                hi = mid - 1
        if lo == top and top + 1 < len(lv) and lv[top + 1] <= threshold:
            return [0] * pp  # the envelope was off: the plain greedy
        counts.append(lo)
    return counts if sum(counts) <= total else [0] * pp


def group_inflight(inputs: PartitionInputs) -> tuple[int, ...]:
    """Per stage: a lower bound of the peak in-flight micro-batches of *every* stage on the same
    rank, for every schedule and vpp of the configuration's group (closed form, no schedule is
    generated). Non-zbv schedules (gpipe, 1f1b, zb-h1, interleaved-1f1b at any vpp): rank r
    runs min(m, pp - r) forwards before its first backward on each of its stages' chunks
    (torch's warm-up: pp - r - 1 forwards, then one more before the first backward; gpipe runs
    all m), so each of its stages holds at least min(m, pp - r). zbv: the second chunk of rank r
    (stage 2 pp - 1 - r) holds min(m, r + 1), the first chunk at least as many. Checked against
    planner.schedules.peak_inflight (tests/planner/search/test_group_floor.py)."""
    least = least_inflight(inputs.schedule, inputs.pp, inputs.num_microbatches)
    return tuple(least(s, r) for s, r in enumerate(inputs.stage_rank))


def least_inflight(schedule: str, pp: int, m: int) -> Callable[[int, int], int]:
    """group_inflight's closed form as (stage, rank) -> count, for building PartitionInputs
    without generating the schedule (planner.cost.partition_inputs(given_inflight=...))."""
    if schedule == "zbv":
        return lambda s, r: min(m, r + 1)
    return lambda s, r: min(m, pp - r)


@dataclass(frozen=True)
class EdgeChains:
    """The layer terms of the fill and drain chains (rank_edges): what they read of a
    configuration's PartitionInputs. None of them reads pp, dp, ZeRO or the schedule's order."""

    f0: float  # the first layer's fw
    fm: float  # the least middle layer's fw
    b0: float  # the first layer's cheapest input-grad + weight-grad backward
    bm: float  # the least middle layer's
    hop: float  # a lower bound of every boundary's p2p time (0.0 is always valid)


def edge_chains(inputs: PartitionInputs, *, hop: bool = True) -> EdgeChains | None:
    """The EdgeChains of `inputs`, with the cheapest p2p of any boundary where `hop` (a
    stage's p2p is its last layer's; the last layer ends no boundary), else 0.0; None with
    fewer than 3 layers (no middle layer: the chains are 0)."""
    if inputs.num_layers < 3:
        return None
    middle = zip(inputs.bw_input_s[1:-1], inputs.bw_weight_s[1:-1], strict=True)
    return EdgeChains(
        f0=inputs.fw_s[0],
        fm=min(inputs.fw_s[1:-1]),
        b0=min(inputs.bw_input_s[0]) + inputs.bw_weight_s[0],
        bm=min(min(bi) + w for bi, w in middle),
        hop=min(inputs.p2p_s[:-1], default=0.0) if hop else 0.0,
    )


def rank_edges(chains: EdgeChains | None, *, pp: int, drain: bool) -> list[float]:
    """Per rank r, what every path through all of r's actions adds before them (the fill) and,
    with `drain`, after them: 0 for rank 0, f0 + (r - 1) fm + r hop (+ b0 + (r - 1) bm + r hop)
    for r >= 1, whatever the partition and vpp; all 0 without chains.

    Fill, for every schedule of a group: every stage of rank r is stage r or later
    (interleaved: r + k pp; zbv: r and 2 pp - 1 - r), so each of its actions depends on some
    micro-batch's forward through stages 0 .. r - 1, which sit on ranks 0 .. r - 1: stage 0
    holds the first layer and each of stages 1 .. r - 1 (< S - 1) at least one middle layer.
    The chain crosses the boundaries 0|1 .. r-1|r, each between two ranks (stage i < pp sits
    on rank i in every schedule), each at least the cheapest p2p.

    Drain, only for schedules without split backward (gpipe, 1f1b, interleaved-1f1b: every
    backward is one B action, no W may trail it; not zb-h1 / zbv, whose W actions may run
    after the last input-grad backward): each B of stage s on a rank follows that rank's F of
    the same micro-batch and stage, so a rank's last action is a B, of some micro-batch j on a
    stage s >= r of r, and the B of j on stages s - 1, ..., 0 each wait for the one above, so
    they all run after it: stages r - 1 .. 1 each hold at least one middle layer and stage 0
    the first layer, a B is at least the layers' cheapest input-grad plus weight-grad
    backward, and the chain crosses r boundaries again.

    The makespan is a longest path (planner.schedules.simulate): with both, this is the path
    "F through stages 0 .. r - 1, every action of r, B back through r - 1 .. 0" of
    paths.seed_cuts; per-action overheads (>= 0) are left out."""
    if chains is None:
        return [0.0] * pp
    c = chains
    out = [0.0]
    for r in range(1, pp):
        edge = c.f0 + (r - 1) * c.fm + r * c.hop
        if drain:
            edge += c.b0 + (r - 1) * c.bm + r * c.hop
        out.append(edge)
    return out


def rank_edges_s(inputs: PartitionInputs, drain: bool | None = None) -> list[float]:
    """rank_edges of `inputs` (`drain` None: where inputs.schedule has no split backward)."""
    if drain is None:
        drain = inputs.schedule not in SPLIT_BACKWARD
    return rank_edges(edge_chains(inputs), pp=inputs.pp, drain=drain)


def group_memory_floor_bytes(inputs: PartitionInputs) -> float:
    """Valid for every schedule and vpp of the same (tp, pp, dp, mbs, ZeRO, sp): each stage
    holds at least one micro-batch's activations."""
    static = sum(inputs.static_bytes)
    act = sum(map(min, inputs.activation_bytes))
    return inputs.fixed_bytes + (static + act) / inputs.pp


def group_time_floor_s(
    inputs: PartitionInputs, enough_s: float | None = None, *, drain: bool = False
) -> float:
    """Valid for every schedule and vpp of the group: the busiest rank's average work and
    micro-batch 0's chain, plus the average post time; then, unless that alone reaches
    `enough_s` (the incumbent: the group is pruned either way), the whole-layer rank floors
    (integer_rank_floors_s for a GPT-shaped model, else layer_rank_floors_s; most of this
    function's cost), with each rank's drain where `drain` (the caller's promise: no member
    of the group splits its backward)."""
    w = work_s(inputs)
    pipeline = max(inputs.num_microbatches * w / inputs.pp, chain_s(inputs))
    floor = pipeline + sum(inputs.post_s) / inputs.pp
    if enough_s is not None and floor >= enough_s:
        return floor
    whole = integer_rank_floors_s(inputs, per_stage=False, enough_s=enough_s, drain=drain)
    if whole is None:
        whole = layer_rank_floors_s(inputs, per_stage=False, drain=drain)
    if whole is not None:
        floor = max(floor, max(pipeline, whole[0]) + whole[1])
    return floor


def last_rank_bound_s(w: float, *, m: int, pp: int) -> float:
    """gpipe / 1f1b: with a = the last rank's work per micro-batch, the path "F0 through the
    other stages, all of the last rank's actions, B(m-1) back" is at least (m - 1) a + W, and
    some other rank is busy at least m (W - a) / (pp - 1); minimised over a (the two meet):
    a = W (m - pp + 1) / ((m - 1)(pp - 1) + m), bound (m - 1) a + W. With uniform stages this
    is the exact (m + pp - 1) W / pp."""
    if pp == 1:
        return m * w
    a = max(0.0, w * (m - pp + 1) / ((m - 1) * (pp - 1) + m))
    return (m - 1) * a + w


def cut_floor_s(inputs: PartitionInputs, cuts: Sequence[PathCut]) -> float | None:
    """A whole-layer floor of the step time from path cuts (None unless GPT-shaped, as in
    integer_rank_floors_s). Each cut c is a path, so for every partition

        makespan >= len_c(d) = beta_c + sum_s alpha_{c,s} d_s

    with d_s the middle layers in stage s (at least lo_s: 1, or 0 in the stages that hold the
    first / last layer), alpha_{c,s} = F fw + B (bi + w) + I bi + W w of one middle layer
    (cheapest input-grad bw bi), beta_c the first / last layer's terms plus every boundary
    crossed times the cheapest p2p. Per rank, sum_{s on r} alpha_s d_s >= sum alpha_s lo_s +
    gamma_{c,r} x_r with gamma_{c,r} = min_{s on r} alpha_{c,s}, x_r = D_r - lo_r; keeping only
    the rank with the largest gamma (the others are >= 0), each cut is an increasing function of
    one x_r. So the makespan >= min over integer x >= 0, sum x = N - sum lo, of
    max_r g_r(x_r), g_r = the max of rank r's cut functions: water-filling one layer at a time
    onto the rank whose g grows least is exact for a max of nondecreasing functions. The post
    floor of integer_rank_floors_s is added."""
    whole = integer_rank_floors_s(inputs, per_stage=True)
    wl = _whole_layers(inputs, per_stage=True)
    if whole is None or wl is None:
        return None
    pp = inputs.pp
    per_rank: list[list[tuple[float, float, float]]] = [[] for _ in range(pp)]
    constant = 0.0
    known = _CUT_TERMS.get(inputs, dict)
    for c in cuts:
        term = known.get(c)
        if term is None:
            term = known[c] = _cut_term(inputs, c)
        top, beta, gamma, times = term
        if top < 0:
            constant = max(constant, beta)
            continue
        per_rank[top].append((beta, gamma, times))

    def level(r: int) -> Callable[[int], float]:
        # recompute time forced by memory, passed at least `times` times; nondecreasing in x
        # (gamma > 0, times >= 0, the curve is nondecreasing): what water-filling needs
        rows, extra = per_rank[r], wl.extra[r]
        return lambda x: max((b + g * x + t * extra[x] for b, g, t in rows), default=-math.inf)

    pipeline = water_fill([_Lazy(level(r), len(wl.xs)) for r in range(pp)], wl.free)
    return max(constant, whole[0], pipeline) + whole[1]


# inputs -> path cut -> its cut_floor_s term (_cut_term): a configuration's floor is asked
# again as its cuts grow (planner.search.exact._cut_settles, twice per visit), each cut's term
# computed once
_CUT_TERMS: PerObject[dict[PathCut, tuple[int, float, float, float]]] = PerObject()


def _cut_term(inputs: PartitionInputs, c: PathCut) -> tuple[int, float, float, float]:
    """cut_floor_s's term of one cut: (the rank r with the largest gamma_{c,r}, beta_c,
    gamma_{c,r}, the least count of input-grad passes over r's stages); the rank is -1 where
    no gamma is positive (the cut is then the constant beta_c)."""
    n_layers, n_st, pp = inputs.num_layers, inputs.num_stages, inputs.pp
    f, bi, w = inputs.fw_s[1], min(inputs.bw_input_s[1]), inputs.bw_weight_s[1]
    p2p = min(inputs.p2p_s[:-1])
    ends = ((0, 0), (n_layers - 1, n_st - 1))
    # per-action overhead: a constant per cut, 0 without overhead (the length's terms are
    # then all 0.0)
    overhead = inputs.overhead_durations if any(inputs.stage_overhead_s) else None
    fbw = bi + w

    def coef(fw: float, b_in: float, b_w: float, s: int) -> float:
        return c.f[s] * fw + c.b[s] * (b_in + b_w) + c.i[s] * b_in + c.w[s] * b_w

    # coef(f, bi, w, s) of every stage, written out (the same sums in the same order)
    alpha = [
        cf * f + cb * fbw + ci * bi + cw * w
        for cf, cb, ci, cw in zip(c.f, c.b, c.i, c.w, strict=True)
    ]
    # sum of alpha_s lo_s: lo_s is 1 on every stage but the first and the last (0)
    beta = sum(c.x) * p2p + sum(alpha[1:-1])
    if overhead is not None:
        beta += c.length_s(overhead)
    for layer, s in ends:
        b_in = min(inputs.bw_input_s[layer])
        beta += coef(inputs.fw_s[layer], b_in, inputs.bw_weight_s[layer], s)
    gamma = [float("inf")] * pp
    times = [float("inf")] * pp  # least count of input-grad passes over the rank's stages
    for rank, a, cb, ci in zip(inputs.stage_rank, alpha, c.b, c.i, strict=True):
        if a < gamma[rank]:
            gamma[rank] = a
        if cb + ci < times[rank]:
            times[rank] = cb + ci
    top = max(range(pp), key=gamma.__getitem__)
    if gamma[top] <= 0.0:
        return -1, beta, 0.0, 0.0
    return top, beta, gamma[top], times[top]
