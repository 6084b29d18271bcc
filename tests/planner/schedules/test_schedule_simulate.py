"""The simulator against an independent longest-path computation, and its result fields."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import SpecError
from planner.schedules import Schedule, StageDurations, generate, simulate

times = st.floats(min_value=0.01, max_value=10.0, allow_nan=False)


def longest_path_step_time(schedule: Schedule, d: StageDurations) -> float:
    """Independent of the simulator: end(x) = dur(x) + max over predecessors in the DAG whose
    edges are (a) the previous action on the same rank and (b) the data dependencies, written
    out here from the paper's definition (1F1B: F flows down the stages, B flows back up)."""
    last = schedule.num_stages - 1
    position: dict[str, tuple[int, int]] = {}
    for r, order in enumerate(schedule.orders):
        for i, a in enumerate(order):
            position[str(a)] = (r, i)

    def rank(stage: int) -> int:
        return schedule.rank_of(stage)

    @cache
    def end(r: int, i: int) -> float:
        a = schedule.orders[r][i]
        s, kind, mb = a.stage, a.kind.value, a.microbatch
        preds: list[float] = [end(r, i - 1)] if i > 0 else [0.0]
        if kind == "F" and s > 0:
            hop = d.p2p_s[s - 1] if rank(s - 1) != rank(s) else 0.0
            preds.append(end(*position[f"{s - 1}F{mb}"]) + hop)
        if kind == "B":
            preds.append(end(*position[f"{s}F{mb}"]))
            if s < last:
                hop = d.p2p_s[s] if rank(s + 1) != rank(s) else 0.0
                preds.append(end(*position[f"{s + 1}B{mb}"]) + hop)
        duration = d.fw_s[s] if kind == "F" else d.bw_s[s]
        return max(preds) + duration

    return max(end(r, len(o) - 1) for r, o in enumerate(schedule.orders) if o)


@settings(max_examples=120, deadline=None)
@given(data=st.data(), p=st.integers(1, 8), m=st.integers(1, 16))
def test_1f1b_heterogeneous_matches_longest_path(data: st.DataObject, p: int, m: int) -> None:
    fw = tuple(data.draw(times) for _ in range(p))
    bw = tuple(data.draw(times) for _ in range(p))
    p2p = tuple(data.draw(st.floats(0.0, 2.0)) for _ in range(max(p - 1, 0)))
    durations = StageDurations(fw, bw, (0.0,) * p, p2p)
    schedule = generate("1f1b", pp=p, vpp=1, num_microbatches=m)
    result = simulate(schedule, durations)
    assert result.step_time_s == pytest.approx(longest_path_step_time(schedule, durations))
    # Bubble from its definition: idle rank-time over pp * step time.
    busy = [m * (fw[r] + bw[r]) for r in range(p)]
    assert result.busy_s == pytest.approx(busy)
    expected = sum(result.step_time_s - b for b in busy) / (p * result.step_time_s)
    assert result.bubble_fraction == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), p=st.integers(2, 6), rounds=st.integers(1, 3))
def test_interleaved_heterogeneous_matches_longest_path(
    data: st.DataObject, p: int, rounds: int
) -> None:
    stages = 2 * p
    fw = tuple(data.draw(times) for _ in range(stages))
    bw = tuple(data.draw(times) for _ in range(stages))
    p2p = tuple(data.draw(st.floats(0.0, 2.0)) for _ in range(stages - 1))
    durations = StageDurations(fw, bw, (0.0,) * stages, p2p)
    schedule = generate("interleaved-1f1b", pp=p, vpp=2, num_microbatches=p * rounds)
    expected = longest_path_step_time(schedule, durations)
    assert simulate(schedule, durations).step_time_s == pytest.approx(expected)


def test_timeline_is_per_rank_in_order_and_respects_p2p() -> None:
    schedule = generate("1f1b", pp=2, vpp=1, num_microbatches=2)
    durations = StageDurations((1.0, 2.0), (3.0, 4.0), (0.0, 0.0), (0.5,))
    result = simulate(schedule, durations)
    rank0 = [(str(t.action), t.start_s, t.end_s) for t in result.timeline[0]]
    rank1 = [(str(t.action), t.start_s, t.end_s) for t in result.timeline[1]]
    # rank 0: 0F0 [0,1]; 0F1 [1,2]; 0B0 waits for 1B0 (ends 1.5+2+4=7.5) + 0.5 -> [8,11];
    # 0B1 waits for 1B1 (ends 13.5) + 0.5 -> [14, 17]
    assert rank0 == [("0F0", 0, 1), ("0F1", 1, 2), ("0B0", 8, 11), ("0B1", 14, 17)]
    # rank 1: 1F0 at 1+0.5; 1B0 right after; 1F1 (0F1 ended at 2, +0.5 = 2.5) after 1B0
    assert rank1 == [("1F0", 1.5, 3.5), ("1B0", 3.5, 7.5), ("1F1", 7.5, 9.5), ("1B1", 9.5, 13.5)]
    assert result.step_time_s == 17.0
    assert result.busy_s == (8.0, 12.0)
    assert result.bubble_fraction == pytest.approx((17 - 8 + 17 - 12) / (2 * 17))
    assert result.peak_inflight == (2, 1)
    lean = simulate(schedule, durations, with_timeline=False)
    assert lean.timeline == () and lean.step_time_s == 17.0


def test_split_backward_durations() -> None:
    schedule = generate("zb-h1", pp=1, vpp=1, num_microbatches=1)
    result = simulate(schedule, StageDurations((1.0,), (3.0,), (1.25,), ()))
    spans = [(str(t.action), t.end_s - t.start_s) for t in result.timeline[0]]
    assert spans == [("0F0", 1.0), ("0I0", 1.75), ("0W0", 1.25)]


def test_durations_must_have_one_value_per_stage() -> None:
    schedule = generate("1f1b", pp=2, vpp=1, num_microbatches=2)
    with pytest.raises(SpecError, match=r"durations\.fw_s"):
        simulate(schedule, StageDurations((1.0,), (1.0, 1.0), (0.0, 0.0), (0.0,)))
    with pytest.raises(SpecError, match="bw_s >= w_s"):
        simulate(schedule, StageDurations((1.0, 1.0), (1.0, 1.0), (2.0, 0.0), (0.0,)))
