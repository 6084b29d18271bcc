"""The validator rejects broken schedules with the grid and the failing cell marked."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import DeadlockError, ScheduleError, SpecError
from planner.schedules import Action, Schedule, StageDurations, generate, simulate, validate
from tests.planner.search.cases import ALL_SCHEDULES


def with_orders(schedule: Schedule, orders: list[list[str]]) -> Schedule:
    parsed = tuple(tuple(Action.parse(t) for t in order) for order in orders)
    return dataclasses.replace(schedule, orders=parsed)


def texts(schedule: Schedule) -> list[list[str]]:
    return [[str(a) for a in order] for order in schedule.orders]


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(ALL_SCHEDULES), p=st.integers(1, 8), m=st.integers(1, 24))
def test_every_generated_schedule_is_valid(case: tuple[str, int], p: int, m: int) -> None:
    name, v = case
    try:
        schedule = generate(name, pp=p, vpp=v, num_microbatches=m)  # type: ignore[arg-type]
    except SpecError:
        return
    validate(schedule)
    counts = [len(order) for order in schedule.orders]
    per_mb = 3 if name in ("zb-h1", "zbv") else 2
    assert sum(counts) == per_mb * p * v * m


def test_backward_before_its_forward_is_rejected_with_marked_cell() -> None:
    base = generate("1f1b", pp=2, vpp=1, num_microbatches=3)
    orders = texts(base)
    assert orders[1][:2] == ["1F0", "1B0"]
    orders[1][0], orders[1][1] = orders[1][1], orders[1][0]
    with pytest.raises(ScheduleError) as info:
        validate(with_orders(base, orders))
    message = str(info.value)
    assert ">1B0<" in message  # the failing cell, marked in the grid
    assert "waits for 1F0" in message
    assert "rank 0:" in message and "rank 1:" in message


def test_forward_before_previous_stage_forward_can_happen() -> None:
    # Rank 0 runs 0F1 only after 0B0, which needs 1B0, which rank 1 placed after 1F1.
    base = generate("gpipe", pp=2, vpp=1, num_microbatches=2)
    broken = with_orders(base, [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1F1", "1B0", "1B1"]])
    with pytest.raises(ScheduleError) as info:
        validate(broken)
    message = str(info.value)
    assert ">0B0<" in message and ">1F1<" in message
    assert "1F1 waits for 0F1" in message


def test_missing_action_is_rejected() -> None:
    base = generate("gpipe", pp=2, vpp=1, num_microbatches=2)
    orders = texts(base)
    orders[1].remove("1B1")
    with pytest.raises(ScheduleError, match=r"missing action.*1B1"):
        validate(with_orders(base, orders))


def test_duplicate_action_is_rejected() -> None:
    base = generate("1f1b", pp=2, vpp=1, num_microbatches=2)
    orders = texts(base)
    orders[0].append("0F1")
    with pytest.raises(ScheduleError, match="0F1 is duplicated") as info:
        validate(with_orders(base, orders))
    assert ">0F1<" in str(info.value)


def test_action_on_the_wrong_rank_is_rejected() -> None:
    base = generate("gpipe", pp=2, vpp=1, num_microbatches=1)
    broken = with_orders(base, [["0F0", "1F0", "0B0"], ["1B0"]])
    with pytest.raises(ScheduleError, match="stage 1 belongs to rank 1"):
        validate(broken)


def test_split_and_full_backward_mixed_is_rejected() -> None:
    base = generate("zb-h1", pp=1, vpp=1, num_microbatches=1)
    broken = with_orders(base, [["0F0", "0I0", "0W0", "0B0"]])
    with pytest.raises(ScheduleError, match="both B and I/W"):
        validate(broken)


def test_weight_grad_before_input_grad_is_rejected() -> None:
    base = generate("zb-h1", pp=1, vpp=1, num_microbatches=1)
    with pytest.raises(ScheduleError, match="0W0 waits for 0I0"):
        validate(with_orders(base, [["0F0", "0W0", "0I0"]]))


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(ALL_SCHEDULES), p=st.integers(1, 5), m=st.integers(1, 10), data=st.data()
)
def test_moving_a_backward_ahead_of_its_forward_is_always_rejected(
    case: tuple[str, int], p: int, m: int, data: st.DataObject
) -> None:
    name, v = case
    try:
        base = generate(name, pp=p, vpp=v, num_microbatches=m)  # type: ignore[arg-type]
    except SpecError:
        return
    orders = texts(base)
    rank = data.draw(st.integers(0, p - 1))
    backwards = [t for t in orders[rank] if "B" in t or "I" in t]
    victim = data.draw(st.sampled_from(backwards))
    forward = victim.replace("B", "F").replace("I", "F")
    orders[rank].remove(victim)
    orders[rank].insert(orders[rank].index(forward), victim)
    with pytest.raises(ScheduleError, match=f">{victim}<"):
        validate(with_orders(base, orders))


def test_simulator_reports_deadlock_readably() -> None:
    base = generate("gpipe", pp=2, vpp=1, num_microbatches=2)
    broken = with_orders(base, [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1F1", "1B0", "1B1"]])
    durations = StageDurations((1.0, 1.0), (2.0, 2.0), (0.0, 0.0), (0.0,))
    with pytest.raises(DeadlockError) as info:
        simulate(broken, durations)
    message = str(info.value)
    assert "deadlocks" in message
    assert "rank 0 step 1: 0B0 waits for 1B0 (rank 1 step 2, not yet run)" in message
    assert "rank 1 step 1: 1F1 waits for 0F1 (rank 0 step 2, not yet run)" in message


def test_simulator_rejects_misplaced_and_missing_actions() -> None:
    base = generate("gpipe", pp=2, vpp=1, num_microbatches=1)
    durations = StageDurations((1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (0.0,))
    with pytest.raises(ScheduleError, match="stage 1 belongs to rank 1"):
        simulate(with_orders(base, [["0F0", "1F0", "0B0"], ["1B0"]]), durations)
    with pytest.raises(DeadlockError, match="0B0 waits for 1B0, which is not in the schedule"):
        simulate(with_orders(base, [["0F0", "0B0"], ["1F0"]]), durations)
