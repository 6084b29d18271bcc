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
    return pipeline + sum(inputs.post_s) / pp


def group_memory_floor_bytes(inputs: PartitionInputs) -> float:
    """Valid for every schedule and vpp of the same (tp, pp, dp, mbs, ZeRO, sp): each stage
    holds at least one micro-batch's activations."""
    static = sum(inputs.static_bytes)
    act = sum(min(a) for a in inputs.activation_bytes)
    return inputs.fixed_bytes + (static + act) / inputs.pp


def group_time_floor_s(inputs: PartitionInputs) -> float:
    w = work_s(inputs)
    return max(inputs.num_microbatches * w / inputs.pp, chain_s(inputs))


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
