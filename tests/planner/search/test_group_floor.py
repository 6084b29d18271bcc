"""The group floor (bounds.group_time_floor_s: fill chain, memory-forced recompute at the
in-flight counts every schedule of the group reaches) is the same for every non-zbv member of
a group and never exceeds any member's exhaustive optimum; its closed-form in-flight counts
never exceed the generated schedules' peak in-flight counts, and each rank holds them all at
one point of its timeline."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from planner.errors import SpecError
from planner.schedules import generate, peak_inflight, rank_held_points
from planner.schedules.ir import stage_to_rank
from planner.search.bounds import group_inflight, group_time_floor_s, time_floor_s
from planner.search.exhaustive import exhaustive_config
from planner.specs.base import ScheduleName

from .cases import ALL_SCHEDULES, MODES, as_member, gpt_inputs, pipeline_inputs


@pytest.mark.parametrize("pp", [2, 3, 4, 5, 8])
def test_group_inflight_is_below_every_schedules_peak(pp: int) -> None:
    for schedule, vpp in [*ALL_SCHEDULES, ("interleaved-1f1b", 4)]:
        for m in range(1, 33):
            base = as_member_shape(schedule, pp, vpp, m)
            if base is None:
                continue
            sched, ranks = base
            least = group_inflight_for(schedule, pp, vpp, m, ranks)
            inflight = peak_inflight(sched)
            for r in range(pp):
                on_rank = [inflight[s] for s in range(pp * vpp) if ranks[s] == r]
                # every stage of the rank holds at least the closed form
                assert min(on_rank) >= least[ranks.index(r)], (schedule, pp, vpp, m, r)
                # ... all at one moment of the rank's timeline (the memory floors charge the
                # rank the closed form on every stage at once: a lower bound of its peak)
                need = [least[s] for s in range(pp * vpp) if ranks[s] == r]
                assert any(
                    all(c >= n for c, n in zip(p.counts, need, strict=True))
                    for p in rank_held_points(sched)[r]
                ), (schedule, pp, vpp, m, r)


def as_member_shape(
    schedule: ScheduleName, pp: int, vpp: int, m: int
) -> tuple[object, tuple[int, ...]] | None:
    try:
        sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=m)
    except SpecError:
        return None
    return sched, tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp))


def group_inflight_for(
    schedule: ScheduleName, pp: int, vpp: int, m: int, ranks: tuple[int, ...]
) -> tuple[int, ...]:
    rng = random.Random(0)
    base = gpt_inputs(rng, "1f1b", 1)
    shaped = replace(base, schedule=schedule, pp=pp, vpp=vpp, num_microbatches=m, stage_rank=ranks)
    return group_inflight(shaped)


@pytest.mark.parametrize("seed", range(40))
def test_group_floor_never_exceeds_any_members_optimum(seed: int) -> None:
    rng = random.Random(7300 + seed)
    # pp = 2 with every schedule, or pp = 1..3 for the vpp = 1 schedules (and zbv where it fits)
    base = gpt_inputs(rng, "interleaved-1f1b" if seed % 2 else "1f1b", 2 if seed % 2 else 1)
    members = [x for s, v in ALL_SCHEDULES if (x := as_member(base, s, v)) is not None]
    non_zbv = {group_time_floor_s(x) for x in members if x.schedule != "zbv"}
    assert len(non_zbv) == 1  # one floor for the whole group, whichever member computes it
    group = non_zbv.pop()
    for x in members:
        best = exhaustive_config(x, modes=MODES).best
        if best is None:
            continue
        step = best.score.step_time_s
        assert group_time_floor_s(x) <= step * (1 + 1e-12), x.schedule
        if x.schedule != "zbv":
            assert group <= step * (1 + 1e-12), x.schedule


NO_SPLIT: list[tuple[ScheduleName, int]] = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("interleaved-1f1b", 2),
    ("interleaved-1f1b", 3),
]


@pytest.mark.parametrize("seed", range(30))
def test_the_drain_never_exceeds_any_non_split_members_optimum(seed: int) -> None:
    # Deeper pipelines than above (pp 3-4: the drain of rank r spans r - 1 middle stages), one
    # mode and the cap lifted so the exhaustive oracle sees every split; the group floor with
    # drain stands for gpipe, 1f1b and interleaved members, and each member's own floors
    # (time_floor_s, the count-domain levels) take it from their schedule.
    rng = random.Random(7700 + seed)
    pp = rng.choice([3, 4])
    n = rng.randint(pp, 2 * pp + 2)  # near one layer per stage: the drain is tight there
    m = rng.choice([pp, 2 * pp])
    p2p = rng.choice([0.0, 0.05])

    def layer() -> tuple[float, float, float, float]:
        return (rng.uniform(0.1, 1.0), rng.uniform(0.1, 3.0), rng.uniform(0, 1), p2p)

    block = layer()
    # half of the cases all layers equal (1F1B with one per stage: the floor is the optimum)
    ends = (block, block) if seed % 2 else (layer(), layer())
    rows = [ends[0], *([block] * (n - 2)), ends[1]]
    members = []
    for schedule, vpp in NO_SPLIT:
        if pp * vpp > n:
            continue
        members.append(
            pipeline_inputs(
                schedule,
                pp,
                vpp,
                m,
                fw=tuple(r[0] for r in rows),
                bw_input=tuple((r[1], r[1], r[1]) for r in rows),
                bw_weight=tuple(r[2] for r in rows),
                p2p=tuple(r[3] for r in rows),
                act=((1.0, 1.0, 1.0),) * n,
                static=(1.0,) * n,
                post=(0.1,) * n,
                cap=1e9,
                modes=("none",),
            )
        )
    group = group_time_floor_s(members[0], drain=True)
    for x in members:
        best = exhaustive_config(x, modes=("none",)).best
        assert best is not None
        step = best.score.step_time_s
        assert group <= step * (1 + 1e-12), x.schedule
        assert time_floor_s(x) <= step * (1 + 1e-12), x.schedule
