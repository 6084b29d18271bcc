"""The CP-SAT model of one configuration: stage boundaries and per-layer recompute.

Data -> variables -> constraints -> objective -> solve -> decode (OR-Tools sample style).

Data. The layer list is cut into *runs* of consecutive identical layers (same numbers in every
field of PartitionInputs); a Megatron GPT has three: embedding, the decoder blocks, the head.
Cost and memory only depend on how many layers of each run a stage holds and in which mode,
never on their order inside the stage, so the model counts layers instead of placing them.

Variables (S = pp * vpp stages, runs g = [a_g, a_g + n_g), allowed modes k):
    b[s]        first layer of stage s (b[0] = 0, b[S] = L, b[s] + 1 <= b[s+1]: contiguous,
                ordered, non-empty stages; this also breaks every symmetry of the stage order)
    c[g, s]     = clamp(b[s] - a_g, 0, n_g): layers of run g before stage s (min/max equalities)
    y[g, s]     = c[g, s+1] - c[g, s]: layers of run g in stage s
    z[g, s, k]  layers of run g in stage s with mode k, sum_k z[g, s, k] = y[g, s]
    e[s, j]     the last layer of stage s lies in p2p segment j (runs merged by equal p2p)
    T, P        pipeline lower bound and slowest rank's DP-sync + optimizer time (scaled units)

Constraints.
    memory, per rank r and held point p of r (memory_rows; planner.cost.partition; the rows
        of seed_points first, the others as decoded partitions break them):
                         sum_{s on r} sum_g floor(static_g) y[g,s]
                         + sum_k floor((1 + frag) p.counts_s act_{g,k}) z[g,s,k]
                         <=  cap - fixed - (1 + frag) loss_p
        (floors make this a relaxation: every partition that fits in floating point is
        feasible here; a decoded partition that does not fit is cut off by a no-good). A row
        at a backward of stage s also charges s's recompute transient tau_s (_transient: at
        least each recomputed run's act(none) - act(k), rounded down), unless it charges the
        loss temporary (the scorer charges the larger of the two there: leaving tau_s out
        keeps the row a relaxation)
    post, per rank r:    P >= sum_{s on r} sum_g floor(post_g) y[g,s]
    path cuts:           T >= sum_s sum_k floor(F_P[s] fw + (B_P[s]+W_P[s]) w_weight
                                                 + (B_P[s]+I_P[s]) bw_input_k) z
                                + floor(X_P[s] p2p_j) e + floor(O_P)
        (sum_k z = y: each layer's whole term is rounded once)
        one per critical path P collected so far (planner.search.paths): each is a valid
        lower bound of the simulator's makespan, rounded down. O_P is the path's length over
        the per-action overhead alone (PartitionInputs.overhead_durations: every stage's
        durations gain a constant, so the path's length gains a constant; 0 without overhead).
    stage split (framework): "first_last" equal layer counts on middle stages, "uniform" equal
        counts of the main run on every stage.
    incumbent:           T + P <= K (the best simulated step time, scaled, minus one unit)

Objective given to CP-SAT:  minimise T + P  — a lower bound of the step time
(simulated pipeline makespan + slowest rank's post time) that tightens as cuts are added;
planner.search.exact turns it into an exact search. Once an incumbent bounds T + P <= K, the
objective is dropped (`solve(feasibility=True)`): any partition under K is simulated next, and
CP-SAT refutes "some partition has T + P <= K" much faster than it proves a minimum.

Solve time. CP-SAT limits a solve by wall time (`max_time_in_seconds`; its `user_time` is
its wall time too, and SatParameters has no CPU-time limit), so a solve on a loaded core does
less work within the same limit. With a `CpuLimit` the solve is stopped on CPU time instead
(`solve_on_cpu`), so a search charged by a CPU clock does the same work whatever the load.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ortools.sat.python import cp_model

from planner.cost.partition import MODE_INDEX, PartitionInputs
from planner.memo import PerObject
from planner.schedules import ActionKind, HeldPoint, rank_stages
from planner.search.partition import Partition
from planner.search.paths import PathCut
from planner.specs.base import RecomputeMode

StageSplit = Literal["any", "first_last", "uniform"]
Key = tuple[str, int, int, int]  # ("y", g, s, 0), ("z", g, s, k), ("e", s, j, 0)
# a path cut's term of one expression (PartitionModel._cut_terms)
_CutTerm = tuple[Key, int, float, float | None, float]
# 2^38 units per reference step time: the floor-rounding of a cut loses < 1 unit per layer
# and boundary (< L + S units: each layer's whole term is one coefficient of its mode's
# count, add_path_cut; about half that on average). The proof tolerance (exact.REL_TOL =
# 5e-10 = 137 units) must exceed it for partitions that *tie* the incumbent to be cut off by
# the bound instead of one no-good at a time: always where L + S < 137, and usually up to
# twice that. (OR-Tools 9.15's presolve once misjudged a model at 2^40.)
HORIZON_UNITS = 2**38


@dataclass(frozen=True)
class Run:
    first: int
    count: int


def layer_runs(inputs: PartitionInputs) -> tuple[Run, ...]:
    """Maximal runs of consecutive layers with identical numbers (kept per PartitionInputs:
    the LP, probing, branching and CP-SAT model of a configuration all read them)."""
    return _RUNS.get(inputs, lambda: _layer_runs(inputs))


_RUNS: PerObject[tuple[Run, ...]] = PerObject()


def _layer_runs(inputs: PartitionInputs) -> tuple[Run, ...]:
    def sig(i: int) -> tuple[object, ...]:
        return (
            inputs.fw_s[i],
            inputs.bw_input_s[i],
            inputs.bw_weight_s[i],
            inputs.p2p_s[i],
            inputs.activation_bytes[i],
            inputs.static_bytes[i],
            inputs.post_s[i],
        )

    runs: list[Run] = []
    for i in range(inputs.num_layers):
        if runs and sig(i) == sig(runs[-1].first):
            runs[-1] = Run(runs[-1].first, runs[-1].count + 1)
        else:
            runs.append(Run(i, 1))
    return tuple(runs)


def memory_rows(
    inputs: PartitionInputs, rank: int, points: tuple[HeldPoint, ...] | None = None
) -> tuple[tuple[HeldPoint, dict[int, int], float], ...]:
    """One memory row per held point of `rank` (`points`, default seed_points): the point,
    the slot of each of the rank's stages in its counts, and the bytes the row charges
    whatever the partition: (1 + frag) x the loss temporary when the point runs the last
    stage's F or backward (the recompute transient depends on the partition: PartitionModel
    charges it with a variable per stage, the LP leaves it out)."""
    stages = rank_stages(inputs.stage_rank)[rank]
    slot = {s: j for j, s in enumerate(stages)}
    grow = 1.0 + inputs.fragmentation_fraction
    last = inputs.num_stages - 1
    rows = []
    for p in seed_points(inputs, rank) if points is None else points:
        loss = inputs.loss_bytes if p.stage == last and p.phase is not ActionKind.W else 0.0
        rows.append((p, slot, grow * loss))
    return tuple(rows)


def seed_points(inputs: PartitionInputs, rank: int) -> tuple[HeldPoint, ...]:
    """The held points whose memory rows a model starts with: per stage of the rank the point
    holding the most of it, and the point holding the most in all (ties: the most in all, then
    a backward's, whose transient is largest). With one chunk per rank that is its one point;
    with several a rank may have dozens (pp = 64, vpp = 2: up to 128), whose rows the
    exactness loop adds when a decoded partition breaks one (planner.search.exact)."""
    points = inputs.rank_points[rank]
    if len(points) <= 1:
        return points

    def key(j: int | None, p: HeldPoint) -> tuple[int, int, bool]:
        return (p.counts[j] if j is not None else 0, sum(p.counts), p.phase is ActionKind.B)

    chosen: dict[HeldPoint, None] = {}
    for j in (None, *range(len(points[0].counts))):
        chosen.setdefault(max(points, key=functools.partial(key, j)))
    return tuple(chosen)


@dataclass(frozen=True)
class SolveOutcome:
    """One solve's result. `time_s` is what the solve is charged: CP-SAT's wall time, or
    under a CpuLimit the CPU seconds it used (solve_on_cpu); `wall_time_s` is CP-SAT's."""

    status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]
    partition: Partition | None
    objective_units: int | None
    wall_time_s: float
    time_s: float


@dataclass(frozen=True)
class CpuLimit:
    """Stop a solve on its CPU time (solve_on_cpu): the budget is checked every `poll_s`
    seconds at most as it runs out, and CP-SAT's own wall-time limit, `wall_factor` x the
    budget, is only a safety net (a solve that gets less than 1 / wall_factor of a core
    stops on it)."""

    poll_s: float
    wall_factor: float


def solve_on_cpu(
    solver: cp_model.CpSolver, model: cp_model.CpModel, *, budget_s: float, poll_s: float
) -> tuple[cp_model.CpSolverStatus, float]:
    """Solve `model`, stopped once it has used `budget_s` CPU seconds: its status and CPU
    seconds used.

    With one worker CP-SAT searches in the calling thread, so that thread's CPU clock is
    read; with more, their threads are CP-SAT's own and the process's CPU clock (which counts
    them all) is read. A watchdog thread (it needs no GIL from the solve: CP-SAT releases it)
    sleeps while the budget cannot be spent yet — a clock counting `rate` threads gains at
    most `rate` CPU seconds per second — then every `poll_s` at most, and once the budget is
    spent calls `solver.stop_search()` until the solve returns (a stop asked before CP-SAT
    has begun is lost, so it is asked again). Sleeping for what is left, not polling
    throughout, keeps the watchdog's own CPU time (counted by a process clock) from growing
    with the wall time a loaded core stretches the solve to. The solve overshoots its budget
    by about `rate` x `poll_s` and CP-SAT's reaction to the stop."""
    used: Callable[[], float]
    if solver.parameters.num_workers == 1:
        clock_id = time.pthread_getcpuclockid(threading.get_ident())
        used, rate = functools.partial(time.clock_gettime, clock_id), 1
    else:
        used, rate = time.process_time, os.cpu_count() or 1
    start = used()
    done = threading.Event()

    def watch() -> None:
        wait = max(poll_s, budget_s / rate)
        while not done.wait(wait):
            left = budget_s - (used() - start)
            if left <= 0:
                solver.stop_search()
            wait = max(poll_s, left / rate)

    watchdog = threading.Thread(target=watch, name="cp-sat cpu limit", daemon=True)
    watchdog.start()
    try:
        code = solver.solve(model)
    finally:
        done.set()
        watchdog.join()
    return code, used() - start


class PartitionModel:
    """One configuration's CP-SAT model; cuts and bounds are added between solves."""

    def __init__(
        self,
        inputs: PartitionInputs,
        *,
        modes: tuple[RecomputeMode, ...],
        split: StageSplit = "any",
        horizon_s: float,
        reference_s: float | None = None,
    ) -> None:
        self.inputs = inputs
        self.modes = modes
        self.runs = layer_runs(inputs)
        self.run_modes = tuple(undominated_modes(inputs, run.first, modes) for run in self.runs)
        # Units per second: the reference (a hint's step time) maps to 2^38 units, so the
        # rounding of a cut's L + S coefficients costs < (L + S) 2^-38 of the optimum.
        ref = reference_s if reference_s is not None else horizon_s
        self.scale = HORIZON_UNITS / max(ref, 1e-30)
        # A path passes every action at most once, so the per-action overhead adds at most
        # the overhead of all actions to a cut: T's domain covers it (0 without overhead).
        self.top = math.ceil((max(horizon_s, ref) + _overhead_horizon_s(inputs)) * self.scale) + 1
        self.model = cp_model.CpModel()
        self._exprs: dict[Key, cp_model.LinearExprT] = {}
        self._cuts: list[tuple[dict[Key, int], int]] = []  # coefficients, constant
        self._post: list[dict[Key, int]] = []
        self._seen: set[PathCut] = set()
        self._terms: list[_CutTerm] | None = None
        self._build(split)

    # ---- variables and constraints ------------------------------------------------------
    def _build(self, split: StageSplit) -> None:
        m, inp = self.model, self.inputs
        n_layers, n_st = inp.num_layers, inp.num_stages
        self.b: list[cp_model.IntVar] = [m.new_constant(0)]
        for s in range(1, n_st):
            self.b.append(m.new_int_var(s, n_layers - n_st + s, f"b_{s}"))
        self.b.append(m.new_constant(n_layers))
        for s in range(n_st):
            m.add(self.b[s] + 1 <= self.b[s + 1])
        self._z_vars: dict[Key, cp_model.IntVar] = {}
        for g, run in enumerate(self.runs):
            c: list[Any] = [self._clamp(self.b[s], run, s) for s in range(n_st + 1)]
            for s in range(n_st):
                lo, hi = s, n_layers - n_st + s  # layers stage s may hold
                if run.first > hi or run.first + run.count - 1 < lo:
                    continue
                y = c[s + 1] - c[s]
                self._exprs[("y", g, s, 0)] = y
                kept = self.run_modes[g]
                if len(kept) == 1:
                    self._exprs[("z", g, s, MODE_INDEX[kept[0]])] = y
                    continue
                zs = []
                for mode in kept:
                    k = MODE_INDEX[mode]
                    z = m.new_int_var(0, run.count, f"z_{g}_{s}_{k}")
                    self._exprs[("z", g, s, k)] = z
                    self._z_vars[("z", g, s, k)] = z
                    zs.append(z)
                m.add(sum(zs) == y)
        self._build_p2p()
        self._build_memory()
        self._build_post()
        self._build_split(split)
        self.t = m.new_int_var(0, self.top, "T")
        self.p = m.new_int_var(0, self.top, "P")
        for r in range(inp.pp):
            m.add(self.p >= self._linear(self._post[r]))
        m.minimize(self.t + self.p)

    def _clamp(self, b: cp_model.IntVar, run: Run, s: int) -> cp_model.LinearExprT:
        lo, hi = _domain(b)
        if hi <= run.first:
            return 0
        if lo >= run.first + run.count:
            return run.count
        # Where the domain already keeps b inside the run, the clamp is linear: no lin_max /
        # lin_min (their weak LP relaxation is what made interleaved models slow to prove).
        if lo >= run.first and hi <= run.first + run.count:
            return b - run.first
        if run.count == 1:
            v = self.model.new_bool_var(f"c_{run.first}_{s}")
            self.model.add(b >= run.first + 1).only_enforce_if(v)
            self.model.add(b <= run.first).only_enforce_if(~v)
            return v
        u = self.model.new_int_var(0, max(0, hi - run.first), f"u_{run.first}_{s}")
        self.model.add_max_equality(u, [b - run.first, 0])
        c = self.model.new_int_var(0, run.count, f"c_{run.first}_{s}")
        self.model.add_min_equality(c, [u, run.count])
        return c

    def _build_p2p(self) -> None:
        inp = self.inputs
        segments: list[tuple[int, int, float]] = []  # [lo, hi) layers with one p2p value
        for i, v in enumerate(inp.p2p_s):
            if segments and segments[-1][2] == v:
                segments[-1] = (segments[-1][0], i + 1, v)
            else:
                segments.append((i, i + 1, v))
        self.p2p_segments = tuple(segments)
        n_st = inp.num_stages
        for s in range(n_st - 1):
            nb = self.b[s + 1]  # last layer of stage s is nb - 1
            lo, hi = _domain(nb)
            live = [j for j, (a, end, _) in enumerate(segments) if a + 1 <= hi and end >= lo]
            if len(live) == 1:
                self._exprs[("e", s, live[0], 0)] = 1
                continue
            bools: list[cp_model.IntVar] = []
            for j in live:
                first, end, _ = segments[j]
                lit = self.model.new_bool_var(f"e_{s}_{j}")
                self.model.add(nb >= first + 1).only_enforce_if(lit)
                self.model.add(nb <= end).only_enforce_if(lit)
                self._exprs[("e", s, j, 0)] = lit
                bools.append(lit)
            self.model.add_exactly_one(bools)

    def _stage_terms(self, s: int) -> list[tuple[int, int]]:
        """(run, mode index) pairs with a variable in stage s."""
        return [(g, k) for (kind, g, st, k) in self._exprs if kind == "z" and st == s]

    def _build_memory(self) -> None:
        inp = self.inputs
        grow = 1.0 + inp.fragmentation_fraction
        # Bytes in units of 2^-38 of the largest possible rank footprint, rounded down.
        most = inp.fixed_bytes + sum(inp.static_bytes)
        most += grow * max(inp.inflight, default=0) * sum(max(a) for a in inp.activation_bytes)
        self._memory_points: set[tuple[int, HeldPoint]] = set()
        self._transients: dict[int, cp_model.IntVar | None] = {}  # stage -> _transient(stage)
        self._memory_unit = HORIZON_UNITS / max(most, inp.cap_bytes, 1e-30)
        for r in range(inp.pp):
            for row in memory_rows(inp, r):
                self._add_memory_row(r, *row)

    def add_memory_row(self, rank: int, point: HeldPoint) -> bool:
        """The memory row of one more held point of `rank` (a decoded partition broke it);
        False (and nothing added) if the model has it already."""
        if (rank, point) in self._memory_points:
            return False
        (row,) = memory_rows(self.inputs, rank, (point,))
        self._add_memory_row(rank, *row)
        return True

    def _add_memory_row(
        self, rank: int, point: HeldPoint, slot: dict[int, int], const: float
    ) -> None:
        inp, unit = self.inputs, self._memory_unit
        grow = 1.0 + inp.fragmentation_fraction
        self._memory_points.add((rank, point))
        coefs: dict[Key, int] = {}
        for s in slot:
            for g, k in self._stage_terms(s):
                first = self.runs[g].first
                act = grow * point.counts[slot[s]] * inp.activation_bytes[first][k]
                _add(coefs, ("z", g, s, k), math.floor(act * unit))
                if ("y", g, s, 0) not in coefs:
                    coefs[("y", g, s, 0)] = math.floor(inp.static_bytes[first] * unit)
        room = math.floor((inp.cap_bytes - inp.fixed_bytes - const) * unit)
        tau = None
        if const == 0.0 and point.phase in (ActionKind.B, ActionKind.I):
            tau = self._transient(point.stage)
        if tau is None:
            self.model.add(self._linear(coefs) <= room)
        else:
            self.model.add(cp_model.LinearExpr.sum([self._linear(coefs), tau]) <= room)

    def _transient(self, s: int) -> cp_model.IntVar | None:
        """Stage s's recompute transient in memory units, rounded down: at least
        (1 + frag) (act(none) - act(k)) of each run g whose z[g, s, k] is positive, the largest
        one of the recomputed layers (planner.cost.memory.MemoryTerms; the scorer charges it in
        the stage's backward, stage_recompute_bytes). Each term is rounded down, so the rows
        stay a relaxation. None without recompute transients or recomputable layers in s."""
        if s in self._transients:
            return self._transients[s]
        inp, unit = self.inputs, self._memory_unit
        grow = 1.0 + inp.fragmentation_fraction
        none = MODE_INDEX["none"]
        terms: list[tuple[Any, int]] = []
        if inp.recompute_transient:
            for g, k in self._stage_terms(s):
                if k == none:
                    continue
                act = inp.activation_bytes[self.runs[g].first]
                units = math.floor(grow * (act[none] - act[k]) * unit)
                if units > 0:
                    terms.append((self._exprs[("z", g, s, k)], units))
        tau: cp_model.IntVar | None = None
        if terms:
            tau = self.model.new_int_var(0, max(u for _, u in terms), f"tau_{s}")
            for z, units in terms:
                if isinstance(z, int):  # a count fixed by the stage's domain
                    if z > 0:
                        self.model.add(tau >= units)
                    continue
                used = self.model.new_bool_var("")
                self.model.add(z <= 0).only_enforce_if(~used)
                self.model.add(tau >= units).only_enforce_if(used)
        self._transients[s] = tau
        return tau

    def _build_post(self) -> None:
        inp = self.inputs
        for r in range(inp.pp):
            coefs: dict[Key, int] = {}
            for key in self._exprs:
                kind, g, s, _ = key
                if kind == "y" and inp.stage_rank[s] == r:
                    coefs[key] = math.floor(inp.post_s[self.runs[g].first] * self.scale)
            self._post.append(coefs)

    def _build_split(self, split: StageSplit) -> None:
        n_st = self.inputs.num_stages
        if split == "first_last" and n_st >= 4:
            size = [self.b[s + 1] - self.b[s] for s in range(1, n_st - 1)]
            for s in range(1, len(size)):
                self.model.add(size[s] == size[0])
        elif split == "uniform" and n_st >= 2:
            main = max(range(len(self.runs)), key=lambda g: self.runs[g].count)
            ys = [self._exprs.get(("y", main, s, 0), 0) for s in range(n_st)]
            for s in range(1, n_st):
                if isinstance(ys[s], int) and isinstance(ys[0], int):
                    if ys[s] != ys[0]:  # two fixed, different counts: nothing fits
                        self.model.add_bool_or([])
                    continue
                self.model.add(ys[s] == ys[0])

    def _linear(self, coefs: dict[Key, int]) -> cp_model.LinearExprT:
        exprs = self._exprs
        keys = [k for k, c in coefs.items() if c]
        return cp_model.LinearExpr.weighted_sum([exprs[k] for k in keys], [coefs[k] for k in keys])

    # ---- cuts, bounds, hints --------------------------------------------------------------
    def add_path_cut(self, cut: PathCut) -> bool:
        """T >= the path's length, every coefficient rounded down (a valid lower bound).
        Returns False (and adds nothing) for a path already in the model."""
        if cut in self._seen:
            return False
        self._seen.add(cut)
        inp, sc = self.inputs, self.scale
        coefs: dict[Key, int] = {}
        f, x = cut.f, cut.x
        weight = [b + w for b, w in zip(cut.b, cut.w, strict=True)]
        grad = [b + i for b, i in zip(cut.b, cut.i, strict=True)]
        floor = math.floor
        for key, s, fw, bw_weight, bw_input in self._cut_terms():
            if bw_weight is None:  # "e": its p2p segment's time (fw) per crossing of s
                coefs[key] = floor(x[s] * fw * sc)
            else:
                # a layer's whole term, rounded down once (< 1 unit lost per layer):
                # floor(a + b_k) z_k <= (a + b_k) z_k and sum_k z_k = y, so the sum stays
                # at most a y + sum_k b_k z_k, the path's length
                coefs[key] = floor((f[s] * fw + weight[s] * bw_weight + grad[s] * bw_input) * sc)
        constant = cut_constant_units(cut, inp, sc)
        self._cuts.append((coefs, constant))
        bound = self._linear(coefs)
        self.model.add(self.t >= (bound + constant if constant else bound))
        return True

    def _cut_terms(self) -> list[_CutTerm]:
        """A path cut's terms in the order of the model's expressions (y folded into each
        mode's count z: sum_k z[g,s,k] = y[g,s]): (key, stage or boundary, then the layer's
        forward, weight-gradient and input-gradient backward times in its mode for a z, or
        the p2p segment's time and None for an e), built once per model."""
        if self._terms is None:
            inp = self.inputs
            terms: list[_CutTerm] = []
            for key in self._exprs:
                kind, g, s, k = key
                if kind == "z":
                    first = self.runs[g].first
                    bw_input = inp.bw_input_s[first][k]
                    terms.append((key, s, inp.fw_s[first], inp.bw_weight_s[first], bw_input))
                elif kind == "e":  # g is the boundary index s, s the segment j
                    terms.append((key, g, self.p2p_segments[s][2], None, 0.0))
            self._terms = terms
            return terms
        return self._terms

    def add_objective_bound(self, units: int) -> None:
        self.model.add(self.t + self.p <= units)

    def minimise_recompute(self) -> float:
        """Replace the objective with R = sum_z floor(u (bw_input_k - bw_input_none)) z, a
        lower bound of the partition's recompute time per micro-batch (exact.recompute_s)
        in units of 1/u seconds (the largest possible recompute time maps to 2^38 units):
        objective bubble's tie phase (exact.tie_phase). Returns u; without recompute time
        in any allowed mode R is 0 and the objective is dropped."""
        inp = self.inputs
        none = MODE_INDEX["none"]
        most = sum(max(bw) - bw[none] for bw in inp.bw_input_s)
        unit = HORIZON_UNITS / max(most, 1e-30)
        coefs: dict[Key, int] = {}
        for key in self._exprs:
            kind, g, _, k = key
            if kind == "z":
                bw = inp.bw_input_s[self.runs[g].first]
                coefs[key] = math.floor((bw[k] - bw[none]) * unit)
        if any(coefs.values()):
            self.model.minimize(self._linear(coefs))
        elif self.model.has_objective():
            self.model.clear_objective()  # type: ignore[no-untyped-call]
        return unit

    def lower_bound_units(self, part: Partition) -> int:
        """The model's current integer lower bound T + P for a given partition."""
        values = self.assignment(part)

        def val(coefs: dict[Key, int]) -> int:
            return sum(c * values.get(k, 0) for k, c in coefs.items())

        t = max((val(c) + k for c, k in self._cuts), default=0)
        return t + max(val(c) for c in self._post)

    def assignment(self, part: Partition) -> dict[Key, int]:
        values: dict[Key, int] = {}
        for key in self._exprs:
            kind, g, s, k = key
            if kind == "e":
                last = part.bounds[g + 1] - 1
                lo, hi, _ = self.p2p_segments[s]
                values[key] = int(lo <= last < hi)
                continue
            run = self.runs[g]
            layers = range(
                max(run.first, part.bounds[s]), min(run.first + run.count, part.bounds[s + 1])
            )
            if kind == "y":
                values[key] = len(layers)
            else:
                values[key] = sum(1 for i in layers if MODE_INDEX[part.modes[i]] == k)
        return values

    def add_count_bounds(self, run: int, domains: tuple[tuple[int, int], ...]) -> None:
        """lo <= (layers of `run` on rank r) <= hi per rank, then per stage: count domains that
        hold every better partition (planner.search.domains, from the whole-layer floors, and
        planner.search.exact.probe_phase).
        Valid constraints (they cut off nothing that could win); they make CP-SAT's search
        much smaller (145.6B's winner: probe_phase)."""
        inp = self.inputs
        groups = [
            [s for s in range(inp.num_stages) if inp.stage_rank[s] == r] for r in range(inp.pp)
        ]
        groups += [[s] for s in range(inp.num_stages)]
        for stages, (lo, hi) in zip(groups, domains, strict=True):
            ys = [self._exprs[("y", run, s, 0)] for s in stages if ("y", run, s, 0) in self._exprs]
            if ys:
                total = sum(ys)
                self.model.add(total >= lo)
                self.model.add(total <= hi)
            elif lo > 0:
                self.model.add_bool_or([])  # no layer of the run can be here: nothing fits

    def add_hint(self, part: Partition) -> None:
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        for s in range(1, self.inputs.num_stages):
            self.model.add_hint(self.b[s], part.bounds[s])
        values = self.assignment(part)
        for key, var in self._z_vars.items():
            self.model.add_hint(var, values[key])

    def add_no_good(self, part: Partition) -> None:
        """Exclude exactly this partition (boundaries and mode counts)."""
        values = self.assignment(part)
        lits = []
        pairs: list[tuple[cp_model.IntVar, int]] = [
            (self.b[s], part.bounds[s]) for s in range(1, self.inputs.num_stages)
        ]
        pairs += [(var, values[key]) for key, var in self._z_vars.items()]
        for var, value in pairs:
            lit = self.model.new_bool_var("")
            self.model.add(var != value).only_enforce_if(lit)
            lits.append(lit)
        self.model.add_bool_or(lits)

    # ---- solve and decode -------------------------------------------------------------------
    def solve(
        self,
        *,
        time_limit_s: float,
        workers: int,
        seed: int,
        feasibility: bool = False,
        cpu: CpuLimit | None = None,
    ) -> SolveOutcome:
        """Minimise T + P, or with `feasibility` find any partition meeting the constraints
        (the objective is dropped for good: the exactness loop only needs a partition under
        the incumbent's bound, and proving that none exists is much faster without asking
        CP-SAT for the minimum: 18.4B's pp = 2 interleaved vpp = 11, 11 s vs no proof in 20 s).
        `time_limit_s` is wall time, or with `cpu` CPU time (solve_on_cpu)."""
        if feasibility and self.model.has_objective():
            self.model.clear_objective()  # type: ignore[no-untyped-call]
        solver = cp_model.CpSolver()
        limit_s = max(time_limit_s, 0.001)
        wall_s = limit_s * cpu.wall_factor if cpu is not None else limit_s
        solver.parameters.max_time_in_seconds = wall_s
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        # OR-Tools 9.15's presolve declared feasibility models INFEASIBLE that a fixed
        # assignment of the same model satisfies, i.e. proved a worse plan optimal (random
        # exactness cases seed 1 / 95 and 2 / 40 with probing on, seed 0 / 127 with probing
        # off; with presolve off all three are right). A wrong INFEASIBLE is a wrong proof, so
        # presolve stays off (the models are small; the cut rows are what it would tighten).
        solver.parameters.cp_model_presolve = False
        if cpu is None:
            code = solver.solve(self.model)
            spent = solver.wall_time
        else:
            code, spent = solve_on_cpu(solver, self.model, budget_s=limit_s, poll_s=cpu.poll_s)
        name = solver.status_name(code)
        if name == "MODEL_INVALID":
            raise RuntimeError(f"invalid CP-SAT model: {self.model.validate()}")
        status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"] = (
            name if name in ("OPTIMAL", "FEASIBLE", "INFEASIBLE") else "UNKNOWN"  # type: ignore[assignment]
        )
        if status in ("INFEASIBLE", "UNKNOWN"):
            return SolveOutcome(status, None, None, solver.wall_time, spent)
        objective = int(solver.objective_value) if self.model.has_objective() else None
        return SolveOutcome(status, self._decode(solver), objective, solver.wall_time, spent)

    def _decode(self, solver: cp_model.CpSolver) -> Partition:
        inp = self.inputs
        bounds = tuple(int(solver.value(v)) for v in self.b)
        modes: list[RecomputeMode] = [self.modes[0]] * inp.num_layers
        for g, run in enumerate(self.runs):
            for i in range(run.first, run.first + run.count):
                modes[i] = self.run_modes[g][0]
        if len(self.modes) > 1:
            for g, run in enumerate(self.runs):
                for s in range(inp.num_stages):
                    first = max(run.first, bounds[s])
                    end = min(run.first + run.count, bounds[s + 1])
                    i = first
                    for mode in self.run_modes[g]:
                        expr = self._exprs.get(("z", g, s, MODE_INDEX[mode]))
                        count = int(solver.value(expr)) if expr is not None else 0
                        for _ in range(count):
                            if i < end:
                                modes[i] = mode
                                i += 1
        return Partition(bounds=bounds, modes=tuple(modes))


def cut_constant_units(cut: PathCut, inputs: PartitionInputs, scale: float) -> int:
    """The path's length over the per-action overhead alone, in model units, rounded down
    (0 when the inputs carry no overhead)."""
    return math.floor(cut.length_s(inputs.overhead_durations) * scale)


def _overhead_horizon_s(inputs: PartitionInputs) -> float:
    """The overhead of every action of the schedule: m micro-batches x every stage's F and
    its backward (B, or I + W), an upper bound of any path's overhead term."""
    f, b, _ = inputs.stage_overhead_s
    return inputs.num_microbatches * inputs.num_stages * (f + b)


def _add(coefs: dict[Key, int], key: Key, value: int) -> None:
    coefs[key] = coefs.get(key, 0) + value


def _domain(var: cp_model.IntVar) -> tuple[int, int]:
    """(min, max) of a variable's domain (the proto view does not support negative indices)."""
    d = list(var.proto.domain)
    return d[0], d[-1]


def undominated_modes(
    inputs: PartitionInputs, layer: int, modes: tuple[RecomputeMode, ...]
) -> tuple[RecomputeMode, ...]:
    """The modes of a layer that no other allowed mode beats in both backward time and
    activation bytes (ties keep the first): switching a layer to a dominating mode never
    lengthens any stage or grows any rank, so the optimum is among the undominated ones."""
    bw, act = inputs.bw_input_s[layer], inputs.activation_bytes[layer]

    def beats(a: RecomputeMode, b: RecomputeMode) -> bool:
        ka, kb = MODE_INDEX[a], MODE_INDEX[b]
        if bw[ka] <= bw[kb] and act[ka] <= act[kb]:
            return (bw[ka], act[ka]) != (bw[kb], act[kb]) or modes.index(a) < modes.index(b)
        return False

    return tuple(b for b in modes if not any(beats(a, b) for a in modes if a != b))
