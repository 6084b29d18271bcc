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
flat integer tables. `generate` caches its Schedules, so the search reuses the compiled form.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from planner.errors import DeadlockError, SpecError
from planner.schedules.inflight import peak_inflight
from planner.schedules.ir import Action, Schedule
from planner.schedules.sim_types import SimResult, StageDurations, TimedAction
from planner.schedules.validate import KIND_INDEX, execution_order, format_grid, validate

__all__ = ["simulate"]


@dataclass(frozen=True, slots=True)
class _Compiled:
    actions: tuple[Action, ...]  # topological order
    # One row per action in topological order: (rank, duration slot, dep, lag slot, dep, lag slot).
    # Duration slot = kind * num_stages + stage; a missing dependency is -1, which reads the
    # sentinel end-time slot at the end (always 0.0); lag slot 0 is "no p2p", boundary i is i + 1.
    ops: tuple[tuple[int, int, int, int, int, int], ...]
    rank_positions: tuple[tuple[int, ...], ...]  # per rank, topological positions in rank order
    peak_inflight: tuple[int, ...]


_CACHE: dict[int, _Compiled] = {}


def _compile(schedule: Schedule) -> _Compiled:
    key = id(schedule)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _build(schedule)
        _CACHE[key] = hit
        weakref.finalize(schedule, _CACHE.pop, key, None)
    return hit


def _build(schedule: Schedule) -> _Compiled:
    """Topological order and flat tables, on integer keys (stage * 4 + kind) * m + micro-batch.

    The dependency rule is the one `validate.execution_order` documents; that (slower, more
    descriptive) function is only called here to explain a deadlock or a malformed schedule.
    """
    stages, m, pp = schedule.num_stages, schedule.num_microbatches, schedule.pp
    rank_of = [schedule.rank_of(s) for s in range(stages)]
    size = stages * 4 * m
    present = bytearray(size)
    keyed: list[list[int]] = []
    for rank, order in enumerate(schedule.orders):
        keys = []
        for a in order:
            if not (0 <= a.stage < stages and 0 <= a.microbatch < m) or rank_of[a.stage] != rank:
                validate(schedule)  # raises ScheduleError with the marked grid
            k = (a.stage * 4 + KIND_INDEX[a.kind]) * m + a.microbatch
            present[k] = 1
            keys.append(k)
        keyed.append(keys)
    position = [-1] * size  # topological position of each scheduled action
    actions: list[Action] = []
    ops: list[tuple[int, int, int, int, int, int]] = []
    pointer = [0] * pp
    waiting: dict[int, list[int]] = {}
    queue = list(range(pp))
    last = stages - 1
    while queue:
        rank = queue.pop()
        keys = keyed[rank]
        while pointer[rank] < len(keys):
            k = keys[pointer[rank]]
            stage, mb = divmod(k, m)
            stage, kind = divmod(stage, 4)
            d1 = d2 = -1  # key of each dependency
            l1 = l2 = 0  # lag slot: boundary + 1, 0 for none
            if kind == 0:
                if stage > 0:
                    d1 = ((stage - 1) * 4) * m + mb
                    l1 = stage if rank_of[stage - 1] != rank else 0
            elif kind == 3:
                d1 = (stage * 4 + 2) * m + mb
            else:
                d1 = (stage * 4) * m + mb
                if stage < last:
                    d2 = ((stage + 1) * 4 + 2) * m + mb
                    if not present[d2]:
                        d2 -= m  # the next stage runs a full B, not I
                    l2 = stage + 1 if rank_of[stage + 1] != rank else 0
            blocked = next((d for d in (d1, d2) if d >= 0 and position[d] < 0), None)
            if blocked is not None:
                waiting.setdefault(blocked, []).append(rank)
                break
            position[k] = len(ops)
            actions.append(schedule.orders[rank][pointer[rank]])
            p1 = position[d1] if d1 >= 0 else -1  # -1 reads the sentinel end slot (0.0)
            p2 = position[d2] if d2 >= 0 else -1
            ops.append((rank, kind * stages + stage, p1, l1, p2, l2))
            queue.extend(waiting.pop(k, ()))
            pointer[rank] += 1
    if any(pointer[r] < len(keyed[r]) for r in range(pp)):
        execution_order(schedule)  # raises DeadlockError: who waits for what, and the grid
        raise DeadlockError(f"schedule cannot complete:\n{format_grid(schedule)}")
    rank_positions = tuple(tuple(position[k] for k in keys) for keys in keyed)
    return _Compiled(tuple(actions), tuple(ops), rank_positions, peak_inflight(schedule))


def _tables(durations: StageDurations, stages: int) -> tuple[list[float], list[float]]:
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
    durtab = [*fw, *bw, *(b - x for b, x in zip(bw, w, strict=True)), *w]
    lagtab = [0.0, *durations.p2p_s]
    return durtab, lagtab


def _run(
    c: _Compiled, durtab: list[float], lagtab: list[float], pp: int
) -> tuple[list[float], list[float], list[float]]:
    n = len(c.actions)
    end = [0.0] * (n + 1)
    start = [0.0] * n
    free = [0.0] * pp
    busy = [0.0] * pp
    for i, (rank, slot, d1, l1, d2, l2) in enumerate(c.ops):
        t = free[rank]
        ready = end[d1] + lagtab[l1]
        if ready > t:
            t = ready
        ready = end[d2] + lagtab[l2]
        if ready > t:
            t = ready
        duration = durtab[slot]
        start[i] = t
        free[rank] = end[i] = t + duration
        busy[rank] += duration
    return start, end, busy


def simulate(
    schedule: Schedule, durations: StageDurations, *, with_timeline: bool = True
) -> SimResult:
    """Time `schedule` under `durations`: per-rank timeline, step time, bubble, peak in-flight.

    `with_timeline=False` leaves `timeline` empty (`()`) and skips building one TimedAction per
    action, which is most of the cost of a call: use it in search loops.

    Raises DeadlockError (which rank waits for what, and the grid) if the per-rank orders can
    never complete, and SpecError if `durations` does not have one value per stage.
    """
    c = _compile(schedule)
    durtab, lagtab = _tables(durations, schedule.num_stages)
    start, end, busy = _run(c, durtab, lagtab, schedule.pp)
    step_s = max(end)
    idle_s = sum(step_s - b for b in busy)
    bubble = idle_s / (schedule.pp * step_s) if step_s > 0 else 0.0
    actions = c.actions
    timeline = (
        tuple(
            tuple(TimedAction(actions[i], start[i], end[i]) for i in positions)
            for positions in c.rank_positions
        )
        if with_timeline
        else ()
    )
    return SimResult(
        step_time_s=step_s,
        timeline=timeline,
        busy_s=tuple(busy),
        bubble_fraction=bubble,
        peak_inflight=c.peak_inflight,
    )
