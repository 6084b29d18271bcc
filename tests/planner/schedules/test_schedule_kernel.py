"""The C longest-path kernel against its Python twin: bit-identical floats and the same path.

Durations are drawn from a few integers so that ties (where the tie-break decides which path is
reported) are common, and from arbitrary floats so that rounding would show.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from array import array

import pytest

from planner.errors import SpecError
from planner.schedules import Schedule, StageDurations, generate, kernel, simulate
from planner.schedules.generators import check_generate_args, order_codes, order_codes_python
from planner.schedules.inflight import peak_inflight
from planner.schedules.ir import Action, ActionKind
from planner.schedules.simulate import compiled_rows
from planner.schedules.validate import KIND_INDEX
from planner.search.paths import critical_path
from planner.specs.base import ScheduleName

CASES = [
    ("gpipe", 4, 1, 6),
    ("1f1b", 5, 1, 9),
    ("interleaved-1f1b", 4, 3, 8),
    ("zb-h1", 6, 1, 7),
    ("zbv", 4, 2, 10),
    ("1f1b", 1, 1, 3),
]


def test_the_c_kernel_is_built() -> None:
    # `pip install -e .` compiles it (setup.py); without it the search is 50-100x slower
    assert kernel.available()


def _tables(n_st: int, rng: random.Random, ties: bool) -> tuple[list[float], list[float]]:
    def value() -> float:
        return float(rng.randint(0, 3)) if ties else rng.uniform(0.0, 5.0)

    fw = [value() for _ in range(n_st)]
    w = [value() for _ in range(n_st)]
    bw = [x + value() for x in w]
    dur = [*fw, *bw, *(b - x for b, x in zip(bw, w, strict=True)), *w]
    lag = [0.0, *(value() for _ in range(n_st - 1))]
    return dur, lag


def _durations(rng: random.Random, n_st: int) -> StageDurations:
    w = [rng.uniform(0, 1) for _ in range(n_st)]
    return StageDurations(
        fw_s=tuple(rng.uniform(0, 2) for _ in range(n_st)),
        bw_s=tuple(x + rng.uniform(0, 2) for x in w),
        w_s=tuple(w),
        p2p_s=tuple(rng.uniform(0, 0.5) for _ in range(n_st - 1)),
    )


@pytest.mark.skipif(not kernel.available(), reason="the C kernel was not built")
@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
@pytest.mark.parametrize("ties", [True, False])
def test_kernel_matches_python(name: str, pp: int, vpp: int, m: int, ties: bool) -> None:
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    rows, flat = compiled_rows(sched)
    rng = random.Random(f"{name}{pp}{vpp}{m}{ties}")
    for _ in range(30):
        dur, lag = _tables(sched.num_stages, rng, ties)
        makespan, start, end, busy = kernel.run(flat, dur, lag, pp)
        assert isinstance(end, array)  # the C path ran
        want = kernel.run_python(rows, dur, lag, pp)
        assert (makespan, list(start), list(end), list(busy)) == want
        got = kernel.critical(flat, dur, lag, pp, sched.num_stages)
        assert got == kernel.critical_python(rows, dur, lag, pp, sched.num_stages)
        assert got[0] == want[0] == max(want[2])
        # the prepared (checked-once) passes: the same makespan, busy times and path
        handle = kernel.prepare(flat, pp)
        durs, lags = array("d", dur), array("d", lag)
        top, busy_prepared = kernel.makespan(handle, durs, lags, pp)
        assert (top, list(busy_prepared)) == (want[0], want[3])
        assert kernel.critical_prepared(handle, durs, lags, sched.num_stages) == got


@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
def test_critical_path_length_is_the_makespan(name: str, pp: int, vpp: int, m: int) -> None:
    """The reported path is a real longest path: its length under the durations (counts times
    durations, plus p2p) is the simulated step time."""
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    rng = random.Random(name)
    for _ in range(20):
        d = _durations(rng, sched.num_stages)
        makespan, cut = critical_path(sched, d)
        step = simulate(sched, d, with_timeline=False).step_time_s
        assert makespan == step
        assert cut.length_s(d) == pytest.approx(step, rel=1e-12)


def test_kernel_rejects_a_dependency_on_a_later_action() -> None:
    if not kernel.available():
        pytest.skip("the C kernel was not built")
    from planner.schedules import _kernel

    bad = array("i", [0, 0, 1, 0, -1, 0, 0, 0, -1, 0, -1, 0])  # row 0 waits on row 1
    out = array("d", bytes(16))
    with pytest.raises(ValueError, match="out of range"):
        _kernel.run(bad, array("d", [1.0]), array("d", [0.0]), 1, out, out, array("d", [0.0]))


def test_prepared_kernel_refuses_bad_rows_and_short_tables() -> None:
    if not kernel.available():
        pytest.skip("the C kernel was not built")
    bad = array("i", [0, 0, 1, 0, -1, 0, 0, 0, -1, 0, -1, 0])  # row 0 waits on row 1
    with pytest.raises(ValueError, match="out of range"):
        kernel.prepare(bad, 1)
    _, flat = compiled_rows(generate("zb-h1", pp=3, vpp=1, num_microbatches=3))  # reads W slots
    handle = kernel.prepare(flat, 3)
    with pytest.raises(ValueError, match="too short"):
        kernel.makespan(handle, array("d", [1.0] * 11), array("d", [0.0] * 3), 3)
    with pytest.raises(ValueError, match="too short"):
        kernel.critical_prepared(handle, array("d", [1.0] * 12), array("d", [0.0]), 3)
    with pytest.raises(ValueError, match="bad output"):
        kernel.critical_prepared(handle, array("d", [1.0] * 12), array("d", [0.0] * 3), 2)
    with pytest.raises(ValueError):
        kernel.makespan(object(), array("d", [1.0] * 12), array("d", [0.0] * 3), 3)


def test_seed_paths_refuses_bad_rows_and_short_output() -> None:
    if not kernel.available():
        pytest.skip("the C kernel was not built")
    from planner.schedules import _kernel

    bad = array("i", [0, 0, 1, 0, -1, 0, 0, 0, -1, 0, -1, 0])  # row 0 waits on row 1
    with pytest.raises(ValueError, match="out of range"):
        kernel.seed_paths(bad, 1, 1)
    _, flat = compiled_rows(generate("zb-h1", pp=3, vpp=1, num_microbatches=3))
    with pytest.raises(ValueError, match="out of range"):  # slots of 3 stages, not 2
        kernel.seed_paths(flat, 3, 2)
    with pytest.raises(ValueError, match="wrong size"):
        _kernel.seed_paths(flat, 3, 3, array("i", bytes(4 * 12)))


def _codes(sched: Schedule) -> tuple[array[int], list[int], list[int]]:
    codes = array(
        "i",
        [x for o in sched.orders for a in o for x in (a.stage, KIND_INDEX[a.kind], a.microbatch)],
    )
    offsets = [0, *itertools.accumulate(len(o) for o in sched.orders)]
    return codes, offsets, [sched.rank_of(s) for s in range(sched.num_stages)]


@pytest.mark.skipif(not kernel.available(), reason="the C kernel was not built")
@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
def test_build_matches_python(name: str, pp: int, vpp: int, m: int) -> None:
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    codes, offsets, rank_of = _codes(sched)
    got = kernel.build(codes, offsets, pp, sched.num_stages, m, rank_of)
    want = kernel.build_python(codes, offsets, pp, sched.num_stages, m, rank_of)
    assert got.status == kernel.OK
    assert (got.flat, got.positions) == (want.flat, want.positions)
    assert kernel.rows_of(got.flat) == compiled_rows(sched)[0]
    assert got.peak_inflight == want.peak_inflight == peak_inflight(sched)


@pytest.mark.parametrize("builder", ["c", "python"])
def test_build_reports_bad_actions_and_deadlocks(builder: str) -> None:
    if builder == "c" and not kernel.available():
        pytest.skip("the C kernel was not built")
    fn = kernel.build if builder == "c" else kernel.build_python
    # two ranks, one stage each, one micro-batch: F0 F1 / B1 B0 in a valid order
    ok = array("i", [0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0])
    assert fn(ok, [0, 2, 4], 2, 2, 1, [0, 1]).status == kernel.OK
    # rank 0 runs its B before stage 1's B exists: it waits forever on it
    # (rank 1 waits on rank 0's F, which comes after the B)
    dead = array("i", [0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0])
    assert fn(dead, [0, 2, 4], 2, 2, 1, [0, 1]).status == kernel.DEADLOCK
    wrong_rank = array("i", [1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0])  # stage 1 on rank 0
    assert fn(wrong_rank, [0, 2, 4], 2, 2, 1, [0, 1]).status == kernel.BAD_ACTION
    late_mb = array("i", [0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0])  # micro-batch 1 of 1
    assert fn(late_mb, [0, 2, 4], 2, 2, 1, [0, 1]).status == kernel.BAD_ACTION


@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
def test_simulator_without_the_kernel_gives_the_same_result(
    name: str, pp: int, vpp: int, m: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback path end to end: simulate (timeline included) and the critical path."""
    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    d = _durations(random.Random(m), sched.num_stages)
    fast = simulate(sched, d), critical_path(sched, d)
    monkeypatch.setattr(kernel, "_kernel", None)
    assert not kernel.available()
    assert (simulate(sched, d), critical_path(sched, d)) == fast


def _grid() -> list[tuple[ScheduleName, int, int, int]]:
    out: list[tuple[ScheduleName, int, int, int]] = []
    for pp, m in itertools.product((1, 2, 3, 4, 5, 8), (1, 2, 3, 4, 6, 7, 8, 12, 16, 24)):
        out += [("gpipe", pp, 1, m), ("1f1b", pp, 1, m), ("zbv", pp, 2, m)]
        for name, vpp in (("zb-h1", 1), ("zb-h1", 2), ("interleaved-1f1b", 2)):
            out.append((name, pp, vpp, m))
        out += [("interleaved-1f1b", pp, 3, m), ("interleaved-1f1b", pp, 5, m)]
    return [c for c in out if _valid(*c)]


def _valid(name: ScheduleName, pp: int, vpp: int, m: int) -> bool:
    try:
        check_generate_args(name, pp=pp, vpp=vpp, num_microbatches=m)
    except SpecError:
        return False
    return True


def test_the_c_generator_writes_the_python_generators_orders() -> None:
    """Every schedule on a grid of pp, vpp and m: the C loops' codes equal the Python
    generators' (order_codes_python), action for action."""
    grid = _grid()
    assert len(grid) > 300
    for name, pp, vpp, m in grid:
        assert order_codes(name, pp, vpp, m) == order_codes_python(name, pp, vpp, m), (
            name,
            pp,
            vpp,
            m,
        )


def test_generated_orders_read_like_a_tuple_of_action_tuples() -> None:
    sched = generate("interleaved-1f1b", pp=4, vpp=2, num_microbatches=8)
    orders = sched.orders
    codes, counts = order_codes_python("interleaved-1f1b", 4, 2, 8)
    plain = tuple(
        tuple(
            Action(
                codes[j],
                (ActionKind.F, ActionKind.B, ActionKind.I, ActionKind.W)[codes[j + 1]],
                codes[j + 2],
            )
            for j in range(3 * lo, 3 * hi, 3)
        )
        for lo, hi in itertools.pairwise(itertools.accumulate(counts, initial=0))
    )
    assert len(orders) == 4 and [len(o) for o in orders] == counts
    assert orders == plain and plain == orders and hash(orders) == hash(plain)
    assert orders[-1] == plain[3] and orders[1:3] == plain[1:3]
    assert dataclasses.replace(sched, orders=plain) == sched
    with pytest.raises(IndexError):
        orders[4]


@pytest.mark.parametrize(
    ("kind", "pp", "vpp", "m"),
    [(4, 3, 1, 4), (0, 2, 2, 4), (1, 2, 3, 4), (2, 0, 2, 4), (5, 2, 2, 4)],
)
def test_the_c_generator_refuses_arguments_that_would_write_out_of_bounds(
    kind: int, pp: int, vpp: int, m: int
) -> None:
    """zbv with vpp != 2 or gpipe / 1f1b with vpp != 1 would index stages past pp * vpp:
    a ValueError, never a write out of bounds (generate checks first; this is the C side)."""
    with pytest.raises(ValueError, match="bad arguments"):
        kernel.generate_codes(kind, pp, vpp, m)
