"""hints.repaired (each rank repaired on its own, remembered per rank) against the plain
greedy it implements: fastest modes, then, while the fullest rank is over the cap, step that
rank's layer with the most bytes saved per second added (first of equals) to its next mode."""

from __future__ import annotations

import pytest

from planner.cost import MODE_INDEX, PartitionInputs
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

    def mem(r: int) -> float:
        total = inputs.fixed_bytes
        for i in range(inputs.num_layers):
            if rank[i] == r:
                a = inputs.activation_bytes[i][ks[cur[i]]]
                total += inputs.static_bytes[i] + inputs.inflight[stage[i]] * a
        return total

    while True:
        worst = max(range(inputs.pp), key=mem)
        if mem(worst) <= inputs.cap_bytes:
            break
        options = []
        for i in range(inputs.num_layers):
            if rank[i] != worst or cur[i] + 1 >= len(order):
                continue
            k0, k1 = ks[cur[i]], ks[cur[i] + 1]
            saved = inputs.inflight[stage[i]] * (
                inputs.activation_bytes[i][k0] - inputs.activation_bytes[i][k1]
            )
            cost = inputs.bw_input_s[i][k1] - inputs.bw_input_s[i][k0]
            if saved > 0:
                options.append((-(saved / max(cost, 1e-15)), i))
        if not options:
            break
        cur[min(options)[1]] += 1
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
