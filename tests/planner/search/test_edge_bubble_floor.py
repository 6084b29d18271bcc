"""The closed-form bubble floor of a group (planner.search.bubble_floor.group_bubble_floor:
E / (W_max + E) from each rank's fill and drain chains) is never above the least simulated
bubble of any partition of any member (brute force, the cap lifted), on pipelines near one
layer per stage, where the fill and drain chains are tight, and on every group of random
requests through the driver's per-kind terms (sweep_floors.group_edge_floor)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from planner.cost import PartitionInputs, partition_inputs, resolve_costs
from planner.errors import SpecError
from planner.search import sweep_floors
from planner.search.bounds import rank_edges, restricted
from planner.search.bubble_floor import edge_terms, group_bubble_floor
from planner.search.exhaustive import scored_partitions
from planner.search.kinds import kind_key
from planner.search.outcome import Outcome
from planner.search.space import enumerate_configs
from planner.specs.base import RecomputeMode
from planner.specs.model import ActionOverhead

from .cases import ALL_SCHEDULES, pipeline_inputs, sweep_grouped
from .random_requests import random_request

SPLIT = ("zb-h1", "zbv")
THREE: tuple[RecomputeMode, ...] = ("none", "selective", "full")


def _least_bubble(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> float:
    """The least simulated bubble of every partition, whatever the cap (brute force)."""
    free = dataclasses.replace(inputs, cap_bytes=float("inf"))
    return min(sc.score.bubble_fraction for sc in scored_partitions(free, modes=modes))


@pytest.mark.parametrize("seed", range(40))
def test_group_floor_is_below_every_members_least_bubble(seed: int) -> None:
    rng = random.Random(9100 + seed)
    pp = rng.choice([2, 3, 4])
    n = rng.randint(pp + 1, 2 * pp + 2)  # near one layer per stage: fill and drain are tight
    m = rng.choice([1, 2, pp, 2 * pp])
    p2p = rng.choice([0.0, 0.05])
    modes: tuple[RecomputeMode, ...] = rng.choice([("none",), THREE, ("full",)])
    overhead = rng.choice(
        [ActionOverhead(), ActionOverhead(f_s=0.02, b_s=0.03, i_s=0.02, w_s=0.02)]
    )

    def layer() -> tuple[float, tuple[float, float, float], float]:
        bi = rng.uniform(0.1, 2.0)
        return (rng.uniform(0.1, 1.0), (bi, bi * rng.uniform(1, 1.3), bi * 1.5), rng.uniform(0, 1))

    block = layer()
    ends = (block, block) if seed % 2 else (layer(), layer())
    # every third case heterogeneous middle layers: the terms take the least of them
    rows = [ends[0], *(layer() if seed % 3 == 0 else block for _ in range(n - 2)), ends[1]]
    members = []
    for schedule, vpp in ALL_SCHEDULES:
        if pp * vpp > n or (schedule == "zbv" and pp * 2 > n):
            continue
        try:
            x = pipeline_inputs(
                schedule,
                pp,
                vpp,
                m,
                fw=tuple(r[0] for r in rows),
                bw_input=tuple(r[1] for r in rows),
                bw_weight=tuple(r[2] for r in rows),
                p2p=(p2p,) * n,
                act=((1.0, 0.6, 0.2),) * n,
                static=(1.0,) * n,
                post=(0.1,) * n,
                cap=1e9,
                modes=modes,
            )
        except SpecError:  # a schedule that cannot run this m
            continue
        members.append(dataclasses.replace(x, action_overhead=overhead))
    assert members
    stages = max(x.num_stages for x in members)
    drain = all(x.schedule not in SPLIT for x in members)
    # the group's floor from one member's terms without p2p (what the driver caches per kind)
    group = group_bubble_floor(
        edge_terms(restricted(members[0], modes), hop=False),
        pp=pp,
        m=m,
        drain=drain,
        max_stages=stages,
    )
    assert group > 0.0  # every rank past the first waits for the first layer's forward
    for x in members:
        free = dataclasses.replace(x, cap_bytes=float("inf"))
        scores = [sc.score for sc in scored_partitions(free, modes=modes)]
        least = min(sc.bubble_fraction for sc in scores)
        # the per-rank step the floor rests on, M >= e_r + busy_r: tight on the last rank of
        # gpipe / 1f1b with one layer per stage and equal layers
        edges = rank_edges(
            edge_terms(restricted(x, modes)).chains, pp=pp, drain=x.schedule not in SPLIT
        )
        for sc in scores:
            for e, busy in zip(edges, sc.sim.busy_s, strict=True):
                assert e + busy <= sc.pipeline_s * (1 + 1e-12), (x.schedule, x.vpp)
        assert group <= least + 1e-12, (x.schedule, x.vpp)
        # each member's own floor (entry_edge_floor): with p2p, its own drain and stages
        own = group_bubble_floor(
            edge_terms(restricted(x, modes)),
            pp=pp,
            m=m,
            drain=x.schedule not in SPLIT,
            max_stages=x.num_stages,
        )
        assert group <= own * (1 + 1e-9) or not drain
        assert own <= least + 1e-12, (x.schedule, x.vpp)


def test_group_floor_on_every_group_of_random_requests() -> None:
    """The driver's floor of a group (one PartitionInputs per kind and modes, reused for every
    pp, dp and schedule of the kind) is at most every member's least bubble on the exactness
    bench's random requests, and the terms agree across the configurations of a kind."""
    checked = positive = 0
    for seed in range(12):
        request = random_request(random.Random(seed)).model_copy(update={"objective": "bubble"})
        src = resolve_costs(request)
        configs = list(enumerate_configs(request, num_layers=len(src.layers)))
        out = Outcome(entries=[], best=None, status="OPTIMAL")
        terms: dict[tuple[object, ...], object] = {}
        for members in sweep_grouped(configs):
            floor = sweep_floors.group_edge_floor(request, src, out, members, known=False)
            if floor is None:
                continue
            for cfg in members:
                inputs = partition_inputs(request, cfg.candidate(), source=src)
                own = edge_terms(restricted(inputs, cfg.modes), hop=False)
                key = (*kind_key(cfg), cfg.modes)
                assert terms.setdefault(key, own) == own, (seed, cfg)
                assert floor <= _least_bubble(inputs, cfg.modes) + 1e-12, (seed, cfg)
                checked += 1
                positive += floor > 0
    assert checked > 150 and positive > 50
