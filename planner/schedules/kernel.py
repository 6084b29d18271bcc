"""The simulator's longest-path pass over a compiled schedule, in C where it was built.

A compiled schedule (planner.schedules.simulate) is one row per action in topological order:
(rank, duration slot, dep 1, lag slot 1, dep 2, lag slot 2), a missing dependency -1 (it ended
at 0.0) and lag slot 0 "no p2p". An action starts when its rank is free and every dependency
has ended plus its lag: one pass in row order gives every start and end time, and following,
from the action that ends last, the edge that set each start (the rank's previous action
unless a dependency ends strictly later) gives one longest path.

`run` and `critical` use the C extension planner/schedules/_kernel.c (built by
`pip install -e .`, see setup.py) when it imports, else `run_python` / `critical_python`: the
same arithmetic in the same order, so both give bit-identical floats
(tests/planner/schedules/test_kernel.py). The C pass is 50-100x faster; the search simulates
thousands of partitions per configuration. `prepare` checks a compiled schedule's rows once
and keeps a copy in C; `makespan` and `critical_prepared` then run over it without checking
the rows again or writing start and end times (what the scorer and the critical-path cuts
need), the same arithmetic again.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType

Row = tuple[int, int, int, int, int, int]

_kernel: ModuleType | None
try:
    from planner.schedules import _kernel
except ImportError:  # not built (no compiler at install time): the Python loops below
    _kernel = None
_NEWEST = ("prepare", "makespan", "critical_prepared", "held_points", "seed_paths")
if _kernel is not None and not all(hasattr(_kernel, name) for name in _NEWEST):
    _kernel = None  # built from an older _kernel.c: the Python loops until it is rebuilt

__all__ = [
    "Built",
    "available",
    "build",
    "build_python",
    "critical",
    "critical_prepared",
    "critical_python",
    "flatten",
    "held_points",
    "makespan",
    "prepare",
    "rows_of",
    "run",
    "run_python",
    "seed_paths",
]

OK, BAD_ACTION, DEADLOCK = 0, 1, 2  # build's status


@dataclass(frozen=True)
class Built:
    """A compiled schedule: `status` OK, BAD_ACTION (an action out of range or on a rank that
    does not hold its stage) or DEADLOCK; with OK, the rows in topological order (flat, see
    `rows_of`), each input action's row (int32, in the input's order), each stage's peak
    in-flight micro-batches."""

    status: int
    flat: array[int] = field(default_factory=lambda: array("i"))
    positions: array[int] = field(default_factory=lambda: array("i"))
    peak_inflight: tuple[int, ...] = ()


def available() -> bool:
    """Whether the C kernel is in use."""
    return _kernel is not None


def flatten(rows: Sequence[Row]) -> array[int]:
    """The rows as one int32 array, the layout the C kernel reads."""
    return array("i", itertools.chain.from_iterable(rows))


def build(
    codes: array[int],
    offsets: Sequence[int],
    pp: int,
    num_stages: int,
    m: int,
    rank_of: Sequence[int],
) -> Built:
    """Compile per-rank orders: `codes` holds (stage, kind 0..3 = F B I W, micro-batch) of
    every rank's actions in order, rank r's at triples offsets[r] .. offsets[r + 1]. Rows in a
    topological order: ranks run until an action waits on one not yet placed (F on the previous
    stage's F; B / I on its own F and the next stage's I, or B if that stage has no I; W on its
    I); a stack of runnable ranks; a blocked rank resumes when what it waits on is placed."""
    if _kernel is None:
        return build_python(codes, offsets, pp, num_stages, m, rank_of)
    n = len(codes) // 3
    flat, positions, peak = array("i", bytes(24 * n)), array("i", bytes(4 * n)), array("i")
    peak.frombytes(bytes(4 * num_stages))
    status = _kernel.build(
        codes, array("i", offsets), pp, num_stages, m, array("i", rank_of), flat, positions, peak
    )
    if status != OK:
        return Built(status)
    return Built(OK, flat, positions, tuple(peak))


def build_python(
    codes: Sequence[int],
    offsets: Sequence[int],
    pp: int,
    num_stages: int,
    m: int,
    rank_of: Sequence[int],
) -> Built:
    """`build` in Python."""
    n = len(codes) // 3
    size = num_stages * 4 * m
    present = bytearray(size)
    keyed: list[list[int]] = []
    held, peak = [0] * num_stages, [0] * num_stages
    for rank in range(pp):
        keys = []
        for j in range(offsets[rank], offsets[rank + 1]):
            stage, kind, mb = codes[3 * j], codes[3 * j + 1], codes[3 * j + 2]
            if not (0 <= stage < num_stages and 0 <= kind <= 3 and 0 <= mb < m):
                return Built(BAD_ACTION)
            if rank_of[stage] != rank:
                return Built(BAD_ACTION)
            k = (stage * 4 + kind) * m + mb
            present[k] = 1
            keys.append(k)
            if kind == 0:
                held[stage] += 1
                peak[stage] = max(peak[stage], held[stage])
            elif kind != 2:
                held[stage] -= 1
        keyed.append(keys)
    position = [-1] * size
    placed = [-1] * n
    rows: list[Row] = []
    pointer = [0] * pp
    waiting: dict[int, list[int]] = {}
    queue = list(range(pp))
    last = num_stages - 1
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
            position[k] = len(rows)
            placed[offsets[rank] + pointer[rank]] = len(rows)
            p1 = position[d1] if d1 >= 0 else -1
            p2 = position[d2] if d2 >= 0 else -1
            rows.append((rank, kind * num_stages + stage, p1, l1, p2, l2))
            queue.extend(waiting.pop(k, ()))
            pointer[rank] += 1
    if len(rows) < n:
        return Built(DEADLOCK)
    return Built(OK, flatten(rows), array("i", placed), tuple(peak))


def rows_of(flat: array[int]) -> tuple[Row, ...]:
    """The rows of a flat table (what the Python loops read)."""
    return tuple(zip(*(flat[k::6] for k in range(6)), strict=True))


def run(
    flat: array[int],
    dur: Sequence[float],
    lag: Sequence[float],
    pp: int,
    rows: Sequence[Row] | None = None,
) -> tuple[float, Sequence[float], Sequence[float], Sequence[float]]:
    """(makespan, start, end, busy): the largest end time (0.0 without actions), each
    action's start and end time, each rank's busy time. `rows`: the same table as tuples, if
    the caller keeps them (the Python fallback reads those)."""
    if _kernel is None:
        return run_python(rows if rows is not None else rows_of(flat), dur, lag, pp)
    n = len(flat) // 6
    start, end, busy = array("d", bytes(8 * n)), array("d", bytes(8 * n)), array("d", bytes(8 * pp))
    makespan = _kernel.run(flat, _doubles(dur), _doubles(lag), pp, start, end, busy)
    return makespan, start, end, busy


def critical(
    flat: array[int],
    dur: Sequence[float],
    lag: Sequence[float],
    pp: int,
    num_stages: int,
    rows: Sequence[Row] | None = None,
) -> tuple[float, list[int], list[int]]:
    """(makespan, visits per duration slot, visits per boundary) of one longest path."""
    if _kernel is None:
        rows = rows if rows is not None else rows_of(flat)
        return critical_python(rows, dur, lag, pp, num_stages)
    counts, xs = array("i", bytes(16 * num_stages)), array("i", bytes(4 * max(0, num_stages - 1)))
    makespan = _kernel.critical(flat, _doubles(dur), _doubles(lag), pp, num_stages, counts, xs)
    return makespan, counts.tolist(), xs.tolist()


def prepare(flat: array[int], pp: int) -> object | None:
    """The C kernel's checked copy of a compiled schedule (None without the kernel): `makespan`
    and `critical_prepared` then skip re-checking its rows on every pass."""
    return None if _kernel is None else _kernel.prepare(flat, pp)


def makespan(
    handle: object, dur: Sequence[float], lag: Sequence[float], pp: int
) -> tuple[float, Sequence[float]]:
    """(makespan, busy) of `run` over a prepared schedule, without start and end times."""
    assert _kernel is not None
    busy = array("d", bytes(8 * pp))
    return _kernel.makespan(handle, _doubles(dur), _doubles(lag), busy), busy


def critical_prepared(
    handle: object, dur: Sequence[float], lag: Sequence[float], num_stages: int
) -> tuple[float, list[int], list[int]]:
    """`critical` over a prepared schedule."""
    assert _kernel is not None
    counts, xs = array("i", bytes(16 * num_stages)), array("i", bytes(4 * max(0, num_stages - 1)))
    top = _kernel.critical_prepared(handle, _doubles(dur), _doubles(lag), num_stages, counts, xs)
    return top, counts.tolist(), xs.tolist()


def held_points(
    codes: array[int], offsets: Sequence[int], pp: int, num_stages: int, rank_of: Sequence[int]
) -> array[int]:
    """The C walk of planner.schedules.inflight._walk over a schedule's codes: per rank, its
    undominated held points (the selection and order of inflight._undominated), as their
    count then (stage, phase 0 W / 1 F / 2 B, counts per chunk) per point (_kernel.c)."""
    assert _kernel is not None
    out = array("i")
    out.frombytes(
        _kernel.held_points(codes, array("i", offsets), pp, num_stages, array("i", rank_of))
    )
    return out


def seed_paths(flat: array[int], pp: int, num_stages: int) -> tuple[array[int], int]:
    """The C walks of planner.search.paths.rank_chain and through_rank_paths over a compiled
    schedule: every rank's chain (4 * num_stages visit counts, kind-major as the duration
    slots), then `count` fill/drain paths (two per rank with actions, in rank order; each 4 *
    num_stages slot counts then num_stages - 1 boundary counts), in one int32 array."""
    assert _kernel is not None
    paths = 4 * num_stages * pp + 2 * pp * (5 * num_stages - 1)
    out = array("i", bytes(4 * paths))
    count = _kernel.seed_paths(flat, pp, num_stages, out)
    return out, count


def _doubles(values: Sequence[float]) -> array[float]:
    return values if isinstance(values, array) else array("d", values)


def run_python(
    rows: Sequence[Row], dur: Sequence[float], lag: Sequence[float], pp: int
) -> tuple[float, list[float], list[float], list[float]]:
    """`run` in Python."""
    n = len(rows)
    end = [0.0] * (n + 1)  # end[-1]: the sentinel a missing dependency (-1) reads
    start = [0.0] * n
    free = [0.0] * pp
    busy = [0.0] * pp
    for i, (rank, slot, d1, l1, d2, l2) in enumerate(rows):
        t = free[rank]
        ready = end[d1] + lag[l1]
        if ready > t:
            t = ready
        ready = end[d2] + lag[l2]
        if ready > t:
            t = ready
        duration = dur[slot]
        start[i] = t
        free[rank] = end[i] = t + duration
        busy[rank] += duration
    end.pop()
    return max(end, default=0.0), start, end, busy


def critical_python(
    rows: Sequence[Row], dur: Sequence[float], lag: Sequence[float], pp: int, num_stages: int
) -> tuple[float, list[int], list[int]]:
    """`critical` in Python."""
    n = len(rows)
    if n == 0:
        return 0.0, [0] * (4 * num_stages), [0] * max(0, num_stages - 1)
    end = [0.0] * (n + 1)
    pred = [-1] * n  # predecessor on the longest path
    pred_lag = [0] * n  # lag slot of the edge taken (0: same rank)
    last = [-1] * pp
    free = [0.0] * pp
    for i, (rank, slot, d1, l1, d2, l2) in enumerate(rows):
        t, p, pl = free[rank], last[rank], 0
        ready = end[d1] + lag[l1]
        if ready > t:
            t, p, pl = ready, d1, l1
        ready = end[d2] + lag[l2]
        if ready > t:
            t, p, pl = ready, d2, l2
        end[i] = free[rank] = t + dur[slot]
        pred[i], pred_lag[i] = p, pl
        last[rank] = i
    end.pop()
    counts = [0] * (4 * num_stages)
    xs = [0] * max(0, num_stages - 1)
    cur = max(range(n), key=end.__getitem__)
    makespan = end[cur]
    while cur >= 0:
        counts[rows[cur][1]] += 1
        if pred_lag[cur] > 0:
            xs[pred_lag[cur] - 1] += 1
        cur = pred[cur]
    return makespan, counts, xs


def generate_codes(kind: int, pp: int, vpp: int, m: int) -> tuple[bytes, list[int]]:
    """The C generator (planner.schedules.generators.order_codes): int32 codes as bytes and
    per-rank action counts. Only with the extension built (`available()`)."""
    if _kernel is None:
        raise RuntimeError("the C kernel is not built")
    codes, counts = _kernel.generate(kind, pp, vpp, m)
    return codes, counts
