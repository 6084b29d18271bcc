"""A linear-programming floor of one configuration (GLOP), to prune it without CP-SAT.

The LP relaxes the CP-SAT model of planner.search.model: x[g, s, k] >= 0 is a *fractional*
number of run g's layers in stage s with mode k (only stages that can hold run g), every stage
holds at least one layer, contiguity is dropped. Objective: minimise T + P with
    T >= each seed path cut (its length in x plus its length over the per-action overhead
         alone, a constant; p2p left out: >= 0),
    P >= each rank's DP-sync + optimizer time,
    memory per rank <= cap - fixed.
Every real partition is a feasible point whose objective is at most its simulated step time,
so the LP optimum is a lower bound of the configuration's optimum. It is used only with a
relative margin (1e-6) above GLOP's tolerances, and only on models small enough to build fast.
"""

from __future__ import annotations

from ortools.linear_solver import pywraplp

from planner.cost import MODE_INDEX, PartitionInputs
from planner.search.model import layer_runs, undominated_modes
from planner.search.paths import PathCut
from planner.specs.base import RecomputeMode

MAX_TERMS = 60_000  # cuts x variables built in Python; above this the LP is skipped
MARGIN = 1e-6


def lp_floor_s(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...], cuts: list[PathCut]
) -> float | None:
    """A lower bound of the step time of every partition, or None (not computed)."""
    runs = layer_runs(inputs)
    n, n_st = inputs.num_layers, inputs.num_stages
    keys: list[tuple[int, int, int]] = []  # (run, stage, mode index)
    for g, run in enumerate(runs):
        lo = max(0, run.first - (n - n_st))
        hi = min(n_st - 1, run.first + run.count - 1)
        for s in range(lo, hi + 1):
            keys.extend((g, s, MODE_INDEX[m]) for m in undominated_modes(inputs, run.first, modes))
    if len(keys) * (len(cuts) + 2 * inputs.pp + 1) > MAX_TERMS:
        return None
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    x = {key: solver.NumVar(0.0, runs[key[0]].count, "") for key in keys}
    for g, run in enumerate(runs):
        row = solver.Constraint(run.count, run.count)
        for key in keys:
            if key[0] == g:
                row.SetCoefficient(x[key], 1.0)
    for s in range(n_st):
        row = solver.Constraint(1.0, solver.infinity())
        for key in keys:
            if key[1] == s:
                row.SetCoefficient(x[key], 1.0)
    t = solver.NumVar(0.0, solver.infinity(), "T")
    p = solver.NumVar(0.0, solver.infinity(), "P")
    overhead = inputs.overhead_durations  # per-action overhead: a constant per cut
    for cut in cuts:
        row = solver.Constraint(cut.length_s(overhead), solver.infinity())
        row.SetCoefficient(t, 1.0)
        for (g, s, k), var in x.items():
            i = runs[g].first
            v = cut.f[s] * inputs.fw_s[i] + (cut.b[s] + cut.w[s]) * inputs.bw_weight_s[i]
            v += (cut.b[s] + cut.i[s]) * inputs.bw_input_s[i][k]
            if v:
                row.SetCoefficient(var, -v)
    room = inputs.cap_bytes - inputs.fixed_bytes
    for r in range(inputs.pp):
        post = solver.Constraint(0.0, solver.infinity())
        post.SetCoefficient(p, 1.0)
        mem = solver.Constraint(-solver.infinity(), room)
        for (g, s, k), var in x.items():
            if inputs.stage_rank[s] != r:
                continue
            i = runs[g].first
            post.SetCoefficient(var, -inputs.post_s[i])
            act = inputs.inflight[s] * inputs.activation_bytes[i][k]
            mem.SetCoefficient(var, inputs.static_bytes[i] + act)
    solver.Minimize(t + p)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    value: float = solver.Objective().Value()
    return value
