"""hints.repaired (each rank repaired on its own, remembered per rank) against the plain
greedy it implements: fastest modes, then, while the fullest rank is over the cap, step that
rank's layer with the most bytes saved per second added (first of equals) to the heavier mode
that saves most per second (modes that save nothing stepped over). A rank with one held point
counts its stages' in-flight peaks plus the larger of the loss temporary and its largest
recompute transient, times 1 + fragmentation (what the scorer can charge it at most); one
with several (interleaved, zbv) counts each held point
as the scorer does, and its steps save bytes at its fullest point until that point fits (then
the fullest again)."""

from __future__ import annotations

import pytest

from planner.cost import MODE_INDEX, PartitionInputs
from planner.schedules import ActionKind, HeldPoint, rank_stages
from planner.search.hints import repaired
from planner.search.partition import Partition, score
from planner.specs.base import RecomputeMode

from .cases import mixed_case


def plain_greedy(
    inputs: PartitionInputs, bounds: tuple[int, ...], modes: tuple[RecomputeMode, ...]
) -> Partition:
    order = sorted(modes, key=lambda m: MODE_INDEX[m])
    ks = [MODE_INDEX[m] for m in order]
    stage = [s for s in range(inputs.num_stages) for _ in range(bounds[s], bounds[s + 1])]
    rank = [inputs.stage_rank[s] for s in stage]
    cur = [0] * inputs.num_layers

    grow = 1.0 + inputs.fragmentation_fraction

    def point_mem(r: int, p: HeldPoint) -> float:
        slot = {st: j for j, st in enumerate(rank_stages(inputs.stage_rank)[r])}
        total, extra = inputs.fixed_bytes, 0.0
        if p.stage == inputs.num_stages - 1 and p.phase is not ActionKind.W:
            extra = inputs.loss_bytes
        for i in range(inputs.num_layers):
            if rank[i] == r:
                a = inputs.activation_bytes[i]
                total += inputs.static_bytes[i] + grow * p.counts[slot[stage[i]]] * a[ks[cur[i]]]
                recomputes = p.phase in (ActionKind.B, ActionKind.I) and stage[i] == p.stage
                if recomputes and inputs.recompute_transient and ks[cur[i]] != 0:
                    extra = max(extra, a[0] - a[ks[cur[i]]])
        return total + grow * extra

    def fullest(r: int) -> tuple[float, HeldPoint | None]:
        points = inputs.rank_points[r]
        if len(points) > 1:
            return max(((point_mem(r, p), p) for p in points), key=lambda t: t[0])
        # one held point: each stage at its peak count, plus the larger of the loss temporary
        # (the last stage's rank) and the largest recompute transient of the rank
        total, held = inputs.fixed_bytes, 0.0
        extra = inputs.loss_bytes if inputs.stage_rank[-1] == r else 0.0
        for i in range(inputs.num_layers):
            if rank[i] == r:
                a = inputs.activation_bytes[i]
                total += inputs.static_bytes[i]
                held += inputs.inflight[stage[i]] * a[ks[cur[i]]]
                if inputs.recompute_transient and ks[cur[i]] != 0:
                    extra = max(extra, a[0] - a[ks[cur[i]]])
        return total + grow * (held + extra), None

    stick: tuple[int, HeldPoint] | None = None  # a fullest point not fitting yet
    while True:
        if stick is not None and point_mem(*stick) > inputs.cap_bytes:
            worst, point = stick
        else:
            worst = max(range(inputs.pp), key=lambda r: fullest(r)[0])
            bytes_, point = fullest(worst)
            if bytes_ <= inputs.cap_bytes:
                break
            stick = None if point is None else (worst, point)
        slot = {st: j for j, st in enumerate(rank_stages(inputs.stage_rank)[worst])}
        options = []
        for i in range(inputs.num_layers):
            if rank[i] != worst:
                continue
            held = inputs.inflight[stage[i]] if point is None else point.counts[slot[stage[i]]]
            for nxt in range(cur[i] + 1, len(order)):
                k0, k1 = ks[cur[i]], ks[nxt]
                saved = held * (inputs.activation_bytes[i][k0] - inputs.activation_bytes[i][k1])
                cost = inputs.bw_input_s[i][k1] - inputs.bw_input_s[i][k0]
                if saved > 0:
                    options.append((-(saved / max(cost, 1e-15)), i, nxt))
        if not options:
            break
        _, i, nxt = min(options)
        cur[i] = nxt
    return Partition(bounds, tuple(order[c] for c in cur))


@pytest.mark.parametrize("seed", range(40))
def test_repaired_makes_the_plain_greedys_choice(seed: int) -> None:
    rng, inputs = mixed_case(31_000, seed)
    n, stages = inputs.num_layers, inputs.num_stages
    modes: tuple[RecomputeMode, ...] = ("none", "selective", "full")
    for _ in range(6):
        bounds = (0, *sorted(rng.sample(range(1, n), stages - 1)), n)
        for allowed in (modes, ("none", "full")):
            want = plain_greedy(inputs, bounds, allowed)
            got = repaired(inputs, bounds, allowed)
            again = repaired(inputs, bounds, allowed)  # from the per-rank cache
            assert got == again
            if score(inputs, want).feasible:
                assert got == want
            else:  # some rank cannot fit: infeasible whatever the others choose
                assert not score(inputs, got).feasible


@pytest.mark.parametrize("seed", range(30))
def test_a_mode_that_saves_nothing_is_stepped_over(seed: int) -> None:
    """Selective recompute that saves no bytes (act(selective) = act(none), a flash-attention
    profile) and costs time: the repair must go on to full where the cap needs it, so it
    fits wherever every layer in full fits (the fullest point's bytes fall with every step
    until it fits; with all layers full nothing is left to save). Without the recompute
    transient, which the one-chunk repair does not count (the scorer does)."""
    rng, base = mixed_case(32_000, seed)
    act = tuple((a[0], a[0], a[2]) for a in base.activation_bytes)
    bw = tuple((b[0], b[0] * 1.05, b[2]) for b in base.bw_input_s)
    inputs = PartitionInputs(
        **{
            **base.__dict__,
            "activation_bytes": act,
            "bw_input_s": bw,
            "recompute_transient": False,
        }
    )
    n, stages = inputs.num_layers, inputs.num_stages
    modes: tuple[RecomputeMode, ...] = ("none", "selective", "full")
    for _ in range(6):
        bounds = (0, *sorted(rng.sample(range(1, n), stages - 1)), n)
        full = Partition(bounds, ("full",) * n)
        got = repaired(inputs, bounds, modes)
        assert "selective" not in got.modes
        if score(inputs, full).feasible:
            assert score(inputs, got).feasible
