"""Heuristic partitions: CP-SAT's hints, the first incumbents, and the min-memory probe.

- `balanced`: a contiguous split minimising the largest per-rank work (binary search on the
  bottleneck over prefix sums, the classic linear-partition greedy), for one mode everywhere.
- `repaired`: start from the fastest mode and, while a rank is over the cap, switch the layer
  of that rank with the best activation-bytes saved per second added to its next mode.
- `min_memory`: the least-activation mode everywhere, split to balance per-rank bytes; its peak
  is what the infeasibility diagnosis reports.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Callable
from functools import lru_cache

from planner.cost import MODE_INDEX, PartitionInputs
from planner.memo import PerObject
from planner.schedules import ActionKind, rank_stages
from planner.search.domains import counted_run
from planner.search.model import layer_runs
from planner.search.partition import Partition
from planner.specs.base import RecomputeMode

# Bisection steps of the balanced split's bottleneck (_split): 2^-40 of the total work, far
# below any step-time difference the simulator resolves.
BISECTION_STEPS = 40
# Re-splits of `reweighted` on the repaired modes' layer times: each costs one split and one
# repair of the ranks whose layers changed.
REWEIGHT_ROUNDS = 3


@lru_cache(maxsize=512)
def _split(weights: tuple[float, ...], stages: int) -> tuple[int, ...]:
    """Bounds of a contiguous split of `weights` into `stages` non-empty parts that keeps the
    largest part small: the greedy fill under a cap (each part takes layers while they fit,
    and opens early only where the later parts would otherwise run out of layers), at the
    least cap found by bisection. A cap the fill meets is lowered at once to the largest part
    it made (the fill makes the same parts under that cap), and the bisection stops when a cap
    just below that part (by the bisection's resolution) fails. Cached: the configurations of
    one group share their layers' weights and often their stage count."""
    n = len(weights)

    def fill(cap: float) -> tuple[tuple[int, ...], float] | None:
        """The fill's bounds and its largest part, or None where the last part is over cap."""
        bounds = [0]
        acc = widest = 0.0
        for i, w in enumerate(weights):
            left = n - i  # layers not yet placed, including i
            open_after = stages - len(bounds)  # stages still to open after the current one
            if i > bounds[-1] and (acc + w > cap or left <= open_after):
                bounds.append(i)
                widest = max(widest, acc)
                acc = 0.0
            acc += w
        if len(bounds) != stages or acc > cap * (1 + 1e-12):
            return None
        return (*bounds, n), max(widest, acc)

    lo, hi = max(weights), sum(weights)
    step = (hi - lo) * 2.0**-BISECTION_STEPS
    got = fill(hi)
    if got is None:  # fewer layers than stages
        return tuple(round(i * n / stages) for i in range(stages + 1))
    best, hi = got
    for _ in range(2 * BISECTION_STEPS):
        if hi - lo <= step:
            break
        below = fill(hi - step)  # the least cap, up to the resolution, where this fails
        if below is None:
            break
        best, hi = below
        mid = (lo + hi) / 2
        got = fill(mid)
        if got is None:
            lo = mid
        else:
            best, hi = got
    return best


def _stage_weights(inputs: PartitionInputs, per_layer: Callable[[int], float]) -> list[float]:
    # Stages of one rank share its time; weigh layers by their rank-level cost. With vpp > 1
    # the split still balances stages, which balances ranks when stages are equal.
    return [per_layer(i) for i in range(inputs.num_layers)]


def balanced(inputs: PartitionInputs, mode: RecomputeMode) -> Partition:
    k = MODE_INDEX[mode]
    weights = _stage_weights(
        inputs, lambda i: inputs.fw_s[i] + inputs.bw_input_s[i][k] + inputs.bw_weight_s[i]
    )
    return Partition(_split(tuple(weights), inputs.num_stages), (mode,) * inputs.num_layers)


def min_memory(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> Partition:
    def act(i: int) -> float:
        return min(inputs.activation_bytes[i][MODE_INDEX[m]] for m in modes)

    choice: list[RecomputeMode] = [
        min(modes, key=lambda m, i=i: inputs.activation_bytes[i][MODE_INDEX[m]])  # type: ignore[misc]
        for i in range(inputs.num_layers)
    ]
    peak = max(inputs.inflight)
    weights = _stage_weights(inputs, lambda i: inputs.static_bytes[i] + peak * act(i))
    return Partition(_split(tuple(weights), inputs.num_stages), tuple(choice))


def repaired(
    inputs: PartitionInputs, bounds: tuple[int, ...], modes: tuple[RecomputeMode, ...]
) -> Partition:
    """Fastest modes first, then trade time for memory on each rank over the cap: while the
    rank is over, step its layer with the most bytes saved per second added (the first of
    equals) to a heavier mode (_rank_modes; against the rank's held points where it holds
    several chunks: _held_modes). Ranks do not share memory, so each is repaired on
    its own and remembered per (stages, layers) it holds: the hill climb's and cutting
    planes' neighbours change two ranks, the others come from the cache. (Where a rank
    cannot fit, the partition is infeasible whatever the other ranks choose.)"""
    order = tuple(sorted(modes, key=lambda m: MODE_INDEX[m]))  # none, selective, full
    current = [0] * inputs.num_layers  # index into `order`
    spans: list[list[tuple[int, int, int]]] = [[] for _ in range(inputs.pp)]
    for s in range(inputs.num_stages):
        spans[inputs.stage_rank[s]].append((s, bounds[s], bounds[s + 1]))
    memo = _REPAIRS.get(inputs, dict)
    run_of = _RUN_OF.get(inputs, lambda: _run_of(inputs))
    inflight = inputs.inflight
    for r in range(inputs.pp):
        # what the repair reads of each stage: its in-flight count and the (run, count) pieces
        # of its layers (layers of one run are equal in every number), so that stages of the
        # same shape elsewhere in the model share the repair
        shapes: list[tuple[int, ...]] = []
        for s, lo, hi in spans[r]:
            g = run_of[lo]
            if run_of[hi - 1] == g:  # one run (runs are contiguous)
                shapes.append((inflight[s], g, hi - lo))
            else:
                shapes.append((inflight[s], *_pieces(run_of, lo, hi)))
        # a rank with several held points (several chunks) is repaired against its own
        # points (_held_modes), which no other rank shares
        several = len(inputs.rank_points[r]) > 1
        # (the last stage's rank is also charged the loss temporary)
        holds_last = spans[r][-1][0] == inputs.num_stages - 1
        key = (order, r if several else -1, tuple(shapes), holds_last)
        choice = memo.get(key)
        starts = [lo for _, lo, _ in spans[r]]
        if choice is None:  # kept as (stage of the rank, layer offset in the stage, mode)
            repair = _held_modes if several else _rank_modes
            choice = memo[key] = tuple(
                (k, i - starts[k], c)
                for i, c in repair(inputs, order, spans[r])
                for k in [bisect.bisect_right(starts, i) - 1]
            )
        for k, offset, c in choice:
            current[starts[k] + offset] = c
    return Partition(bounds, tuple(map(order.__getitem__, current)))


def _run_of(inputs: PartitionInputs) -> list[int]:
    """Each layer's run (planner.search.model.layer_runs)."""
    return [g for g, run in enumerate(layer_runs(inputs)) for _ in range(run.count)]


def _pieces(run_of: list[int], lo: int, hi: int) -> tuple[int, ...]:
    """(run, count) of each run in layers lo .. hi - 1, flattened."""
    out: list[int] = []
    for i in range(lo, hi):
        if out and out[-2] == run_of[i]:
            out[-1] += 1
        else:
            out += (run_of[i], 1)
    return tuple(out)


_RUN_OF: PerObject[list[int]] = PerObject()
# per PartitionInputs: (modes, the shapes of a rank's stages) -> its choice, as (stage index
# in the rank, layer offset in the stage, index into the modes)
_REPAIRS: PerObject[dict[tuple[object, ...], tuple[tuple[int, int, int], ...]]] = PerObject()


def _rank_modes(
    inputs: PartitionInputs, order: tuple[RecomputeMode, ...], spans: list[tuple[int, int, int]]
) -> tuple[tuple[int, int], ...]:
    """One rank's repair (see repaired): (layer, index into `order`) for the layers that do
    not stay in the fastest mode. The rank is charged what the scorer can charge it at most
    (planner.cost.partition's memory formula): each stage's activations at its peak in-flight
    count, plus the larger of the loss temporary (if it holds the last stage) and its
    recompute transient (act(none) - act(mode) of its largest recomputed layer), times
    1 + fragmentation. No held point holds more of a stage than its peak count, and each
    point's transient is one of those two, so a repair that fits this charge fits the
    scorer's. The rank's bytes are summed over its layers in layer order and its layers'
    next steps kept in a heap (ratio, then layer index: the same choice as a scan)."""
    ks = [MODE_INDEX[m] for m in order]
    stage_of = {i: s for s, lo, hi in spans for i in range(lo, hi)}
    layers = sorted(stage_of)
    current = dict.fromkeys(layers, 0)
    static, act, inflight = inputs.static_bytes, inputs.activation_bytes, inputs.inflight
    grow = 1.0 + inputs.fragmentation_fraction
    last = inputs.num_stages - 1
    loss = inputs.loss_bytes if any(s == last for s, _, _ in spans) else 0.0
    recompute = inputs.recompute_transient
    base = inputs.fixed_bytes + sum(static[i] for i in layers)

    def transient_of(i: int, c: int) -> float:
        """What recomputing layer i in mode order[c] holds again in its backward."""
        return act[i][0] - act[i][ks[c]] if recompute and ks[c] != 0 else 0.0

    transient = max((transient_of(i, 0) for i in layers), default=0.0)

    def held_bytes() -> float:
        held = 0.0
        for i in layers:
            held += inflight[stage_of[i]] * act[i][ks[current[i]]]
        return held

    def step(i: int) -> tuple[float, int, int] | None:
        """(-bytes saved per second added, layer, mode) of layer i's best heavier mode (the
        most bytes saved per second among the modes after its current one that save any: a
        mode that saves nothing, selective recompute where attention keeps no score matrix,
        is stepped over), None if none saves."""
        c = current[i]
        best: tuple[float, int, int] | None = None
        for nxt in range(c + 1, len(order)):
            saved = inflight[stage_of[i]] * (act[i][ks[c]] - act[i][ks[nxt]])
            if saved <= 0:
                continue
            cost = inputs.bw_input_s[i][ks[nxt]] - inputs.bw_input_s[i][ks[c]]
            key = (-(saved / max(cost, 1e-15)), i, nxt)
            if best is None or key < best:
                best = key
        return best

    heap = [st for i in layers if (st := step(i)) is not None]
    heapq.heapify(heap)
    cap = inputs.cap_bytes
    held = held_bytes()
    while base + grow * (held + max(loss, transient)) > cap and heap:
        _, best_i, nxt = heapq.heappop(heap)
        k0 = ks[current[best_i]]
        current[best_i] = nxt
        transient = max(transient, transient_of(best_i, nxt))
        following = step(best_i)
        if following is not None:
            heapq.heappush(heap, following)
        # the change of one layer's bytes; summed afresh in layer order near the cap, so
        # that the stop is decided on the same floats as a full sum
        held += inflight[stage_of[best_i]] * (act[best_i][ks[nxt]] - act[best_i][k0])
        if abs(base + grow * (held + max(loss, transient)) - cap) <= 1e-6 * cap:
            held = held_bytes()
    return tuple((i, c) for i, c in current.items() if c)


def _held_modes(
    inputs: PartitionInputs, order: tuple[RecomputeMode, ...], spans: list[tuple[int, int, int]]
) -> tuple[tuple[int, int], ...]:
    """_rank_modes for a rank holding several chunks, against its held points
    (PartitionInputs.rank_points: its peak is the largest of them, not the sum of its stages'
    peaks, which do not coincide; with interleaved-1f1b at pp = 16, vpp = 5 the sum is 1.7x the
    peak and recomputes layers that fit). While the largest point is over the cap, step the
    layer with the most bytes saved *at that point* per second added to a heavier mode, until
    that point fits (then the fullest again). Each
    point's bytes as the scorer counts them (planner.cost.memory.rank_activation_peak): the
    held activations, the larger of the loss temporary and the recompute transient of its
    stage (in a backward), times (1 + fragmentation). Where the sum of the stages' peaks fits
    (no point holds more of a stage than its peak), nothing is recomputed without reading the
    points."""
    ks = [MODE_INDEX[m] for m in order]
    rank = inputs.stage_rank[spans[0][0]]
    act, last = inputs.activation_bytes, inputs.num_stages - 1
    stage_of = {i: s for s, lo, hi in spans for i in range(lo, hi)}
    current = dict.fromkeys(stage_of, 0)
    base = inputs.fixed_bytes + sum(inputs.static_bytes[i] for i in stage_of)
    grow = 1.0 + inputs.fragmentation_fraction
    held_of = {s: sum(act[i][ks[0]] for i in range(lo, hi)) for s, lo, hi in spans}
    # per stage: the recompute transient, act(none) - act(mode) of its largest layer
    transient = {
        s: max((act[i][0] - act[i][ks[0]] for i in range(lo, hi)), default=0.0)
        for s, lo, hi in spans
    }
    peaks = sum(inputs.inflight[s] * b for s, b in held_of.items())
    most = max(inputs.loss_bytes, *transient.values())
    if base + grow * (peaks + most) <= inputs.cap_bytes:
        return ()
    points = inputs.rank_points[rank]
    stages = rank_stages(inputs.stage_rank)[rank]
    counts_of = [p.counts for p in points]
    loss = [
        inputs.loss_bytes if p.stage == last and p.phase is not ActionKind.W else 0.0
        for p in points
    ]
    # the stage whose transient a point's action holds (a backward), else None
    recomputing = [
        p.stage if p.phase in (ActionKind.B, ActionKind.I) and inputs.recompute_transient else None
        for p in points
    ]

    def fullest() -> tuple[int, float]:
        """(the point holding most, its bytes)."""
        per_slot = [held_of[st] for st in stages]
        totals = [
            sum(map(operator.mul, c, per_slot))
            + (loss[q] if (t := recomputing[q]) is None else max(loss[q], transient[t]))
            for q, c in enumerate(counts_of)
        ]
        q = max(range(len(totals)), key=totals.__getitem__)
        return q, base + grow * totals[q]

    def point_bytes(q: int) -> float:
        held: float = sum(map(operator.mul, counts_of[q], [held_of[st] for st in stages]))
        t = recomputing[q]
        return base + grow * (held + (loss[q] if t is None else max(loss[q], transient[t])))

    def step(i: int, n: int) -> tuple[float, int, int] | None:
        """(-bytes saved per second at a point holding n of i's stage, layer, mode)."""
        c, best = current[i], None
        for nxt in range(c + 1, len(order)):
            saved = n * (act[i][ks[c]] - act[i][ks[nxt]])
            if saved <= 0:
                continue
            cost = inputs.bw_input_s[i][ks[nxt]] - inputs.bw_input_s[i][ks[c]]
            key = (-(saved / max(cost, 1e-15)), i, nxt)
            if best is None or key < best:
                best = key
        return best

    cap = inputs.cap_bytes
    slot = {st: j for j, st in enumerate(stages)}
    while True:
        # the fullest point, then steps by what they save there until it fits (the other
        # points are read again only then: they change with every step, the fullest rarely)
        q, most_bytes = fullest()
        if most_bytes <= cap:
            break
        counts = counts_of[q]
        heap = [st for i, s in stage_of.items() if (st := step(i, counts[slot[s]])) is not None]
        if not heap:
            break  # nothing saves bytes at the fullest point: the rank cannot fit
        heapq.heapify(heap)
        while heap and point_bytes(q) > cap:
            _, i, nxt = heapq.heappop(heap)
            s = stage_of[i]
            held_of[s] -= act[i][ks[current[i]]] - act[i][ks[nxt]]
            current[i] = nxt
            transient[s] = max(transient[s], act[i][0] - act[i][ks[nxt]])
            following = step(i, counts[slot[s]])
            if following is not None:
                heapq.heappush(heap, following)
    return tuple((i, c) for i, c in current.items() if c)


def rank_balanced(inputs: PartitionInputs) -> list[tuple[int, ...]]:
    """Splits that give every pipeline rank the same number of the largest run's layers (a
    GPT's blocks; the remainder one each on the last ranks, or on the first), each rank's
    chunks as even as they can be (the larger ones first, or last); the layers before and
    after the run stay in the first and last stage. Only for schedules with several stages
    per rank, where a balanced split of the stages leaves the ranks unbalanced.

    Why: with two stages per rank, balancing the stages gives some ranks one block more
    than others (529.6B's tp = 4 pp = 21 zbv: 107 layers in 42 stages, 6 blocks on ranks
    0 and 20, 5 on the rest), and no one-boundary move of the hill climb fixes that (each
    changes two ranks' totals): it stopped at 43.82 s. Five blocks per rank, three in the
    first chunk and two in the second, repaired: 37.758 s, the optimum."""
    pp, n_st = inputs.pp, inputs.num_stages
    if n_st <= pp:
        return []
    run = layer_runs(inputs)[counted_run(inputs)]
    before, after = run.first, inputs.num_layers - run.first - run.count
    chunks = rank_stages(inputs.stage_rank)
    q, rem = divmod(run.count, pp)
    per_rank = [[q + (r >= pp - rem) for r in range(pp)], [q + (r < rem) for r in range(pp)]]
    levelled = _levelled(inputs, run.first, run.count, chunks)
    if levelled not in per_rank:
        per_rank.append(levelled)
    out: list[tuple[int, ...]] = []
    for blocks in per_rank:
        for larger_first in (True, False):
            counts = [0] * n_st
            for r, stages in enumerate(chunks):
                c, left = divmod(blocks[r], len(stages))
                sizes = [c + (k < left) for k in range(len(stages))]
                for s, size in zip(stages, sizes if larger_first else sizes[::-1], strict=True):
                    counts[s] = size
            counts[0] += before
            counts[-1] += after
            if min(counts) > 0:
                bounds = tuple(itertools.accumulate(counts, initial=0))
                if bounds not in out:
                    out.append(bounds)
    return out


def _levelled(
    inputs: PartitionInputs, first: int, count: int, chunks: tuple[tuple[int, ...], ...]
) -> list[int]:
    """Blocks per rank (of the run of `count` layers from `first`) that level the ranks' work
    with the layers outside the run counted: each block, one at a time, to the rank whose
    work (fw + cheapest backward input + weight pass) is least, the first of equals. The
    embedding and head weigh on the ranks of the first and last stage, which then hold
    fewer blocks (Qwen3-235B-A22B's zbv pp = 32: rank 0 holds both and one block, the
    others three)."""

    def work(i: int) -> float:
        return inputs.fw_s[i] + min(inputs.bw_input_s[i]) + inputs.bw_weight_s[i]

    last = inputs.num_stages - 1
    load = [0.0] * len(chunks)
    for r, stages in enumerate(chunks):
        if 0 in stages:
            load[r] += sum(work(i) for i in range(first))
        if last in stages:
            load[r] += sum(work(i) for i in range(first + count, inputs.num_layers))
    block = work(first)
    blocks = [0] * len(chunks)
    heap = [(w, r) for r, w in enumerate(load)]
    heapq.heapify(heap)
    for _ in range(count):
        w, r = heapq.heappop(heap)
        blocks[r] += 1
        heapq.heappush(heap, (w + block, r))
    return blocks


def hint_partitions(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...], extra: tuple[int, ...] | None
) -> tuple[Partition, ...]:
    """A few heuristic partitions; `extra` is another split to try (e.g. the cost model's
    balanced one)."""
    fastest = min(modes, key=lambda m: MODE_INDEX[m])
    splits = [balanced(inputs, fastest).bounds]
    if extra is not None and extra not in splits:
        splits.append(extra)
    splits += [b for b in rank_balanced(inputs) if b not in splits]
    out: list[Partition] = []
    for bounds in splits:
        out.append(repaired(inputs, bounds, modes))
        out.extend(Partition(bounds, (m,) * inputs.num_layers) for m in modes)
    out.extend(reweighted(inputs, out[0], modes))
    return tuple(dict.fromkeys(out))


def reweighted(
    inputs: PartitionInputs,
    start: Partition,
    modes: tuple[RecomputeMode, ...],
    rounds: int = REWEIGHT_ROUNDS,
) -> list[Partition]:
    """Splits balanced on the layer times of the last repair's modes, each repaired again
    (at most `rounds`, until a split repeats).

    Why: a split balanced for the fastest mode puts as many layers on the stages that hold
    the most micro-batches in flight (1F1B's first) as on the others, and its repair then
    buys their memory with recompute there, the critical rank's time. Weighing each layer
    by its time in the mode its repair chose moves layers off the recomputing stages, which
    need less recompute then. Qwen3-30B-A3B on 8 H100s, tp = 1 pp = 8 1F1B ZeRO-0: the
    balanced split repaired is 6.284 s, the first reweighted split 5.177 s, the exact
    optimum, without the hill climb (tests/planner/search/test_reweighted.py)."""
    out: list[Partition] = []
    seen = {start.bounds}
    current = start
    for _ in range(rounds):
        ks = [MODE_INDEX[m] for m in current.modes]
        weights = tuple(
            inputs.fw_s[i] + inputs.bw_input_s[i][ks[i]] + inputs.bw_weight_s[i]
            for i in range(inputs.num_layers)
        )
        bounds = _split(weights, inputs.num_stages)
        if bounds in seen:
            break
        seen.add(bounds)
        current = repaired(inputs, bounds, modes)
        out.append(current)
    return out


def quick_partition(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> Partition:
    """One cheap partition for the sweep, repaired: with several stages per rank the first
    rank-balanced split (every rank the same blocks, its larger chunk first), else balanced
    for the fastest mode.

    Why: balanced stages leave such ranks unbalanced (rank_balanced), and the sweep's
    incumbent prunes the groups after it only as well as its quick partitions score: on
    529.6B's tp = 4 pp = 21 zbv the balanced split scores 44.45 s, the rank-balanced one
    37.29 s (the optimum); where every rank holds one block per chunk or the stages already
    level the ranks (interleaved with many chunks), the two are the same split."""
    if inputs.num_stages > inputs.pp:
        splits = rank_balanced(inputs)
        if splits:
            return repaired(inputs, splits[0], modes)
    fastest = min(modes, key=lambda m: MODE_INDEX[m])
    return repaired(inputs, balanced(inputs, fastest).bounds, modes)


def quick_partitions(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]
) -> tuple[Partition, ...]:
    """The sweep's partitions of a configuration: quick_partition and, where its repair made
    some layer recompute (the configuration is memory-bound), its first reweighted split.

    Why: the repair buys memory with recompute on the stages holding the most micro-batches
    in flight, the critical rank's time, and the reweighted split moves layers off them;
    the sweep's incumbent prunes the groups after it only as well as these score.
    Qwen3-30B-A3B on 8 H100s: its winner (tp = 1 pp = 8 1F1B ZeRO-0) comes a tenth of the
    way through the sweep, quick_partition 6.284 s, the reweighted split 5.177 s (the
    optimum), which the improve pass found only after the sweep. Where nothing recomputes,
    the reweighted split is the balanced one again: one partition, no second repair."""
    quick = quick_partition(inputs, modes)
    fastest = min(modes, key=lambda m: MODE_INDEX[m])
    if all(m == fastest for m in quick.modes):
        return (quick,)
    return (quick, *reweighted(inputs, quick, modes, rounds=1))
