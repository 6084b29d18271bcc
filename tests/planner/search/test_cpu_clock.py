"""CP-SAT on a CPU clock: with SolveLimits.cpu_clock a solve stops on the CPU time it used,
not on wall time, so it does the same work on a shared core; without it, CP-SAT's wall time
limits and is charged as before. Assertions are on CPU time only (a loaded machine stretches
wall time by any factor)."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from planner.cost import PartitionInputs
from planner.search import search
from planner.search.exact import SolveLimits, horizon_s, solve_config
from planner.search.model import CpuLimit, PartitionModel
from planner.search.tuning import TUNING, SearchTuning

from .cases import THREE, path_cuts, uniform_gpt_inputs
from .helpers import gpt_request

CPU = CpuLimit(poll_s=TUNING.cpu_poll_s, wall_factor=TUNING.cpu_wall_factor)
# past its budget a solve runs one poll and CP-SAT's reaction to the stop: loose, for a loaded
# machine's scheduling
OVERSHOOT_S = 0.3


def _deep() -> PartitionInputs:
    """16 interleaved stages over 122 layers: CP-SAT proves nothing about it within seconds."""
    return uniform_gpt_inputs(random.Random(3), "interleaved-1f1b", 8, 2, 120)


def _model(inputs: PartitionInputs) -> PartitionModel:
    model = PartitionModel(inputs, modes=THREE, horizon_s=horizon_s(inputs))
    for cut in path_cuts(inputs, random.Random(3), 30):
        model.add_path_cut(cut)
    return model


@contextlib.contextmanager
def _sharing_a_core() -> Iterator[None]:
    """This thread and a busy child process pinned to one core: each gets about half of it."""
    mask = os.sched_getaffinity(0)
    core = min(mask)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {core})
        os.sched_setaffinity(0, {core})
        yield
    finally:
        os.sched_setaffinity(0, mask)
        busy.kill()
        busy.wait()


def test_a_solve_on_a_shared_core_stops_on_its_cpu_budget() -> None:
    model, budget = _model(_deep()), 0.4
    with _sharing_a_core():
        before, process_before = time.thread_time(), time.process_time()
        out = model.solve(time_limit_s=budget, workers=1, seed=0, cpu=CPU)
        used = time.thread_time() - before
        process = time.process_time() - process_before
    assert out.status in ("FEASIBLE", "UNKNOWN")  # the budget stopped it, not a proof
    # charged with the CPU seconds this thread spent in it (not CP-SAT's wall time, which
    # the busy neighbour stretches to about twice that)
    assert budget <= out.time_s <= budget + OVERSHOOT_S
    assert out.time_s <= used <= out.time_s + 0.1
    # the watchdog sleeps through what is left, not polling every cpu_poll_s of the
    # stretched wall time: its own CPU time (counted by the search's process clock) is tiny
    assert process - used < 0.01 * budget


def test_with_two_workers_the_process_cpu_clock_counts_both() -> None:
    model, budget = _model(_deep()), 0.4
    before = time.process_time()
    out = model.solve(time_limit_s=budget, workers=2, seed=0, cpu=CPU)
    used = time.process_time() - before
    assert out.status in ("FEASIBLE", "UNKNOWN")
    assert budget <= out.time_s <= budget + OVERSHOOT_S
    assert out.time_s <= used <= out.time_s + 0.1


def test_without_a_cpu_limit_a_solve_is_charged_its_wall_time() -> None:
    model = _model(_deep())
    out = model.solve(time_limit_s=0.2, workers=1, seed=0)
    assert out.status in ("FEASIBLE", "UNKNOWN")
    assert out.time_s == out.wall_time_s


def test_solve_config_on_a_cpu_clock_spends_its_budget_in_cpu_seconds() -> None:
    inputs, budget = _deep(), 0.5
    limits = SolveLimits(time_limit_s=budget, workers=1, cpu_clock=True)
    with _sharing_a_core():
        before = time.thread_time()
        res = solve_config(inputs, modes=THREE, limits=limits)
        used = time.thread_time() - before
    assert res.status in ("FEASIBLE", "UNKNOWN")
    assert res.solver_calls >= 1
    # cpsat_phase stops once the budget's CPU seconds are spent (less than one model build
    # short of it at most), and they were spent by this thread
    assert budget - 0.05 <= res.solver_s <= budget + OVERSHOOT_S
    assert res.solver_s <= used


def test_a_search_on_a_cpu_clock_proves_the_same_optimum() -> None:
    request = gpt_request(search={"time_limit_s": 60, "top_k": 0, "workers": 1})
    wall = search(request, clock=time.monotonic)
    cpu = search(request, clock=time.process_time, cpu_clock=True)
    assert wall.search.status == cpu.search.status == "OPTIMAL"
    assert cpu.search.solver_calls > 0
    assert cpu.plan.prediction.step_time_s == wall.plan.prediction.step_time_s
    # the driver's own record of the flag, the one it hands each configuration's SolveLimits
    assert cpu.search.details["clock"] == "caller, cp-sat on cpu time"
    assert wall.search.details["clock"] == "caller"


def test_solve_limits_stop_on_cpu_time_only_when_asked() -> None:
    assert SolveLimits().cpu(TUNING) is None
    got = SolveLimits(cpu_clock=True).cpu(SearchTuning(cpu_poll_s=0.01, cpu_wall_factor=4.0))
    assert got == CpuLimit(poll_s=0.01, wall_factor=4.0)


def test_the_cpu_limit_knobs_are_validated() -> None:
    with pytest.raises(ValueError, match=r"SearchTuning.cpu_poll_s = 0 is not positive"):
        SearchTuning(cpu_poll_s=0)
    with pytest.raises(ValueError, match=r"SearchTuning.cpu_wall_factor = 0.5 is below 1"):
        SearchTuning(cpu_wall_factor=0.5)
