"""Each rank's held points against a brute-force replay of the schedule's timeline.

The replay here is written independently of planner.schedules.inflight: it simulates the
schedule with random durations, sorts each rank's timed actions by start time, and tracks the
set of (stage, micro-batch) activation sets alive (alive from the start of F until the end of
the last backward action on that stage: B, or W for split schedules), evaluating the bytes
alive during every action for random per-stage bytes and transients. Its maximum must equal the
max over the held points, for every schedule the planner generates.
"""

from __future__ import annotations

import random

import pytest

from planner.cost.memory import point_transient_bytes, rank_activation_peak
from planner.schedules import (
    ActionKind,
    StageDurations,
    coheld_counts,
    generate,
    held_points_of,
    inflight,
    kernel,
    peak_inflight,
    rank_held_points,
    rank_stages,
    simulate,
)
from planner.schedules.ir import Schedule
from planner.specs.base import ScheduleName

CASES: list[tuple[ScheduleName, int, int, int]] = [
    ("gpipe", 3, 1, 5),
    ("1f1b", 4, 1, 6),
    ("1f1b", 2, 1, 1),
    ("zb-h1", 3, 1, 6),
    ("zb-h1", 2, 2, 4),
    ("interleaved-1f1b", 2, 2, 8),
    ("interleaved-1f1b", 2, 3, 8),
    ("interleaved-1f1b", 4, 2, 8),
    ("interleaved-1f1b", 3, 3, 6),
    ("interleaved-1f1b", 4, 2, 2),
    ("zbv", 2, 2, 8),
    ("zbv", 4, 2, 5),
    ("zbv", 3, 2, 1),
]


def _durations(schedule: Schedule, rng: random.Random) -> StageDurations:
    n = schedule.num_stages
    w = tuple(rng.uniform(0.1, 1.0) for _ in range(n))
    return StageDurations(
        fw_s=tuple(rng.uniform(0.5, 2.0) for _ in range(n)),
        bw_s=tuple(x + rng.uniform(0.5, 2.0) for x in w),
        w_s=w,
        p2p_s=tuple(rng.uniform(0.0, 0.3) for _ in range(n - 1)),
    )


def _replay_peak(
    schedule: Schedule,
    rank: int,
    stage_bytes: list[float],
    rec: list[float],
    loss: float,
    rng: random.Random,
) -> float:
    """The most bytes alive on `rank` during any of its actions, by replaying its timeline."""
    timeline = simulate(schedule, _durations(schedule, rng)).timeline[rank]
    events = sorted(timeline, key=lambda t: (t.start_s, t.end_s))
    split = any(t.action.kind is ActionKind.W for t in events)
    release = ActionKind.W if split else ActionKind.B
    alive: set[tuple[int, int]] = set()
    last = schedule.num_stages - 1
    best = 0.0
    for t in events:
        a = t.action
        if a.kind is ActionKind.F:
            alive.add((a.stage, a.microbatch))
        assert a.kind is ActionKind.F or (a.stage, a.microbatch) in alive
        now = sum(stage_bytes[s] for s, _ in alive)
        if a.kind is ActionKind.F:
            extra = loss if a.stage == last else 0.0
        elif a.kind is ActionKind.W:
            extra = 0.0
        else:
            extra = max(rec[a.stage], loss if a.stage == last else 0.0)
        best = max(best, now + extra)
        if a.kind is release:
            alive.discard((a.stage, a.microbatch))
    return best


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-pp{c[1]}-v{c[2]}-m{c[3]}")
def test_held_points_peak_equals_the_replayed_timeline(
    case: tuple[ScheduleName, int, int, int],
) -> None:
    name, pp, vpp, m = case
    schedule = generate(name, pp=pp, vpp=vpp, num_microbatches=m)
    points = rank_held_points(schedule)
    stages = rank_stages(tuple(schedule.rank_of(s) for s in range(schedule.num_stages)))
    rng = random.Random(hash(case) & 0xFFFF)
    for trial in range(6):
        n = schedule.num_stages
        stage_bytes = [rng.uniform(1.0, 10.0) for _ in range(n)]
        # trial 0: no transients, the plain saved-activation peak
        rec = [0.0] * n if trial == 0 else [rng.uniform(0.0, 8.0) for _ in range(n)]
        loss = 0.0 if trial == 0 else rng.uniform(0.0, 12.0)
        for r in range(pp):
            peak = rank_activation_peak(
                points[r],
                stages[r],
                stage_bytes,
                recompute_bytes=rec,
                loss_stage=n - 1,
                loss_bytes=loss,
                fragmentation_fraction=0.0,
            )
            want = _replay_peak(schedule, r, stage_bytes, rec, loss, rng)
            assert peak.activations_bytes + peak.transient_bytes == pytest.approx(want), (r, trial)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-pp{c[1]}-v{c[2]}-m{c[3]}")
def test_timeline_peak_is_at_most_the_sum_of_stage_peaks(
    case: tuple[ScheduleName, int, int, int],
) -> None:
    name, pp, vpp, m = case
    schedule = generate(name, pp=pp, vpp=vpp, num_microbatches=m)
    peaks = peak_inflight(schedule)
    stage_rank = tuple(schedule.rank_of(s) for s in range(schedule.num_stages))
    stages = rank_stages(stage_rank)
    coheld = coheld_counts(rank_held_points(schedule), stage_rank)
    for r, pts in enumerate(rank_held_points(schedule)):
        for p in pts:
            assert all(c <= peaks[s] for c, s in zip(p.counts, stages[r], strict=True))
        # every stage reaches its own peak at one of the rank's points
        for j, s in enumerate(stages[r]):
            assert max(p.counts[j] for p in pts) == peaks[s]
        # the co-held counts are one point's
        assert tuple(coheld[s] for s in stages[r]) in {p.counts for p in pts}


def test_interleaved_first_rank_is_below_the_sum_of_its_chunk_peaks() -> None:
    # pp = 2, vpp = 2, m = 8: the chunks peak at 4 and 2 micro-batches, but never together:
    # rank 0 holds (3, 2) or (4, 1) at most (its order: 0F0 0F1 2F0 2F1 0F2 2B0 ...).
    schedule = generate("interleaved-1f1b", pp=2, vpp=2, num_microbatches=8)
    assert peak_inflight(schedule)[0::2] == (4, 2)
    assert {p.counts for p in rank_held_points(schedule)[0]} == {(3, 2), (4, 1)}


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1"])
def test_one_stage_per_rank_closed_form_matches_the_walk(name: ScheduleName) -> None:
    for pp in range(1, 7):
        for m in range(1, 13):
            if name == "zb-h1" and m % max(1, m // pp):
                continue  # torch's round-based order needs m % max(1, m // pp) == 0
            schedule = generate(name, pp=pp, vpp=1, num_microbatches=m)
            assert held_points_of(name, pp=pp, vpp=1, num_microbatches=m) == rank_held_points(
                schedule
            ), (pp, m)


def test_w_points_carry_no_transient_and_f_only_the_loss() -> None:
    schedule = generate("zbv", pp=2, vpp=2, num_microbatches=4)
    for pts in rank_held_points(schedule):
        for p in pts:
            t = point_transient_bytes(p, recompute_bytes=[5.0] * 4, loss_stage=3, loss_bytes=2.0)
            if p.phase is ActionKind.W:
                assert t == 0.0
            elif p.phase is ActionKind.F:
                assert t == (2.0 if p.stage == 3 else 0.0)
            else:
                assert t == 5.0


@pytest.mark.parametrize(
    ("name", "pp", "vpp", "m"),
    [
        ("gpipe", 3, 1, 5),
        ("1f1b", 4, 1, 9),
        ("zb-h1", 4, 1, 8),
        ("zbv", 3, 2, 7),
        ("zbv", 5, 2, 12),
        ("interleaved-1f1b", 2, 2, 6),
        ("interleaved-1f1b", 3, 3, 9),
        ("interleaved-1f1b", 4, 4, 8),
        ("interleaved-1f1b", 2, 7, 14),
        ("interleaved-1f1b", 8, 5, 32),
        ("interleaved-1f1b", 5, 8, 20),
        ("zb-h1", 4, 2, 8),
        ("zb-h1", 8, 3, 24),
        ("zb-h1", 3, 4, 12),
        ("zbv", 8, 2, 32),
        ("interleaved-1f1b", 16, 2, 64),
    ],
)
def test_the_c_walk_keeps_the_python_walks_points(name: str, pp: int, vpp: int, m: int) -> None:
    """The C walk (kernel.held_points: fronts kept as the actions arrive, then _undominated's
    selection and order in C) gives the points of the Python walk over every held vector, in
    the same order, with the same stages and phases."""
    if not kernel.available():
        pytest.skip("the C kernel was not built")
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    assert inflight._walk(sched) == inflight._walk_python(sched)  # HeldPoint compares all three
    assert all(len(points) >= 1 for points in inflight._walk(sched))
