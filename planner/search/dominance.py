"""Configurations the search need not solve because another one is at least as good.

`mark_dominated` (objective time): within configurations of the same tp, pp, vpp, schedule,
micro-batch count and sequence parallelism, one whose every partition has a partition of
another no slower and no larger (`dominates` on the PartitionInputs, `modes_no_worse` on the
recompute modes) cannot hold a better plan than that other one. `mark_same_costs` (objective
bubble, where a faster configuration may have the larger bubble): configurations whose inputs
as their modes see them are equal have the same partitions and the same best, so one of each
class is kept. Both set the others' verdict to "dominated".
"""

from __future__ import annotations

import dataclasses

from planner.cost import MODE_INDEX, PartitionInputs
from planner.search.bounds import restricted
from planner.search.outcome import Entry


def mark_dominated(entries: list[Entry]) -> None:
    """Configurations with the same tp, pp, schedule and micro-batch count that differ in the
    ZeRO stage, cp's K/V exchange, the expert degrees (ep, etp), in (cp, dp, mbs) or in their
    recompute modes: drop those another one dominates (typically ZeRO-0 against ZeRO-1: same
    times or slower, more bytes; the costlier K/V exchange; cp = c at mbs b against cp = c / g,
    dp g at b / g, the same tokens per GPU and micro-batch without the K/V exchange's cost;
    under a framework that cannot mix modes, selective recompute against none where it saves
    no bytes: modes_no_worse)."""
    buckets: dict[tuple[object, ...], list[Entry]] = {}
    for e in entries:
        c = e.config
        key = (c.tp, c.pp, c.vpp, c.schedule, c.num_microbatches, c.sequence_parallel)
        buckets.setdefault(key, []).append(e)
    for group in buckets.values():
        for i, e in enumerate(group):
            for j, other in enumerate(group):
                if i == j or other.verdict == "dominated" or e.verdict != "pending":
                    continue
                if modes_no_worse(other, e) and dominates(other.inputs, e.inputs):
                    e.verdict = "dominated"


def mark_same_costs(entries: list[Entry]) -> None:
    """Objective bubble's dominance: it ranks a configuration by the bubble of its
    time-optimal partition, so a faster configuration may have the larger bubble and
    mark_dominated does not hold; but configurations whose inputs as their modes see them
    (bounds.restricted) are equal but for the modes' names have the same partitions, times
    and bytes, and the same best. Of each such class the last one is kept."""
    last: dict[PartitionInputs, Entry] = {}
    for e in entries:
        if e.verdict == "dominated":
            continue
        seen = dataclasses.replace(restricted(e.inputs, e.config.modes), allowed_modes=())
        twin = last.get(seen)
        if twin is not None and twin.verdict == "pending":
            twin.verdict = "dominated"
        last[seen] = e


def modes_no_worse(a: Entry, b: Entry) -> bool:
    """Every partition of b has one of a, with the same split, no slower and no larger in any
    layer (with dominates on the rest, a's best is at least as good as b's): b's modes are
    among a's, or both use one mode each and a's is, in every layer, no slower in backward, no
    larger in activation bytes, and holds no larger recompute transient (act(none) - act(mode),
    0 without recompute). The makespan is a longest path, nondecreasing in the
    durations, and each rank's peak is nondecreasing in the bytes."""
    ma, mb = a.config.modes, b.config.modes
    if set(mb) <= set(ma):
        return True
    if len(ma) != 1 or len(mb) != 1:
        return False
    ka, kb = MODE_INDEX[ma[0]], MODE_INDEX[mb[0]]
    none = MODE_INDEX["none"]
    x, y = a.inputs, b.inputs
    layers = zip(x.bw_input_s, x.activation_bytes, y.bw_input_s, y.activation_bytes, strict=True)
    for bw_a, act_a, bw_b, act_b in layers:
        if bw_a[ka] > bw_b[kb] or act_a[ka] > act_b[kb]:
            return False
        transient_a = act_a[none] - act_a[ka] if x.recompute_transient and ka != none else 0.0
        transient_b = act_b[none] - act_b[kb] if y.recompute_transient and kb != none else 0.0
        if transient_a > transient_b:
            return False
    return True


def dominates(a: PartitionInputs, b: PartitionInputs) -> bool:
    """Every partition is at least as fast and as small under `a` as under `b`: same schedule
    and layers, every per-layer time and byte count <= (the simulated makespan is a longest
    path, so it never decreases when a duration grows)."""
    if (a.schedule, a.pp, a.vpp, a.num_microbatches, a.inflight, a.stage_rank) != (
        b.schedule,
        b.pp,
        b.vpp,
        b.num_microbatches,
        b.inflight,
        b.stage_rank,
    ) or (a.cap_bytes, a.held_points, a.recompute_transient, a.fragmentation_fraction) != (
        b.cap_bytes,
        b.held_points,
        b.recompute_transient,
        b.fragmentation_fraction,
    ):
        return False
    if a.loss_bytes > b.loss_bytes:
        return False
    if a.fixed_bytes > b.fixed_bytes:
        return False
    flat = (
        (a.fw_s, b.fw_s),
        (a.bw_weight_s, b.bw_weight_s),
        (a.p2p_s, b.p2p_s),
        (a.static_bytes, b.static_bytes),
        (a.post_s, b.post_s),
    )
    if any(x > y for xs, ys in flat for x, y in zip(xs, ys, strict=True)):
        return False
    triples = ((a.bw_input_s, b.bw_input_s), (a.activation_bytes, b.activation_bytes))
    return all(
        x <= y
        for xs, ys in triples
        for tx, ty in zip(xs, ys, strict=True)
        for x, y in zip(tx, ty, strict=True)
    )
