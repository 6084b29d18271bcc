"""Cheap lower bounds of one configuration, valid for every partition: they prune without CP-SAT.

Memory floor. The busiest rank holds at least the average over ranks:
    peak >= fixed + (sum_l static_l + min_s inflight_s * sum_l min_k act_{l,k}) / pp
and at least the largest single layer's static bytes on top of the fixed bytes.

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

from planner.cost import PartitionInputs


def memory_floor_bytes(inputs: PartitionInputs) -> float:
    static = sum(inputs.static_bytes)
    act = sum(min(a) for a in inputs.activation_bytes)
    avg = inputs.fixed_bytes + (static + min(inputs.inflight) * act) / inputs.pp
    return max(avg, inputs.fixed_bytes + max(inputs.static_bytes))


def work_s(inputs: PartitionInputs) -> float:
    """One micro-batch through every layer, forward and backward, cheapest recompute."""
    return sum(
        f + min(bi) + w
        for f, bi, w in zip(inputs.fw_s, inputs.bw_input_s, inputs.bw_weight_s, strict=True)
    )


def chain_s(inputs: PartitionInputs) -> float:
    """Micro-batch 0's forward through every layer and its input-gradient backward back: a
    dependency chain of every schedule (the weight-gradient part may run off the chain in the
    zero-bubble schedules, so it is left out)."""
    return sum(f + min(bi) for f, bi in zip(inputs.fw_s, inputs.bw_input_s, strict=True))


def time_floor_s(inputs: PartitionInputs) -> float:
    m, pp = inputs.num_microbatches, inputs.pp
    w = work_s(inputs)
    pipeline = max(m * w / pp, chain_s(inputs))
    if inputs.schedule in ("gpipe", "1f1b") and inputs.vpp == 1:
        fill = 1.0 - (1.0 - 1.0 / m) ** pp
        pipeline = max(pipeline, w / fill, last_rank_bound_s(w, m=m, pp=pp))
    post = sum(inputs.post_s) / pp
    whole = integer_rank_floors_s(inputs, per_stage=True)
    if whole is not None:
        pipeline, post = max(pipeline, whole[0]), max(post, whole[1])
    return pipeline + post


def integer_rank_floors_s(
    inputs: PartitionInputs, *, per_stage: bool
) -> tuple[float, float] | None:
    """(busy, post) floors that respect whole layers, for models whose layers between the first
    and the last are identical (a GPT: embedding, N equal blocks, head); None otherwise.

    The first layer always sits in stage 0 and the last in stage S - 1, so their ranks are
    known; each rank r holds D_r of the N middle layers, sum D_r = N, and with `per_stage` at
    least one layer per stage it holds (its stages, less stage 0 / S - 1 that already hold the
    first / last layer). For every partition and every schedule:
        makespan >= busy of each rank = m * (a D_r + E_r)   (the rank chain is a path),
        post     =  max_r (p D_r + Q_r)                     (step = makespan + slowest post),
    with a = one middle layer's fw + cheapest input-grad bw + weight-grad bw, p its post time,
    E_r / Q_r the first/last layer's share on rank r. Each is at least its minimum over integer
    D (given the constraints), found exactly by water-filling one layer at a time onto the rank
    whose maximum grows least (optimal for a max of increasing functions with unit steps).
    Without `per_stage` (valid for every vpp and schedule that keeps the end layers' ranks) the
    lower bounds are 0."""
    n_layers, pp = inputs.num_layers, inputs.pp
    if n_layers < 3:
        return None
    mid = range(1, n_layers - 1)

    def sig(i: int) -> tuple[float, float, float, float]:
        return (inputs.fw_s[i], min(inputs.bw_input_s[i]), inputs.bw_weight_s[i], inputs.post_s[i])

    if any(sig(i) != sig(1) for i in mid):
        return None
    f, bi, w, p = sig(1)
    last = n_layers - 1
    first_rank, last_rank = inputs.stage_rank[0], inputs.stage_rank[-1]
    busy0 = [0.0] * pp
    post0 = [0.0] * pp
    for layer, rank in ((0, first_rank), (last, last_rank)):
        busy0[rank] += (
            inputs.fw_s[layer] + min(inputs.bw_input_s[layer]) + inputs.bw_weight_s[layer]
        )
        post0[rank] += inputs.post_s[layer]
    lo = [0] * pp
    if per_stage:
        for s, rank in enumerate(inputs.stage_rank):
            if s not in (0, inputs.num_stages - 1):
                lo[rank] += 1
    if sum(lo) > len(mid):
        return None
    busy = _water_fill(f + bi + w, busy0, lo, len(mid))
    post = _water_fill(p, post0, lo, len(mid))
    return inputs.num_microbatches * busy, post


def _water_fill(slope: float, base: list[float], lo: list[int], total: int) -> float:
    """min over integer d >= lo, sum d = total, of max_r (base_r + slope d_r)."""
    level = [b + slope * k for b, k in zip(base, lo, strict=True)]
    for _ in range(total - sum(lo)):
        r = min(range(len(level)), key=level.__getitem__)
        level[r] += slope
    return max(level)


def group_memory_floor_bytes(inputs: PartitionInputs) -> float:
    """Valid for every schedule and vpp of the same (tp, pp, dp, mbs, ZeRO, sp): each stage
    holds at least one micro-batch's activations."""
    static = sum(inputs.static_bytes)
    act = sum(min(a) for a in inputs.activation_bytes)
    return inputs.fixed_bytes + (static + act) / inputs.pp


def group_time_floor_s(inputs: PartitionInputs) -> float:
    w = work_s(inputs)
    floor = max(inputs.num_microbatches * w / inputs.pp, chain_s(inputs))
    whole = integer_rank_floors_s(inputs, per_stage=False)
    if whole is not None:
        floor = max(floor, whole[0]) + whole[1]
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
