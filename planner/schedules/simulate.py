"""The event simulator: times a schedule under per-stage durations.

Semantics: each rank runs its actions in list order, one at a time. An action starts at
max(the rank is free, every dependency has ended + the p2p time of the boundary it crosses);
dependencies are those of `planner.schedules.validate` (F after the previous stage's F;
B/I after its own F and the next stage's B/I; W after its I). Durations per stage s:
F = fw_s[s], B = bw_s[s], I = bw_s[s] - w_s[s], W = w_s[s]. p2p_s[i] is charged only when
stages i and i + 1 sit on different ranks.

Speed: with no resource shared between ranks, start times are a longest path over a DAG whose
topological order does not depend on the durations. That order (and deadlock detection) is
computed once per Schedule object and cached; each `simulate` call is then one linear pass over
flat integer tables (planner.schedules.kernel: in C where it was built). `generate` caches its
Schedules, so the search reuses the compiled form.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from planner.errors import DeadlockError, SpecError
from planner.memo import PerObject
from planner.schedules import kernel
from planner.schedules.generators import schedule_codes
from planner.schedules.ir import Schedule
from planner.schedules.sim_types import SimResult, StageDurations, TimedAction
from planner.schedules.validate import execution_order, format_grid, validate

__all__ = ["simulate"]


@dataclass(frozen=True)
class _Compiled:
    # One row per action in topological order: (rank, duration slot, dep, lag slot, dep, lag slot).
    # Duration slot = kind * num_stages + stage; a missing dependency is -1 (it ended at 0.0);
    # lag slot 0 is "no p2p", boundary i is i + 1. Flat, as the C kernel reads them.
    flat: array[int]
    positions: array[int]  # each action's row, ranks one after another in rank order
    offsets: Sequence[int]  # rank r's actions at positions[offsets[r] : offsets[r + 1]]
    peak_inflight: tuple[int, ...]
    handle: object | None  # the C kernel's checked copy of `flat` (kernel.prepare), if built

    @cached_property
    def ops(self) -> tuple[kernel.Row, ...]:
        """The rows as tuples (the Python loops read these; the C kernel reads `flat`)."""
        return kernel.rows_of(self.flat)

    @cached_property
    def rank_positions(self) -> tuple[tuple[int, ...], ...]:
        """Per rank, the topological positions of its actions in rank order (built when
        first read: only a timeline or the pure-Python seed cuts need them)."""
        p, off = self.positions, self.offsets
        return tuple(tuple(p[off[r] : off[r + 1]]) for r in range(len(off) - 1))


_COMPILED: PerObject[_Compiled] = PerObject()


def _compile(schedule: Schedule) -> _Compiled:
    return _COMPILED.get(schedule, lambda: _build(schedule))


def compiled_rows(schedule: Schedule) -> tuple[tuple[kernel.Row, ...], array[int]]:
    """The schedule's compiled rows (cached; layout in planner.schedules.kernel) and their
    flat int32 form: the critical-path search (planner.search.paths) runs on the same tables."""
    c = _compile(schedule)
    return c.ops, c.flat


def compiled_flat(schedule: Schedule) -> array[int]:
    """The schedule's compiled table in its flat int32 form only (cached; six ints per row,
    layout in planner.schedules.kernel): compiled_rows without building a tuple per row."""
    return _compile(schedule).flat


def rank_positions(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Per rank, the topological positions (rows of compiled_rows) of its actions, in the
    rank's order."""
    return _compile(schedule).rank_positions


def num_actions(schedule: Schedule) -> int:
    """How many actions `schedule` has (from its compiled table: no Action is built)."""
    return len(_compile(schedule).flat) // 6


def longest_path(
    schedule: Schedule, durations: StageDurations
) -> tuple[float, list[int], list[int]]:
    """The makespan and one longest path of `schedule` (planner.schedules.kernel.critical):
    its visits per duration slot (kind-major: F, B, I, W, one per stage) and per boundary."""
    c = _compile(schedule)
    durtab, lagtab = _tables(durations, schedule.num_stages)
    if c.handle is not None and kernel.available():
        return kernel.critical_prepared(c.handle, durtab, lagtab, schedule.num_stages)
    rows = None if kernel.available() else c.ops
    return kernel.critical(c.flat, durtab, lagtab, schedule.pp, schedule.num_stages, rows)


def _build(schedule: Schedule) -> _Compiled:
    """Topological order and flat tables (planner.schedules.kernel.build).

    The dependency rule is the one `validate.execution_order` documents; that (slower, more
    descriptive) function is only called here to explain a deadlock or a malformed schedule.
    """
    stages, m, pp = schedule.num_stages, schedule.num_microbatches, schedule.pp
    rank_of = [schedule.rank_of(s) for s in range(stages)]
    codes, offsets = schedule_codes(schedule)
    built = kernel.build(codes, offsets, pp, stages, m, rank_of)
    if built.status == kernel.BAD_ACTION:
        validate(schedule)  # raises ScheduleError with the marked grid
    if built.status != kernel.OK:
        execution_order(schedule)  # raises DeadlockError: who waits for what, and the grid
        raise DeadlockError(f"schedule cannot complete:\n{format_grid(schedule)}")
    handle = kernel.prepare(built.flat, pp)
    return _Compiled(built.flat, built.positions, offsets, built.peak_inflight, handle)


def _tables(durations: StageDurations, stages: int) -> tuple[array[float], array[float]]:
    """stage_tables of `durations`, checked."""
    for field in ("fw_s", "bw_s", "w_s"):
        values: tuple[float, ...] = getattr(durations, field)
        if len(values) != stages:
            raise SpecError(
                f"durations.{field}", len(values), f"needs one value per stage ({stages})"
            )
    if len(durations.p2p_s) < stages - 1:
        raise SpecError(
            "durations.p2p_s", len(durations.p2p_s), f"needs one value per boundary ({stages - 1})"
        )
    fw, bw, w = durations.fw_s, durations.bw_s, durations.w_s
    for s in range(stages):
        if fw[s] < 0 or w[s] < 0 or bw[s] < w[s]:
            raise SpecError(
                f"durations[{s}]",
                (fw[s], bw[s], w[s]),
                "need fw_s >= 0 and bw_s >= w_s >= 0 (w_s is the weight-grad part of bw_s)",
            )
    return stage_tables(fw, bw, w, durations.p2p_s, stages)


def stage_tables(
    fw: Sequence[float], bw: Sequence[float], w: Sequence[float], p2p: Sequence[float], stages: int
) -> tuple[array[float], array[float]]:
    """The kernel's tables, unchecked: durations per slot (every stage's fw, then bw, then
    bw - w, then w) and lags (0.0, then the p2p time of each boundary: slot b + 1)."""
    durtab = array("d", fw)
    durtab.extend(bw)
    durtab.extend(map(operator.sub, bw, w))
    durtab.extend(w)
    lagtab = array("d", (0.0,))
    lagtab.extend(p2p[: stages - 1])
    return durtab, lagtab


def simulate(
    schedule: Schedule, durations: StageDurations, *, with_timeline: bool = True
) -> SimResult:
    """Time `schedule` under `durations`: per-rank timeline, step time, bubble, peak in-flight.

    `with_timeline=False` leaves `timeline` empty (`()`) and skips building one TimedAction per
    action, which is most of the cost of a call: use it in search loops.

    Raises DeadlockError (which rank waits for what, and the grid) if the per-rank orders can
    never complete, and SpecError if `durations` does not have one value per stage.
    """
    durtab, lagtab = _tables(durations, schedule.num_stages)
    return _run(schedule, durtab, lagtab, with_timeline=with_timeline)


def simulate_unchecked(
    schedule: Schedule,
    fw: Sequence[float],
    bw: Sequence[float],
    w: Sequence[float],
    p2p: Sequence[float],
    *,
    with_timeline: bool = False,
) -> SimResult:
    """`simulate` of per-stage durations without their checks or a StageDurations: for the
    cost model's scorer, whose durations are valid by construction (the checks and the tuple
    round trip were a fifth of a score on 310.1B's partitions)."""
    durtab, lagtab = stage_tables(fw, bw, w, p2p, schedule.num_stages)
    return _run(schedule, durtab, lagtab, with_timeline=with_timeline)


def _run(
    schedule: Schedule, durtab: Sequence[float], lagtab: Sequence[float], *, with_timeline: bool
) -> SimResult:
    """`simulate` from the kernel's tables (stage_tables)."""
    c = _compile(schedule)
    timeline: tuple[tuple[TimedAction, ...], ...] = ()
    if c.handle is not None and kernel.available() and not with_timeline:
        step_s, busy = kernel.makespan(c.handle, durtab, lagtab, schedule.pp)
    else:
        rows = None if kernel.available() else c.ops
        step_s, start, end, busy = kernel.run(c.flat, durtab, lagtab, schedule.pp, rows)
        if with_timeline:
            timeline = tuple(
                tuple(TimedAction(a, start[i], end[i]) for a, i in zip(order, pos, strict=True))
                for order, pos in zip(schedule.orders, c.rank_positions, strict=True)
            )
    idle_s = sum(step_s - b for b in busy)
    bubble = idle_s / (schedule.pp * step_s) if step_s > 0 else 0.0
    return SimResult(
        step_time_s=step_s,
        timeline=timeline,
        busy_s=tuple(busy),
        bubble_fraction=bubble,
        peak_inflight=c.peak_inflight,
    )
