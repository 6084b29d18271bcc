"""The schedule validator and the dependency rule shared with the simulator.

Dependencies of one micro-batch `mb` (Narayanan et al. 2021; Qi et al. 2024 for I/W):

    F(s, mb)        after F(s-1, mb)                      (s > 0; crosses a boundary if the
                                                           two stages sit on different ranks)
    B/I(s, mb)      after F(s, mb), and after B/I(s+1, mb) (s < last stage)
    W(s, mb)        after I(s, mb)

plus the per-rank order: a rank runs its actions one at a time, in list order. A schedule is
valid when every stage runs F and either B or (I and W) exactly once per micro-batch, on the
rank `stage_to_rank` gives, and all actions can execute (no rank waits forever).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NoReturn

from planner.errors import DeadlockError, ScheduleError
from planner.schedules.ir import Action, ActionKind, Schedule

__all__ = ["Dependency", "ExecutionOrder", "execution_order", "format_grid", "validate"]

KIND_INDEX: dict[ActionKind, int] = {
    ActionKind.F: 0,
    ActionKind.B: 1,
    ActionKind.I: 2,
    ActionKind.W: 3,
}
Cell = tuple[int, int]  # (rank, position in that rank's list)


def format_grid(schedule: Schedule, marked: Collection[Cell] = ()) -> str:
    """The rank x step grid (like Schedule.format) with the `marked` cells shown as `>2F0<`."""
    marks = set(marked)
    width = max((len(str(a)) for order in schedule.orders for a in order), default=2) + 2
    rows = []
    for rank, order in enumerate(schedule.orders):
        cells = []
        for step, action in enumerate(order):
            text = f">{action}<" if (rank, step) in marks else f" {action} "
            cells.append(text.rjust(width))
        rows.append(f"rank {rank}: " + "".join(cells))
    return "\n".join(rows)


def _key(stage: int, kind: int, microbatch: int) -> tuple[int, int, int]:
    return (stage, kind, microbatch)


@dataclass(frozen=True, slots=True)
class Dependency:
    """`cell` must end before the dependent action starts; `boundary` is the stage boundary
    crossed (its p2p time applies), or -1 when both actions run on the same rank."""

    cell: Cell
    boundary: int


@dataclass(frozen=True, slots=True)
class ExecutionOrder:
    """A topological order of all actions, consistent with the per-rank order."""

    cells: tuple[Cell, ...]
    deps: dict[Cell, tuple[Dependency, ...]]


def _locate(schedule: Schedule) -> dict[tuple[int, int, int], Cell]:
    where: dict[tuple[int, int, int], Cell] = {}
    for rank, order in enumerate(schedule.orders):
        for step, a in enumerate(order):
            where.setdefault(_key(a.stage, KIND_INDEX[a.kind], a.microbatch), (rank, step))
    return where


def _needs(
    schedule: Schedule, a: Action, where: dict[tuple[int, int, int], Cell]
) -> list[tuple[tuple[int, int, int], int]]:
    """(key, boundary or -1) of each action `a` waits for."""
    rank = schedule.rank_of(a.stage)
    last = schedule.num_stages - 1
    if a.kind is ActionKind.F:
        if a.stage == 0:
            return []
        b = a.stage - 1 if schedule.rank_of(a.stage - 1) != rank else -1
        return [(_key(a.stage - 1, 0, a.microbatch), b)]
    if a.kind is ActionKind.W:
        return [(_key(a.stage, 2, a.microbatch), -1)]
    needs = [(_key(a.stage, 0, a.microbatch), -1)]
    if a.stage < last:
        nxt = _key(a.stage + 1, 2, a.microbatch)
        if nxt not in where:
            nxt = _key(a.stage + 1, 1, a.microbatch)
        b = a.stage if schedule.rank_of(a.stage + 1) != rank else -1
        needs.append((nxt, b))
    return needs


def execution_order(schedule: Schedule) -> ExecutionOrder:
    """Run the schedule symbolically; raise DeadlockError (with the grid) if it cannot finish."""
    where = _locate(schedule)
    done: set[tuple[int, int, int]] = set()
    pointer = [0] * schedule.pp
    waiting: dict[tuple[int, int, int], list[int]] = {}
    queue = list(range(schedule.pp))
    cells: list[Cell] = []
    deps: dict[Cell, tuple[Dependency, ...]] = {}
    while queue:
        rank = queue.pop()
        order = schedule.orders[rank]
        while pointer[rank] < len(order):
            a = order[pointer[rank]]
            needs = _needs(schedule, a, where)
            missing = next((k for k, _ in needs if k not in done), None)
            if missing is not None:
                waiting.setdefault(missing, []).append(rank)
                break
            cell = (rank, pointer[rank])
            cells.append(cell)
            deps[cell] = tuple(Dependency(where[k], b) for k, b in needs)
            key = _key(a.stage, KIND_INDEX[a.kind], a.microbatch)
            done.add(key)
            queue.extend(waiting.pop(key, ()))
            pointer[rank] += 1
    stuck = [r for r in range(schedule.pp) if pointer[r] < len(schedule.orders[r])]
    if stuck:
        raise DeadlockError(_describe_stuck(schedule, stuck, pointer, where, done))
    return ExecutionOrder(cells=tuple(cells), deps=deps)


def _name(key: tuple[int, int, int]) -> str:
    return str(Action(key[0], list(KIND_INDEX)[key[1]], key[2]))


def _describe_stuck(
    schedule: Schedule,
    stuck: list[int],
    pointer: list[int],
    where: dict[tuple[int, int, int], Cell],
    done: set[tuple[int, int, int]],
) -> str:
    lines = [
        f"schedule {schedule.name!r} (pp={schedule.pp}, vpp={schedule.vpp}, "
        f"m={schedule.num_microbatches}) deadlocks: no rank can make progress"
    ]
    for rank in stuck:
        a = schedule.orders[rank][pointer[rank]]
        for key, _ in _needs(schedule, a, where):
            if key in done:
                continue
            if key in where:
                r, s = where[key]
                lines.append(
                    f"  rank {rank} step {pointer[rank]}: {a} waits for {_name(key)} "
                    f"(rank {r} step {s}, not yet run)"
                )
            else:
                lines.append(
                    f"  rank {rank} step {pointer[rank]}: {a} waits for {_name(key)}, "
                    "which is not in the schedule"
                )
            break
    lines.append(format_grid(schedule, [(r, pointer[r]) for r in stuck]))
    return "\n".join(lines)


def validate(schedule: Schedule) -> None:
    """Raise ScheduleError (the grid with the failing cell marked) unless `schedule` is valid.

    Checks, in order: each action is on its stage's rank, stage and micro-batch indices are in
    range, no action is duplicated, none is missing, and all dependencies can be met in the
    per-rank orders (a cyclic wait raises DeadlockError, a ScheduleError).
    """
    if len(schedule.orders) != schedule.pp:
        raise ScheduleError(f"schedule has {len(schedule.orders)} rank lists for pp={schedule.pp}")
    s_count, m = schedule.num_stages, schedule.num_microbatches
    seen: dict[tuple[int, int, int], Cell] = {}
    for rank, order in enumerate(schedule.orders):
        for step, a in enumerate(order):
            cell = (rank, step)
            if not (0 <= a.stage < s_count and 0 <= a.microbatch < m):
                _fail(
                    schedule,
                    cell,
                    f"{a} is out of range (stages 0..{s_count - 1}, micro-batches 0..{m - 1})",
                )
            if schedule.rank_of(a.stage) != rank:
                _fail(
                    schedule,
                    cell,
                    f"{a} runs on rank {rank}, but stage {a.stage} belongs "
                    f"to rank {schedule.rank_of(a.stage)}",
                )
            key = _key(a.stage, KIND_INDEX[a.kind], a.microbatch)
            if key in seen:
                first = seen[key]
                _fail(
                    schedule,
                    cell,
                    f"{a} is duplicated (first at rank {first[0]} step {first[1]})",
                    also=[first],
                )
            seen[key] = cell
    for stage in range(s_count):
        for mb in range(m):
            _check_complete(schedule, seen, stage, mb)
    execution_order(schedule)


def _check_complete(
    schedule: Schedule, seen: dict[tuple[int, int, int], Cell], stage: int, mb: int
) -> None:
    has = {kind: _key(stage, i, mb) in seen for kind, i in KIND_INDEX.items()}
    missing: list[str] = []
    if not has[ActionKind.F]:
        missing.append(str(Action(stage, ActionKind.F, mb)))
    split = has[ActionKind.I] or has[ActionKind.W]
    if split and has[ActionKind.B]:
        cell = seen[_key(stage, 1, mb)]
        _fail(schedule, cell, f"stage {stage} micro-batch {mb} has both B and I/W")
    if split:
        missing += [str(Action(stage, k, mb)) for k in (ActionKind.I, ActionKind.W) if not has[k]]
    elif not has[ActionKind.B]:
        missing.append(str(Action(stage, ActionKind.B, mb)))
    if missing:
        rank = schedule.rank_of(stage)
        raise ScheduleError(
            f"missing action(s) {', '.join(missing)} on rank {rank}\n"
            + format_grid(schedule, [(rank, len(schedule.orders[rank]) - 1)])
        )


def _fail(schedule: Schedule, cell: Cell, reason: str, also: list[Cell] | None = None) -> NoReturn:
    raise ScheduleError(
        f"rank {cell[0]} step {cell[1]}: {reason}\n" + format_grid(schedule, [cell, *(also or [])])
    )
