"""A lower bound of the bubble fraction of every partition of one configuration (objective
`bubble`).

The simulator's bubble is the ranks' idle share of the pipeline time,
`1 - sum_r busy_r / (pp * M)` (planner.schedules.simulate: idle = sum over ranks of M - busy_r,
bubble = idle / (pp * M), M the makespan). Every stage runs each of the m micro-batches' F and
backward once, so `sum_r busy_r = m * sum_s (f_s + b_s)` for the stage durations f, b (b is the
full backward, I + W for split schedules), and M is the longest path through the schedule's
DAG, at least every path's length L_P(d) (planner.search.paths). So for every partition

    bubble(d) >= 1 - (1 / pp) * max over d of  m * sum_s (f_s + b_s) / max_P L_P(d).

The ratio is scale-free: with t = 1 / M the maximum is the linear program (Charnes and Cooper
1962, "Programming with linear fractional functionals", the transformation of a ratio
objective into an LP)

    maximise  m * sum_s (f_s + i_s + w_s)
    s.t.      L_P(f, i, w) <= 1                      for every path P in the set
              sum_s f_s = t * F,  sum_s w_s = t * W,  t * I_lo <= sum_s i_s <= t * I_hi
              f_s >= t * f_lo_s, i_s >= t * i_lo_s, w_s >= t * w_lo_s;  everything >= 0

over the scaled stage durations (I = b - w the input-gradient part, p2p left out: it only
lengthens the paths). F, W and [I_lo, I_hi] are what any partition's stage sums add up to
(planner.cost.partition: fw(s) = sum fw + oF, w(s) = sum bw_weight + oW, bw(s) - w(s) =
sum bw_input in the layer's mode + oB - oW, over S non-empty stages), the lower bounds per
stage what its least layer gives (stage 0 always holds the first layer, stage S - 1 the last,
and a stage between them only middle layers: its floor is the least middle layer's).
Every partition's durations, scaled by 1 / M, satisfy the LP, so its value bounds the ratio
from above whatever set of paths it has: the floor is valid after any round. The paths grow
by row generation: the LP's optimum is simulated and its critical path added while it is
longer than 1; once none is, the LP's optimum is a duration vector whose bubble is the floor
(the least bubble of any stage durations with these sums and stage minimums, so never above
the least of a partition)."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from planner.cost import PartitionInputs
from planner.schedules import StageDurations
from planner.search.bounds import EdgeChains, edge_chains, rank_edges, restricted
from planner.search.cutlp import GLOP_PARAMETERS, MARGIN
from planner.search.partition import schedule_of
from planner.search.paths import PathCut, critical_path, seed_cuts
from planner.specs.base import RecomputeMode

# The sums of a partition's stage durations are float additions in another order than the
# totals here: the equalities get this relative slack (far above the rounding of a few dozen
# additions), the per-stage lower bounds the same.
SUM_SLACK = 1e-9
# A simulated path longer than 1 + this (scaled) is a new row: GLOP's primal tolerance.
VIOLATION = 1e-7


def bubble_floor(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...], *, rounds: int
) -> float:
    """A lower bound of the simulated bubble fraction of every partition of the
    configuration (module docstring), after at most `rounds` rounds of path generation;
    0.0 with one rank (no pipeline), with no rounds, or where the LP gives nothing."""
    if inputs.pp <= 1 or rounds <= 0:
        return 0.0
    x = restricted(inputs, modes)
    sched = schedule_of(x)
    n_st, m = x.num_stages, x.num_microbatches
    of, ob, ow = x.stage_overhead_s
    oi = ob - ow
    lo_k = [min(bi) for bi in x.bw_input_s]
    hi_k = [max(bi) for bi in x.bw_input_s]
    total_f = sum(x.fw_s) + n_st * of
    total_w = sum(x.bw_weight_s) + n_st * ow
    total_i_lo = sum(lo_k) + n_st * oi
    total_i_hi = sum(hi_k) + n_st * oi
    last = x.num_layers - 1
    # Stages are contiguous runs of layers, the first layer in stage 0 and the last in
    # stage S - 1 only, so a middle stage holds only middle layers: its floor is the least
    # middle layer's (with fewer than 3 layers there is no middle stage).
    mid = slice(1, last) if x.num_layers >= 3 else slice(None)
    least_f, least_w, least_i = min(x.fw_s[mid]), min(x.bw_weight_s[mid]), min(lo_k[mid])

    def floor_of(layer: int | None, s: int) -> tuple[float, float, float]:
        if layer is None:
            return least_f + of, least_i + oi, least_w + ow
        return x.fw_s[layer] + of, lo_k[layer] + oi, x.bw_weight_s[layer] + ow

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - ships with OR-Tools
        raise RuntimeError("OR-Tools has no GLOP solver")
    solver.SetSolverSpecificParametersAsString(GLOP_PARAMETERS)
    inf = solver.infinity()
    t = solver.NumVar(0.0, inf, "t")
    f = [solver.NumVar(0.0, inf, "") for _ in range(n_st)]
    i = [solver.NumVar(0.0, inf, "") for _ in range(n_st)]
    w = [solver.NumVar(0.0, inf, "") for _ in range(n_st)]
    for vars_, lo, hi in (
        (f, total_f, total_f),
        (w, total_w, total_w),
        (i, total_i_lo, total_i_hi),
    ):
        low = solver.Constraint(0.0, inf)  # sum >= t * lo (1 - slack)
        high = solver.Constraint(-inf, 0.0)  # sum <= t * hi (1 + slack)
        for v in vars_:
            low.SetCoefficient(v, 1.0)
            high.SetCoefficient(v, 1.0)
        low.SetCoefficient(t, -lo * (1 - SUM_SLACK))
        high.SetCoefficient(t, -hi * (1 + SUM_SLACK))
    for s in range(n_st):
        layer = 0 if s == 0 else last if s == n_st - 1 else None
        for v, floor in zip((f[s], i[s], w[s]), floor_of(layer, s), strict=True):
            row = solver.Constraint(0.0, inf)  # v >= t * floor (1 - slack)
            row.SetCoefficient(v, 1.0)
            row.SetCoefficient(t, -max(0.0, floor) * (1 - SUM_SLACK))
    objective = solver.Objective()
    for vars_ in (f, i, w):
        for v in vars_:
            objective.SetCoefficient(v, float(m))
    objective.SetMaximization()

    def add_row(cut: PathCut) -> None:
        # L_P = sum F fw + B (i + w) + I i + W w (planner.search.paths), p2p left out
        row = solver.Constraint(-inf, 1.0)
        for s in range(n_st):
            row.SetCoefficient(f[s], float(cut.f[s]))
            row.SetCoefficient(i[s], float(cut.b[s] + cut.i[s]))
            row.SetCoefficient(w[s], float(cut.b[s] + cut.w[s]))

    seen: set[PathCut] = set()
    for cut in seed_cuts(sched):
        if cut not in seen:
            seen.add(cut)
            add_row(cut)
    ratio = float(x.pp)  # busy / makespan is at most pp: the floor 0 until an LP says more
    for _ in range(rounds):
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            break
        ratio = min(ratio, objective.Value() * (1 + MARGIN))
        fs, is_, ws = ([v.solution_value() for v in vs] for vs in (f, i, w))
        durations = StageDurations(
            fw_s=tuple(max(0.0, v) for v in fs),
            bw_s=tuple(max(0.0, a) + max(0.0, b) for a, b in zip(is_, ws, strict=True)),
            w_s=tuple(max(0.0, v) for v in ws),
            p2p_s=(0.0,) * max(0, n_st - 1),
        )
        length, cut = critical_path(sched, durations)
        if length <= 1.0 + VIOLATION or cut in seen:
            break
        seen.add(cut)
        add_row(cut)
    return max(0.0, 1.0 - ratio / x.pp)


@dataclass(frozen=True)
class EdgeTerms:
    """What group_bubble_floor reads of a configuration's (restricted) PartitionInputs: the
    fill and drain chains' terms (bounds.EdgeChains), the most work of one micro-batch
    through every layer and the most overhead of one stage's actions. None reads pp, dp,
    ZeRO or the schedule's order (the layers' times of a kind are the same in every
    configuration: planner.search.kinds) except the chains' cheapest p2p."""

    chains: EdgeChains
    work: float  # sum over layers of fw + the largest input-grad backward + weight-grad
    chain: float  # sum over layers of fw + the cheapest input-grad backward
    weight: float  # sum over layers of the weight-grad backward
    overhead: float  # oF + the larger of a whole (oB) and a split (oI + oW) backward's


def edge_terms(inputs: PartitionInputs, *, hop: bool = True) -> EdgeTerms | None:
    """The EdgeTerms of `inputs` (restricted to the configuration's modes, bounds.restricted),
    the chains with the cheapest p2p where `hop` (bounds.edge_chains); None with fewer than 3
    layers."""
    chains = edge_chains(inputs, hop=hop)
    if chains is None:
        return None
    o = inputs.action_overhead
    return EdgeTerms(
        chains=chains,
        work=sum(inputs.fw_s) + sum(map(max, inputs.bw_input_s)) + sum(inputs.bw_weight_s),
        chain=sum(inputs.fw_s) + sum(map(min, inputs.bw_input_s)),
        weight=sum(inputs.bw_weight_s),
        overhead=max(0.0, o.f_s) + max(0.0, o.b_s, o.i_s + o.w_s),
    )


def edge_sum(terms: EdgeTerms, *, pp: int, drain: bool) -> float:
    """E of group_bubble_floor: the sum over ranks of bounds.rank_edges."""
    return sum(rank_edges(terms.chains, pp=pp, drain=drain))


def group_bubble_floor(
    terms: EdgeTerms | None,
    *,
    pp: int,
    m: int,
    drain: bool,
    max_stages: int,
    edges: float | None = None,
) -> float:
    """A lower bound of the simulated bubble of every partition of every configuration with
    these layer terms (edge_terms), pp ranks and m micro-batches, at most `max_stages`
    stages (pp * vpp), and no split backward where `drain`: in closed form, no LP, no
    schedule. 0.0 with one rank or without terms.

    Per rank r, e_r (bounds.rank_edges) is a lower bound of the time before r's first action (and,
    with `drain`, after its last). A rank runs its
    actions one at a time between those two, and p2p is a lag, not an action
    (planner.schedules.kernel: busy sums action durations only), so the makespan M >= e_r +
    busy_r and pp M >= W + E (W = sum_r busy_r, E = sum_r e_r). The simulator's bubble is
    1 - W / (pp M) (module docstring); for a given W it only grows with M, so it is at least
    1 - W / (W + E) = E / (W + E). M is also at least micro-batch 0's forward through every
    layer and its backward back, T = terms.chain (+ terms.weight with `drain`: a whole
    backward holds the weight gradient; bounds.chain_s), so bubble >= 1 - W / max(pp T,
    W + E), which falls as W grows: so bubble >= 1 - W_max / max(pp T, W_max + E) with
    W_max >= every partition's W. W = m * sum_s (f_s + b_s) (each stage runs each
    micro-batch once), and a partition's stage sums add up to every layer's fw and backward
    in the layer's mode plus one action overhead per stage (planner.cost.partition), so
    W_max = m * (terms.work + max_stages * terms.overhead). (With m < pp the chain term
    gives up to 1 - m / pp; the edges give E / (W_max + E) at any m.) `edges`: E where the
    caller has it (edge_sum of these terms, pp and drain; it depends on nothing else)."""
    if pp <= 1 or terms is None:
        return 0.0
    if edges is None:
        edges = edge_sum(terms, pp=pp, drain=drain)
    chain = terms.chain + (terms.weight if drain else 0.0)
    most = m * (terms.work + max_stages * terms.overhead)
    span = max(pp * chain, most + edges)  # a lower bound of pp M
    if span <= 0.0:
        return 0.0
    # rounding: lowered by a relative margin far above a few hundred additions' error
    return max(0.0, (1.0 - most / span) * (1 - SUM_SLACK) - SUM_SLACK)
